package wasm

import (
	"context"
	"sync"
	"testing"
)

// BenchmarkPool measures taking an instance and giving it back, the pool's
// whole cost per call, for the atomic slots the Pool uses and for the two
// usual alternatives over the same instances: a buffered channel and a
// mutex-guarded stack. (sync.Pool is ruled out: it drops items at GC, and a
// dropped instance would have to be closed and restarted, milliseconds each.)
func BenchmarkPool(b *testing.B) {
	ctx := context.Background()
	p, err := New(ctx, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(ctx)
	in, err := p.get()
	if err != nil {
		b.Fatal(err)
	}
	p.put(in)

	ch := make(chan *instance, p.max)
	ch <- in
	var mu sync.Mutex
	stack := []*instance{in}

	for _, s := range []struct {
		name     string
		get      func() *instance
		put      func(*instance)
		parallel bool
	}{
		{name: "pool=slots", get: func() *instance { in, _ := p.get(); return in }, put: p.put},
		{name: "pool=channel", get: func() *instance { return <-ch }, put: func(in *instance) { ch <- in }},
		{name: "pool=mutex", get: func() *instance {
			mu.Lock()
			in := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			mu.Unlock()
			return in
		}, put: func(in *instance) {
			mu.Lock()
			stack = append(stack, in)
			mu.Unlock()
		}},
	} {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.put(s.get())
			}
		})
	}
}
