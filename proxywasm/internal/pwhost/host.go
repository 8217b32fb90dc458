// Package pwhost is a small proxy-wasm host on wazero: enough of the
// proxy-wasm ABI 0.2 (the host side of what Envoy implements) to load the
// built rl-filter.wasm, run several VMs of it on one shared-data map, and
// drive HTTP streams through them. It exists to test and measure the
// committed module as a proxy would run it; it is not a proxy.
//
// It implements the env imports the filter uses (logging, plugin
// configuration, request and response headers, properties, local
// responses, shared data with compare-and-swap, HTTP callouts, effective
// context, stream continuation, the root context's tick) and takes WASI
// from wazero. Shared data has
// Envoy's semantics: one cas counter for the map, bumped by every write; a
// write with cas 0, or to a missing key, always succeeds.
//
// A VM serves one call at a time, as an Envoy worker thread does; VMs of one
// Host run in parallel and share its shared data.
package pwhost

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Status codes of the proxy-wasm ABI (proxy_status_t).
const (
	StatusOK                  = 0
	StatusNotFound            = 1
	StatusBadArgument         = 2
	StatusInvalidMemoryAccess = 6
	StatusCASMismatch         = 8
)

// Map and buffer types (proxy_map_type_t, proxy_buffer_type_t).
const (
	mapRequestHeaders          = 0
	mapResponseHeaders         = 2
	mapResponseTrailers        = 3
	mapHTTPCallResponseHeaders = 6
	bufHTTPCallResponseBody    = 4
	bufVMConfiguration         = 6
	bufPluginConfiguration     = 7
)

// metricCounter is proxy_metric_type_t's counter.
const metricCounter = 0

// Actions (proxy_action_t).
const (
	ActionContinue = 0
	ActionPause    = 1
)

// Host is a runtime, the compiled module and the shared data its VMs share.
type Host struct {
	rt  wazero.Runtime
	mod wazero.CompiledModule

	// Now is the wall clock the guests read (wasi clock_time_get), in ns
	// since the Unix epoch; tests set it.
	Now atomic.Int64

	mu     sync.Mutex
	shared map[string]sharedValue
	cas    uint32
	// Writes and Mismatches count set_shared_data calls that succeeded and
	// that failed on the cas.
	Writes, Mismatches atomic.Int64

	// Counters defined by the VMs (proxy_define_metric): id i+1 is
	// metricNames[i], its value metricValues[i].
	metricIDs    map[string]uint32
	metricNames  []string
	metricValues []int64

	vms atomic.Int32
}

type sharedValue struct {
	v   []byte
	cas uint32
}

type vmKey struct{}

// New compiles the module and prepares a runtime with WASI and the env
// imports. cache, if not nil, keeps compiled code across Hosts.
func New(ctx context.Context, wasm []byte, cache wazero.CompilationCache) (*Host, error) {
	rc := wazero.NewRuntimeConfig()
	if cache != nil {
		rc = rc.WithCompilationCache(cache)
	}
	h := &Host{rt: wazero.NewRuntimeWithConfig(ctx, rc), shared: map[string]sharedValue{}, metricIDs: map[string]uint32{}}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, h.rt); err != nil {
		h.rt.Close(ctx)
		return nil, err
	}
	if err := h.instantiateEnv(ctx); err != nil {
		h.rt.Close(ctx)
		return nil, err
	}
	mod, err := h.rt.CompileModule(ctx, wasm)
	if err != nil {
		h.rt.Close(ctx)
		return nil, err
	}
	h.mod = mod
	return h, nil
}

// Module is the compiled module, for inspecting its imports and exports.
func (h *Host) Module() wazero.CompiledModule { return h.mod }

// Close releases the runtime and every VM.
func (h *Host) Close(ctx context.Context) error { return h.rt.Close(ctx) }

// SharedData returns a copy of key's value and its cas.
func (h *Host) SharedData(key string) ([]byte, uint32, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.shared[key]
	return append([]byte(nil), v.v...), v.cas, ok
}

// Metric returns the value of the counter named name and whether a VM
// defined it.
func (h *Host) Metric(name string) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	id, ok := h.metricIDs[name]
	if !ok {
		return 0, false
	}
	return h.metricValues[id-1], true
}

// SharedKeys is the number of keys in shared data.
func (h *Host) SharedKeys() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.shared)
}

// VM is one instance of the module: one worker thread's VM.
type VM struct {
	h   *Host
	mu  sync.Mutex
	m   api.Module
	ctx context.Context

	malloc, onContextCreate, onVMStart, onConfigure, onRequestHeaders,
	onResponseHeaders, onResponseTrailers, onHTTPCallResponse, onLog, onDone, onDelete, onTick api.Function

	rootID       uint32
	nextID       uint32
	pluginConfig []byte
	// active is the stream whose callback runs (nil for the root
	// context); streams are the open ones.
	active  *Stream
	streams map[uint32]*Stream
	// during a proxy_on_http_call_response: its answer.
	callResp *CalloutResponse
	nextCall uint32
	calls    map[uint32]*Stream // a pending callout's stream (nil: the plugin's)
	// tickMS is the tick period the plugin set (0: no tick; Tick).
	tickMS uint32

	// Callouts are the HTTP calls the plugin dispatched from its root
	// context (at a tick), not for a stream: answer them with Answer.
	Callouts []*Callout

	// Logs holds every proxy_log message, "<level>: <message>".
	Logs []string
}

// Stream is one HTTP request/response pair through a VM.
type Stream struct {
	ID              uint32
	RequestHeaders  [][2]string // lower-case names, as Envoy gives them
	ResponseHeaders [][2]string
	// ResponseTrailers are the upstream's trailers as the filter left
	// them (nil: the response had none).
	ResponseTrailers [][2]string
	// Properties by path ("source.address").
	Properties map[string]string
	// Action is what the last request callback returned; Resumed is set by
	// proxy_continue_stream.
	Action  uint32
	Resumed bool
	// Local is the local response the filter sent, if any.
	Local *LocalResponse
	// Callouts are the HTTP calls the filter dispatched for this stream.
	Callouts []*Callout
}

// LocalResponse is a proxy_send_local_response.
type LocalResponse struct {
	Status  uint32
	Headers [][2]string
	Body    []byte
}

// Callout is a proxy_http_call.
type Callout struct {
	ID        uint32
	Cluster   string
	Headers   [][2]string
	Body      []byte
	TimeoutMS uint32
}

// CalloutResponse is the answer to a Callout (no headers: the call failed).
type CalloutResponse struct {
	Headers [][2]string
	Body    []byte
}

// Response is the upstream's response to a stream the filter lets
// through: its header fields and, if not nil, its trailers (sent after a
// body, which the host does not model).
type Response struct {
	Headers, Trailers [][2]string
}

// NewVM instantiates the module (running _initialize), creates the root
// context and starts the VM and the plugin with pluginConfig, as Envoy does
// for each worker.
func (h *Host) NewVM(ctx context.Context, pluginConfig []byte) (*VM, error) {
	vm := &VM{h: h, rootID: 1, nextID: 2, pluginConfig: pluginConfig, streams: map[uint32]*Stream{}, calls: map[uint32]*Stream{}}
	vm.ctx = context.WithValue(ctx, vmKey{}, vm)
	cfg := wazero.NewModuleConfig().
		WithName(fmt.Sprintf("vm%d", h.vms.Add(1))).
		WithStartFunctions("_initialize").
		WithWalltime(func() (int64, int32) {
			ns := h.Now.Load()
			return ns / 1e9, int32(ns % 1e9)
		}, 1).
		WithNanotime(func() int64 { return h.Now.Load() }, 1)
	m, err := h.rt.InstantiateModule(vm.ctx, h.mod, cfg)
	if err != nil {
		return nil, fmt.Errorf("pwhost: instantiating: %w", err)
	}
	vm.m = m
	for name, f := range map[string]*api.Function{
		"proxy_on_memory_allocate":    &vm.malloc,
		"proxy_on_context_create":     &vm.onContextCreate,
		"proxy_on_vm_start":           &vm.onVMStart,
		"proxy_on_configure":          &vm.onConfigure,
		"proxy_on_request_headers":    &vm.onRequestHeaders,
		"proxy_on_response_headers":   &vm.onResponseHeaders,
		"proxy_on_response_trailers":  &vm.onResponseTrailers,
		"proxy_on_http_call_response": &vm.onHTTPCallResponse,
		"proxy_on_log":                &vm.onLog,
		"proxy_on_done":               &vm.onDone,
		"proxy_on_delete":             &vm.onDelete,
		"proxy_on_tick":               &vm.onTick,
	} {
		if *f = m.ExportedFunction(name); *f == nil {
			return nil, fmt.Errorf("pwhost: the module does not export %s", name)
		}
	}
	if _, err := vm.call(vm.onContextCreate, uint64(vm.rootID), 0); err != nil {
		return nil, err
	}
	if ok, err := vm.call(vm.onVMStart, uint64(vm.rootID), 0); err != nil || ok != 1 {
		return nil, fmt.Errorf("pwhost: proxy_on_vm_start: %d, %v; logs %q", ok, err, vm.Logs)
	}
	if ok, err := vm.call(vm.onConfigure, uint64(vm.rootID), uint64(len(pluginConfig))); err != nil || ok != 1 {
		return nil, fmt.Errorf("pwhost: proxy_on_configure: %d, %v; logs %q", ok, err, vm.Logs)
	}
	return vm, nil
}

// call calls a guest export; the VM's lock is held by the caller.
func (vm *VM) call(f api.Function, args ...uint64) (uint32, error) {
	r, err := f.Call(vm.ctx, args...)
	if err != nil {
		return 0, fmt.Errorf("pwhost: %s: %w", f.Definition().Name(), err)
	}
	if len(r) == 0 {
		return 0, nil
	}
	return uint32(r[0]), nil
}

// Request runs a request through the VM: a new stream context, its request
// headers (end of stream), and, if the filter lets it through at once, the
// upstream's response headers; then the stream is finished (log, done,
// delete) unless a callout is pending. It returns the stream.
func (vm *VM) Request(reqHeaders [][2]string, properties map[string]string, upstream [][2]string) (*Stream, error) {
	return vm.Exchange(reqHeaders, properties, Response{Headers: upstream})
}

// Exchange is Request with the upstream's whole response: its headers
// (not ending the stream: a body follows) and its trailers, if any.
func (vm *VM) Exchange(reqHeaders [][2]string, properties map[string]string, upstream Response) (*Stream, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	s := &Stream{ID: vm.nextID, RequestHeaders: lower(reqHeaders), Properties: properties}
	vm.nextID++
	vm.streams[s.ID] = s
	if _, err := vm.call(vm.onContextCreate, uint64(s.ID), uint64(vm.rootID)); err != nil {
		return nil, err
	}
	vm.active = s
	act, err := vm.call(vm.onRequestHeaders, uint64(s.ID), uint64(len(s.RequestHeaders)), 1)
	vm.active = nil
	if err != nil {
		return nil, err
	}
	s.Action = act
	if len(s.Callouts) > 0 && s.Local == nil && act == ActionPause {
		return s, nil // waiting for Respond
	}
	return s, vm.finish(s, upstream)
}

// finish sends the upstream's response, headers then trailers, through a
// stream that was let through, then ends the stream: proxy_on_log (the
// SDK's OnHttpStreamDone), done, delete.
func (vm *VM) finish(s *Stream, upstream Response) error {
	vm.active = s
	defer func() { vm.active = nil }()
	if s.Local == nil && (s.Action == ActionContinue || s.Resumed) {
		s.ResponseHeaders = lower(upstream.Headers)
		if _, err := vm.call(vm.onResponseHeaders, uint64(s.ID), uint64(len(s.ResponseHeaders)), 0); err != nil {
			return err
		}
		if upstream.Trailers != nil {
			s.ResponseTrailers = lower(upstream.Trailers)
			if _, err := vm.call(vm.onResponseTrailers, uint64(s.ID), uint64(len(s.ResponseTrailers))); err != nil {
				return err
			}
		}
	}
	if _, err := vm.call(vm.onLog, uint64(s.ID)); err != nil {
		return err
	}
	vm.active = nil
	if _, err := vm.call(vm.onDone, uint64(s.ID)); err != nil {
		return err
	}
	if _, err := vm.call(vm.onDelete, uint64(s.ID)); err != nil {
		return err
	}
	delete(vm.streams, s.ID)
	return nil
}

// Respond delivers the answer to a stream's callout (proxy_on_http_call_response)
// and then finishes the stream like Request.
func (vm *VM) Respond(s *Stream, c *Callout, resp CalloutResponse, upstream [][2]string) error {
	return vm.RespondWith(s, c, resp, Response{Headers: upstream})
}

// RespondWith is Respond with the upstream's whole response, as Exchange
// takes it.
func (vm *VM) RespondWith(s *Stream, c *Callout, resp CalloutResponse, upstream Response) error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.calls[c.ID] != s {
		return fmt.Errorf("pwhost: no pending callout %d for stream %d", c.ID, s.ID)
	}
	delete(vm.calls, c.ID)
	resp.Headers = lower(resp.Headers)
	vm.callResp = &resp
	_, err := vm.call(vm.onHTTPCallResponse, uint64(vm.rootID), uint64(c.ID), uint64(len(resp.Headers)), uint64(len(resp.Body)), 0)
	vm.callResp, vm.active = nil, nil
	if err != nil {
		return err
	}
	return vm.finish(s, upstream)
}

// TickPeriod is the tick period the plugin set, in ms (0: none).
func (vm *VM) TickPeriod() uint32 {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.tickMS
}

// Tick runs the root context's tick (proxy_on_tick), as the host does
// every TickPeriod while it is not 0; it reports false, doing nothing,
// when there is no tick.
func (vm *VM) Tick() (bool, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.tickMS == 0 {
		return false, nil
	}
	_, err := vm.call(vm.onTick, uint64(vm.rootID))
	return true, err
}

// Answer delivers the answer to a callout whose stream is finished, or
// to one of the plugin's own (Callouts).
func (vm *VM) Answer(c *Callout, resp CalloutResponse) error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if _, ok := vm.calls[c.ID]; !ok {
		return fmt.Errorf("pwhost: no pending callout %d", c.ID)
	}
	delete(vm.calls, c.ID)
	resp.Headers = lower(resp.Headers)
	vm.callResp = &resp
	_, err := vm.call(vm.onHTTPCallResponse, uint64(vm.rootID), uint64(c.ID), uint64(len(resp.Headers)), uint64(len(resp.Body)), 0)
	vm.callResp, vm.active = nil, nil
	return err
}

func lower(hs [][2]string) [][2]string {
	out := make([][2]string, len(hs))
	for i, kv := range hs {
		out[i] = [2]string{strings.ToLower(kv[0]), kv[1]}
	}
	return out
}

// Guest memory helpers.

func (vm *VM) read(m api.Module, ptr, size uint32) ([]byte, bool) {
	if size == 0 {
		return nil, true
	}
	return m.Memory().Read(ptr, size)
}

// give copies b into memory the guest allocates and stores its address and
// size at ptrPtr and sizePtr.
func (vm *VM) give(m api.Module, b []byte, ptrPtr, sizePtr uint32) uint32 {
	var ptr uint32
	if len(b) > 0 {
		r, err := vm.malloc.Call(vm.ctx, uint64(len(b)))
		if err != nil || len(r) == 0 || r[0] == 0 {
			return StatusInvalidMemoryAccess
		}
		ptr = uint32(r[0])
		if !m.Memory().Write(ptr, b) {
			return StatusInvalidMemoryAccess
		}
	}
	if !m.Memory().WriteUint32Le(ptrPtr, ptr) || !m.Memory().WriteUint32Le(sizePtr, uint32(len(b))) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// serialize encodes a header map as the ABI does: count, (key length,
// value length) pairs, then each key and value followed by a NUL.
func serialize(hs [][2]string) []byte {
	n := 4 + 8*len(hs)
	for _, kv := range hs {
		n += len(kv[0]) + len(kv[1]) + 2
	}
	b := make([]byte, 0, n)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(hs)))
	for _, kv := range hs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(kv[0])))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(kv[1])))
	}
	for _, kv := range hs {
		b = append(b, kv[0]...)
		b = append(b, 0)
		b = append(b, kv[1]...)
		b = append(b, 0)
	}
	return b
}

var errMap = errors.New("pwhost: malformed serialized map")

func deserialize(b []byte) ([][2]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if len(b) < 4 {
		return nil, errMap
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n > len(b)/8 {
		return nil, errMap
	}
	p := 4 + 8*n
	hs := make([][2]string, n)
	for i := range n {
		kl := int(binary.LittleEndian.Uint32(b[4+8*i:]))
		vl := int(binary.LittleEndian.Uint32(b[8+8*i:]))
		if p+kl+vl+2 > len(b) || kl < 0 || vl < 0 {
			return nil, errMap
		}
		hs[i] = [2]string{string(b[p : p+kl]), string(b[p+kl+1 : p+kl+1+vl])}
		p += kl + vl + 2
	}
	return hs, nil
}
