package memstore_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/memstore"
	"github.com/rlcore/rl/store"
)

// A store with a byte budget: a key is charged what its limits can hold
// when it is created (here a sliding log of 4096 entries, 32 KiB), and a new
// key that does not fit is refused with ErrBudget, an ErrFull, while the keys
// already there go on being decided.
func ExampleConfig_maxBytes() {
	s := memstore.New(&memstore.Config{MaxBytes: 100 << 10, SweepInterval: -1, Clock: func() int64 { return 1_767_225_600_000_000 }})
	defer s.Close()
	log, err := store.NewPolicy([]string{"default"}, []core.Limit{{Algorithm: core.SlidingLog, Limit: 4096, Window: 60_000_000}})
	if err != nil {
		panic(err)
	}
	decide := func(key string) error {
		_, _, err := s.Decide(context.Background(), store.Request{Policy: log, Key: key, Now: 1_767_225_600_000_000, Cost: 1}, nil)
		return err
	}
	for _, key := range []string{"a", "b", "c", "d", "a"} {
		err := decide(key)
		fmt.Printf("%s: full=%v\n", key, errors.Is(err, store.ErrFull))
	}
	fmt.Printf("%d keys, %d logs of 32 KiB charged (and their entries)\n", s.Len(), s.Bytes()/(32<<10))
	// Output:
	// a: full=false
	// b: full=false
	// c: full=false
	// d: full=true
	// a: full=false
	// 3 keys, 3 logs of 32 KiB charged (and their entries)
}
