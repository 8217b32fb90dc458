package wasm

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/rlcore/rl/core"
)

// Config configures a Pool. The zero value is ready to use: the embedded
// module, the process-wide in-memory compilation cache and 2 × GOMAXPROCS
// instances at most.
type Config struct {
	// MaxInstances bounds the number of module instances. Each serves one
	// call at a time; a call finding all of them busy waits for one. They
	// are started on demand and kept until Close. 0 means
	// 2 × runtime.GOMAXPROCS(0).
	MaxInstances int
	// CacheDir, when set, is a directory where wazero keeps compiled code
	// across processes, so a restarted process skips compilation. The
	// directory is created if needed and must not be shared with untrusted
	// writers. "" means a compilation cache in memory shared by every Pool
	// of the process, so the module is compiled once per process.
	CacheDir string
	// Module is the WebAssembly module to host; nil means the embedded
	// rl.wasm. It must implement ABI.md at ABIVersion. Meant for tests and
	// for hosting a module built elsewhere.
	Module []byte
}

// Stats is a snapshot of a Pool's instances.
type Stats struct {
	// Instances is the number of live instances, busy or idle.
	Instances int
	// Idle is the number of instances waiting for a call.
	Idle int
	// Started counts the instances started since New.
	Started uint64
	// Discarded counts the instances discarded after a trap.
	Discarded uint64
}

// Pool hosts the module: a compiled module and a bounded pool of instances
// of it. It implements core.Decider and is safe for concurrent use; see the
// package doc for the pooling strategy.
type Pool struct {
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	cache    wazero.CompilationCache // closed by Close when owned (CacheDir)
	modCfg   wazero.ModuleConfig

	// slots hold idle instances: the fast path takes and returns one with a
	// single atomic operation each.
	slots []slot

	closed  atomic.Bool
	waiters atomic.Int32 // callers in getSlow waiting for an instance

	mu        sync.Mutex
	cond      sync.Cond // signalled when an instance is returned or discarded
	live      int       // instances started and not yet closed; guarded by mu
	max       int
	started   atomic.Uint64
	discarded atomic.Uint64
	closeOnce sync.Once
}

// slot is one idle-instance slot, padded to its own cache line so that
// parallel callers on distinct slots do not contend.
type slot struct {
	p atomic.Pointer[instance]
	_ [56]byte
}

// instance is one module instance with everything a call needs
// preallocated.
type instance struct {
	mod                                     api.Module
	mem                                     api.Memory
	take, peek, takeAll, peekAll, settleAll api.Function
	buf                                     uint32   // address of the module's buffer
	stack                                   []uint64 // parameters and result of a call
	stderr                                  *headWriter
}

// process-wide in-memory compilation cache: the module is compiled once per
// process whatever the number of Pools.
var memoryCache = sync.OnceValue(wazero.NewCompilationCache)

// New compiles the module (or finds it in the compilation cache), starts one
// instance and checks its abi_version and buffer layout. A module that is not
// at ABIVersion returns an error matching ErrABIVersion.
func New(ctx context.Context, cfg Config) (*Pool, error) {
	p := &Pool{max: cfg.MaxInstances}
	if p.max <= 0 {
		p.max = 2 * runtime.GOMAXPROCS(0)
	}
	p.cond.L = &p.mu
	p.slots = make([]slot, p.max)

	cache := memoryCache()
	if cfg.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("wasm: compilation cache: %w", err)
		}
		cache, p.cache = c, c
	}
	p.rt = wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache))
	fail := func(err error) (*Pool, error) {
		p.rt.Close(ctx)
		if p.cache != nil {
			p.cache.Close(ctx)
		}
		return nil, err
	}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, p.rt); err != nil {
		return fail(fmt.Errorf("wasm: WASI: %w", err))
	}
	bin := cfg.Module
	if bin == nil {
		bin = module
	}
	compiled, err := p.rt.CompileModule(ctx, bin)
	if err != nil {
		return fail(fmt.Errorf("wasm: compile: %w", err))
	}
	p.compiled = compiled
	// A reactor (Go's -buildmode=c-shared): _initialize, not _start.
	p.modCfg = wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize")

	in, err := p.start(ctx, true)
	if err != nil {
		return fail(err)
	}
	p.live = 1
	p.slots[0].p.Store(in)
	return p, nil
}

// start instantiates the module and prepares an instance. check also verifies
// abi_version (once per Pool: every instance comes from the same module).
func (p *Pool) start(ctx context.Context, check bool) (*instance, error) {
	in := &instance{stderr: &headWriter{}, stack: make([]uint64, 3)}
	mod, err := p.rt.InstantiateModule(ctx, p.compiled, p.modCfg.WithStderr(in.stderr))
	if err != nil {
		return nil, fmt.Errorf("wasm: instantiate: %w%s", err, in.stderr.suffix())
	}
	in.mod = mod
	fail := func(err error) (*instance, error) {
		mod.Close(ctx)
		return nil, err
	}
	if check {
		f := mod.ExportedFunction("abi_version")
		if f == nil {
			return fail(fmt.Errorf("%w: no abi_version export", ErrABIVersion))
		}
		v, err := f.Call(ctx)
		if err != nil {
			return fail(fmt.Errorf("wasm: abi_version: %w", err))
		}
		if got := int32(v[0]); got != ABIVersion {
			return fail(fmt.Errorf("%w: module speaks %d, host %d", ErrABIVersion, got, ABIVersion))
		}
		for _, c := range [...]struct {
			name string
			want uint64
		}{{"rl_buffer_size", bufferBytes}, {"rl_max_limits", MaxLimits}, {"rl_log_slots", logSlots}} {
			f := mod.ExportedFunction(c.name)
			if f == nil {
				return fail(fmt.Errorf("%w: no %s export", ErrABIVersion, c.name))
			}
			v, err := f.Call(ctx)
			if err != nil {
				return fail(fmt.Errorf("wasm: %s: %w", c.name, err))
			}
			if got := uint64(uint32(v[0])); got != c.want {
				return fail(fmt.Errorf("%w: %s is %d, want %d", ErrABIVersion, c.name, got, c.want))
			}
		}
	}
	for _, e := range [...]struct {
		name string
		f    *api.Function
	}{{"rl_take", &in.take}, {"rl_peek", &in.peek}, {"rl_take_all", &in.takeAll}, {"rl_peek_all", &in.peekAll}, {"rl_settle_all", &in.settleAll}} {
		if *e.f = mod.ExportedFunction(e.name); *e.f == nil {
			return fail(fmt.Errorf("%w: no %s export", ErrABIVersion, e.name))
		}
	}
	f := mod.ExportedFunction("rl_buffer")
	if f == nil {
		return fail(fmt.Errorf("%w: no rl_buffer export", ErrABIVersion))
	}
	v, err := f.Call(ctx)
	if err != nil {
		return fail(fmt.Errorf("wasm: rl_buffer: %w", err))
	}
	in.buf = uint32(v[0])
	if in.mem = mod.ExportedMemory("memory"); in.mem == nil {
		return fail(fmt.Errorf("%w: no memory export", ErrABIVersion))
	}
	if _, ok := in.mem.Read(in.buf, bufferBytes); !ok {
		return fail(fmt.Errorf("%w: buffer at %d overruns memory of %d bytes", ErrABIVersion, in.buf, in.mem.Size()))
	}
	p.started.Add(1)
	return in, nil
}

// get returns an instance for the caller's exclusive use until put or
// discard.
func (p *Pool) get() (*instance, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	for i := range p.slots {
		s := &p.slots[i].p
		if in := s.Load(); in != nil && s.CompareAndSwap(in, nil) {
			return in, nil
		}
	}
	return p.getSlow()
}

// getSlow waits for an idle instance or starts a new one if the pool is
// below MaxInstances.
func (p *Pool) getSlow() (*instance, error) {
	p.mu.Lock()
	// Announce the wait before rescanning: a put that misses the
	// announcement stored its instance before the rescan, which finds it.
	p.waiters.Add(1)
	defer p.waiters.Add(-1)
	for {
		if p.closed.Load() {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		for i := range p.slots {
			s := &p.slots[i].p
			if in := s.Load(); in != nil && s.CompareAndSwap(in, nil) {
				p.mu.Unlock()
				return in, nil
			}
		}
		if p.live < p.max {
			p.live++
			p.mu.Unlock()
			in, err := p.start(context.Background(), false)
			if err != nil {
				p.mu.Lock()
				p.live--
				p.cond.Signal()
				p.mu.Unlock()
				return nil, err
			}
			return in, nil
		}
		p.cond.Wait()
	}
}

// put returns an instance after a successful call.
func (p *Pool) put(in *instance) {
	if p.closed.Load() {
		p.retire(in)
		return
	}
	// There are as many slots as instances can live, so one is free; a
	// scan racing with other callers may miss it, hence the loop.
	for placed := false; !placed; {
		for i := range p.slots {
			s := &p.slots[i].p
			if s.Load() == nil && s.CompareAndSwap(nil, in) {
				placed = true
				break
			}
		}
	}
	if p.waiters.Load() > 0 {
		p.mu.Lock()
		p.cond.Signal()
		p.mu.Unlock()
	}
}

// retire closes an instance that will not be used again and lets a waiter
// start another.
func (p *Pool) retire(in *instance) {
	in.mod.Close(context.Background())
	p.mu.Lock()
	p.live--
	p.cond.Broadcast()
	p.mu.Unlock()
}

// trap discards an instance whose call failed and returns the error to
// report.
func (p *Pool) trap(in *instance, op string, err error) error {
	p.discarded.Add(1)
	p.retire(in)
	return fmt.Errorf("%w in %s (instance discarded): %w%s", ErrTrap, op, err, in.stderr.suffix())
}

// Close closes the pool: later calls return ErrClosed. It waits for the calls
// in flight to return their instances, or for ctx to be done, then releases
// the runtime and every instance. It returns ctx's error if it stopped
// waiting early; calls still running then fail. Calling it again does
// nothing.
func (p *Pool) Close(ctx context.Context) error {
	var err error
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		// Release the callers waiting for an instance (with ErrClosed).
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
		for i := range p.slots {
			if in := p.slots[i].p.Swap(nil); in != nil {
				p.retire(in)
			}
		}
		// Instances in use are retired by put or trap; wait for them.
		stop := context.AfterFunc(ctx, func() {
			p.mu.Lock()
			p.cond.Broadcast()
			p.mu.Unlock()
		})
		p.mu.Lock()
		for p.live > 0 && ctx.Err() == nil {
			p.cond.Wait()
		}
		p.mu.Unlock()
		stop()
		err = ctx.Err()
		if cerr := p.rt.Close(context.Background()); cerr != nil && err == nil {
			err = cerr
		}
		if p.cache != nil {
			if cerr := p.cache.Close(context.Background()); cerr != nil && err == nil {
				err = cerr
			}
		}
	})
	return err
}

// Stats returns a snapshot of the pool's instances.
func (p *Pool) Stats() Stats {
	idle := 0
	for i := range p.slots {
		if p.slots[i].p.Load() != nil {
			idle++
		}
	}
	p.mu.Lock()
	live := p.live
	p.mu.Unlock()
	return Stats{Instances: live, Idle: idle, Started: p.started.Load(), Discarded: p.discarded.Load()}
}

// InstanceMemory returns the size in bytes of one instance's linear memory,
// the bulk of what an instance costs.
func (p *Pool) InstanceMemory() (uint32, error) {
	in, err := p.get()
	if err != nil {
		return 0, err
	}
	defer p.put(in)
	return in.mem.Size(), nil
}

// headWriter keeps the first bytes a module writes to stderr (a Go guest
// prints its panic there before exiting), for the trap error.
type headWriter struct {
	mu  sync.Mutex
	buf []byte
}

const headMax = 1024

func (w *headWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := headMax - len(w.buf); room > 0 {
		w.buf = append(w.buf, b[:min(room, len(b))]...)
	}
	return len(b), nil
}

func (w *headWriter) suffix() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) == 0 {
		return ""
	}
	return "; module stderr: " + string(w.buf)
}

var _ core.Decider = (*Pool)(nil)

var errBadOutput = errors.New("wasm: module broke the ABI")
