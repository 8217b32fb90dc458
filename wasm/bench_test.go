package wasm_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/wasm"
)

// go test -run '^$' -bench . -benchmem ./wasm
//
// BenchmarkTakeAll compares one single-limit decision (a token bucket that
// admits most calls) natively, through the host (decider=wasm), and through
// the host with a module that decides nothing (decider=wasm-noop: the host's
// own cost, pool + buffer encoding + call); serially and with RunParallel.
func BenchmarkTakeAll(b *testing.B) {
	ls := []core.Limit{{Algorithm: core.TokenBucket, Limit: 1000, Window: 1_000_000}}
	noop, err := wasm.New(context.Background(), wasm.Config{Module: defaultFake().module()})
	if err != nil {
		b.Fatal(err)
	}
	defer noop.Close(context.Background())
	for _, d := range []struct {
		name string
		d    core.Decider
	}{{"native", core.Native{}}, {"wasm", pool}, {"wasm-noop", noop}} {
		b.Run("decider="+d.name, func(b *testing.B) {
			ss, ds := make([]core.State, 1), make([]core.Decision, 1)
			now := int64(1767225600000000)
			b.ReportAllocs()
			for b.Loop() {
				now += 1000
				if _, err := d.d.TakeAll(ls, ss, now, 1, ds); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("decider="+d.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ss, ds := make([]core.State, 1), make([]core.Decision, 1)
				now := int64(1767225600000000)
				for pb.Next() {
					now += 1000
					if _, err := d.d.TakeAll(ls, ss, now, 1, ds); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkCompile measures compiling rl.wasm: without a compilation cache,
// with a warm in-memory cache (what every Pool after the first in a process
// pays), and with a warm directory cache read by a new cache object (what a
// restarted process with Config.CacheDir pays).
func BenchmarkCompile(b *testing.B) {
	ctx := context.Background()
	mod := wasm.Module()
	compile := func(b *testing.B, cfg wazero.RuntimeConfig) {
		rt := wazero.NewRuntimeWithConfig(ctx, cfg)
		defer rt.Close(ctx)
		if _, err := rt.CompileModule(ctx, mod); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("cache=none", func(b *testing.B) {
		for b.Loop() {
			compile(b, wazero.NewRuntimeConfig())
		}
	})
	b.Run("cache=memory", func(b *testing.B) {
		cache := wazero.NewCompilationCache()
		defer cache.Close(ctx)
		compile(b, wazero.NewRuntimeConfig().WithCompilationCache(cache))
		for b.Loop() {
			compile(b, wazero.NewRuntimeConfig().WithCompilationCache(cache))
		}
	})
	b.Run("cache=dir", func(b *testing.B) {
		dir := b.TempDir()
		warm := func() wazero.CompilationCache {
			cache, err := wazero.NewCompilationCacheWithDir(dir)
			if err != nil {
				b.Fatal(err)
			}
			return cache
		}
		c := warm()
		compile(b, wazero.NewRuntimeConfig().WithCompilationCache(c))
		c.Close(ctx)
		for b.Loop() {
			c := warm()
			compile(b, wazero.NewRuntimeConfig().WithCompilationCache(c))
			c.Close(ctx)
		}
	})
}

// BenchmarkInstance measures starting one instance (instantiation and the Go
// runtime's _initialize) and reports what an instance costs in memory: its
// linear memory (linear-bytes/instance) and the growth of the Go heap per
// live instance (heap-bytes/instance).
func BenchmarkInstance(b *testing.B) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(wazero.NewCompilationCache()))
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	compiled, err := rt.CompileModule(ctx, wasm.Module())
	if err != nil {
		b.Fatal(err)
	}
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize")
	start := func() uint32 {
		m, err := rt.InstantiateModule(ctx, compiled, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close(ctx)
		return m.ExportedMemory("memory").Size()
	}
	var linear uint32
	b.ReportAllocs()
	for b.Loop() {
		linear = start()
	}
	b.ReportMetric(float64(linear), "linear-bytes/instance")

	const live = 16
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	mods := make([]interface{ Close(context.Context) error }, live)
	for i := range mods {
		if mods[i], err = rt.InstantiateModule(ctx, compiled, cfg); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	for _, m := range mods {
		m.Close(ctx)
	}
	b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/live, "heap-bytes/instance")
}
