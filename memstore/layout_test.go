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

// TestStoreLayout pins the cache lines of the Store, of a shard and of its
// table (see Store, shard and table): what every lookup reads in lines no
// write shares while the store runs (creating or dropping a key, a sweep,
// Close), and
// sizes in whole lines, so that the allocator keeps them line-aligned (a
// size class that is a multiple of 64 bytes starts each object on a line).
func TestStoreLayout(t *testing.T) {
	const line = 64
	var s Store
	var sh shard
	type field struct {
		name      string
		off, size uintptr
		line      uintptr
	}
	for _, c := range []struct {
		what   string
		size   uintptr
		lines  uintptr
		fields []field
	}{
		{"Store", unsafe.Sizeof(s), 3, []field{
			{"shards", unsafe.Offsetof(s.shards), unsafe.Sizeof(s.shards), 0},
			{"mask", unsafe.Offsetof(s.mask), unsafe.Sizeof(s.mask), 0},
			{"seed", unsafe.Offsetof(s.seed), unsafe.Sizeof(s.seed), 0},
			{"k0", unsafe.Offsetof(s.k0), unsafe.Sizeof(s.k0), 0},
			{"k1", unsafe.Offsetof(s.k1), unsafe.Sizeof(s.k1), 0},
			{"perCap", unsafe.Offsetof(s.perCap), unsafe.Sizeof(s.perCap), 0},
			{"budget", unsafe.Offsetof(s.budget), unsafe.Sizeof(s.budget), 1},
			{"native", unsafe.Offsetof(s.native), unsafe.Sizeof(s.native), 1},
			{"used", unsafe.Offsetof(s.used), unsafe.Sizeof(s.used), 2},
			{"swept", unsafe.Offsetof(s.swept), unsafe.Sizeof(s.swept), 2},
			{"horizon", unsafe.Offsetof(s.horizon), unsafe.Sizeof(s.horizon), 2},
			{"closed", unsafe.Offsetof(s.closed), unsafe.Sizeof(s.closed), 2},
			{"stopped", unsafe.Offsetof(s.stopped), unsafe.Sizeof(s.stopped), 2},
		}},
		{"table", unsafe.Sizeof(table{}), 1, nil},
		{"shard", unsafe.Sizeof(sh), 2, []field{
			{"tab", unsafe.Offsetof(sh.tab), unsafe.Sizeof(sh.tab), 0},
			{"mu", unsafe.Offsetof(sh.mu), unsafe.Sizeof(sh.mu), 1},
			{"n", unsafe.Offsetof(sh.n), unsafe.Sizeof(sh.n), 1},
		}},
	} {
		for _, f := range c.fields {
			if f.off/line != f.line || (f.off+f.size-1)/line != f.line {
				t.Errorf("%s.%s at bytes %d to %d, not in line %d", c.what, f.name, f.off, f.off+f.size, f.line)
			}
		}
		if c.size != c.lines*line {
			t.Errorf("%s is %d bytes, not %d %d-byte lines", c.what, c.size, c.lines, line)
		}
	}
}
