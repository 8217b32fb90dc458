package rl

import (
	"math/rand/v2"
	"testing"
)

// TestPrintable compares printable with the byte table on random keys,
// mostly valid ones (the fast path must say yes to them) and some with a
// stray byte.
func TestPrintable(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		b := make([]byte, 1+r.IntN(40))
		for i := range b {
			b[i] = byte(0x21 + r.IntN(0x7e-0x21+1))
		}
		if r.IntN(2) == 0 {
			b[r.IntN(len(b))] = byte(r.IntN(256))
		}
		want := true
		for _, c := range b {
			want = want && keyChars[c]
		}
		if got := printable(string(b)); got != want {
			t.Fatalf("printable(%q) = %v", b, got)
		}
	}
}
