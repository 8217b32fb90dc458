package rl

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

// PolicyOf makes of a compiled store policy the Policy NewPolicy makes of
// the same limits, shadow limits included, and refuses no policy.
func TestPolicyOf(t *testing.T) {
	sp := store.MustPolicy([]string{"burst", "trial"},
		core.Limit{Algorithm: core.TokenBucket, Limit: 10, Window: 1_000_000, Rate: 5},
		core.Limit{Algorithm: core.FixedWindow, Limit: 100, Window: 60_000_000})
	sp, err := sp.WithShadow("trial")
	if err != nil {
		t.Fatal(err)
	}
	p, err := PolicyOf(sp)
	if err != nil {
		t.Fatal(err)
	}
	want := MustPolicy(Limit{Name: "burst", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, Rate: 5},
		Limit{Name: "trial", Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute, Shadow: true})
	if fmt.Sprint(p.Limits()) != fmt.Sprint(want.Limits()) || !p.Shadowed() || p.Len() != 2 {
		t.Fatalf("limits %v, want %v", p.Limits(), want.Limits())
	}
	if _, err := PolicyOf(nil); !errors.Is(err, ErrPolicy) {
		t.Fatalf("nil: %v, want ErrPolicy", err)
	}
}
