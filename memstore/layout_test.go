//go:build amd64 || arm64

package memstore

import (
	"testing"
	"unsafe"
)

// TestEntryLayout pins the cache lines a decision on a single-limit key
// reads (see entry): the lookup and the lock in line 0, the expiry and the
// state in line 1, the text and the name in line 2, and a size that is a
// whole number of lines, so that the allocator keeps entries line-aligned.
func TestEntryLayout(t *testing.T) {
	var e entry
	const line = 64
	for _, f := range []struct {
		name      string
		off, size uintptr
		line      uintptr
	}{
		{"h", unsafe.Offsetof(e.h), unsafe.Sizeof(e.h), 0},
		{"one", unsafe.Offsetof(e.one), unsafe.Sizeof(e.one), 0},
		{"expires", unsafe.Offsetof(e.expires), unsafe.Sizeof(e.expires), 1},
		{"state1", unsafe.Offsetof(e.state1), unsafe.Sizeof(e.state1), 1},
		{"text", unsafe.Offsetof(e.text), unsafe.Sizeof(e.text), 2},
		{"name1", unsafe.Offsetof(e.name1), unsafe.Sizeof(e.name1), 2},
	} {
		if f.off/line != f.line || (f.off+f.size-1)/line != f.line {
			t.Errorf("entry.%s at bytes %d to %d, not in line %d", f.name, f.off, f.off+f.size, f.line)
		}
	}
	if size := unsafe.Sizeof(e); size%line != 0 {
		t.Errorf("entry is %d bytes, not a whole number of %d-byte lines", size, line)
	}
}
