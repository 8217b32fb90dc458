//go:build amd64 || arm64

package memstore

import (
	"testing"
	"unsafe"
)

// TestEntryLayout pins the cache lines a decision on a compact key reads
// (see entry): the lookup's fields, written only when the key is created or
// relinked, in line 0; the lock, the policy's ID, the expiry and the state,
// written by every decision, in line 1; and a size of two lines, a size
// class the allocator keeps line-aligned.
func TestEntryLayout(t *testing.T) {
	var e entry
	const line = 64
	for _, f := range []struct {
		name      string
		off, size uintptr
		line      uintptr
	}{
		{"next", unsafe.Offsetof(e.next), unsafe.Sizeof(e.next), 0},
		{"h", unsafe.Offsetof(e.h), unsafe.Sizeof(e.h), 0},
		{"klen", unsafe.Offsetof(e.klen), unsafe.Sizeof(e.klen), 0},
		{"plen", unsafe.Offsetof(e.plen), unsafe.Sizeof(e.plen), 0},
		{"ext", unsafe.Offsetof(e.ext), unsafe.Sizeof(e.ext), 0},
		{"text", unsafe.Offsetof(e.text), unsafe.Sizeof(e.text), 0},
		{"mu", unsafe.Offsetof(e.mu), unsafe.Sizeof(e.mu), 1},
		{"pol", unsafe.Offsetof(e.pol), unsafe.Sizeof(e.pol), 1},
		{"expires", unsafe.Offsetof(e.expires), unsafe.Sizeof(e.expires), 1},
		{"alg", unsafe.Offsetof(e.alg), unsafe.Sizeof(e.alg), 1},
		{"one", unsafe.Offsetof(e.one), unsafe.Sizeof(e.one), 1},
		{"nlen", unsafe.Offsetof(e.nlen), unsafe.Sizeof(e.nlen), 1},
		{"t", unsafe.Offsetof(e.t), unsafe.Sizeof(e.t), 1},
		{"y", unsafe.Offsetof(e.y), unsafe.Sizeof(e.y), 1},
	} {
		if f.off/line != f.line || (f.off+f.size-1)/line != f.line {
			t.Errorf("entry.%s at bytes %d to %d, not in line %d", f.name, f.off, f.off+f.size, f.line)
		}
	}
	if size := unsafe.Sizeof(e); size != 2*line {
		t.Errorf("entry is %d bytes, not two %d-byte lines", size, line)
	}
}
