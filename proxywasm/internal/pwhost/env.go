package pwhost

import (
	"context"
	"slices"
	"strings"

	"github.com/tetratelabs/wazero/api"
)

const i32 = api.ValueTypeI32

// EnvFunctions lists the env imports this host implements, exactly those
// rl-filter.wasm imports, with their parameter counts (i32 but those
// EnvI64 names; one i32 result: a proxy_status_t).
var EnvFunctions = map[string]int{
	"proxy_log":                          3,
	"proxy_get_buffer_bytes":             5,
	"proxy_get_header_map_value":         5,
	"proxy_get_header_map_pairs":         3,
	"proxy_replace_header_map_value":     5,
	"proxy_remove_header_map_value":      3,
	"proxy_get_property":                 4,
	"proxy_send_local_response":          8,
	"proxy_continue_stream":              1,
	"proxy_set_effective_context":        1,
	"proxy_get_shared_data":              5,
	"proxy_set_shared_data":              5,
	"proxy_http_call":                    10,
	"proxy_define_metric":                4,
	"proxy_increment_metric":             2,
	"proxy_set_tick_period_milliseconds": 1,
}

// EnvI64 gives the parameters of EnvFunctions that are i64.
var EnvI64 = map[string][]int{"proxy_increment_metric": {1}}

func vmOf(ctx context.Context) *VM { return ctx.Value(vmKey{}).(*VM) }

func (h *Host) instantiateEnv(ctx context.Context) error {
	b := h.rt.NewHostModuleBuilder("env")
	def := func(name string, f func(vm *VM, m api.Module, a []uint64) uint32) {
		params := make([]api.ValueType, EnvFunctions[name])
		for i := range params {
			params[i] = i32
		}
		for _, i := range EnvI64[name] {
			params[i] = api.ValueTypeI64
		}
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			stack[0] = uint64(f(vmOf(ctx), m, stack))
		}), params, []api.ValueType{i32}).Export(name)
	}
	u := func(v uint64) uint32 { return uint32(v) }

	def("proxy_log", func(vm *VM, m api.Module, a []uint64) uint32 {
		msg, ok := vm.read(m, u(a[1]), u(a[2]))
		if !ok {
			return StatusInvalidMemoryAccess
		}
		vm.Logs = append(vm.Logs, [...]string{"trace", "debug", "info", "warn", "error", "critical"}[min(u(a[0]), 5)]+": "+string(msg))
		return StatusOK
	})
	def("proxy_get_buffer_bytes", func(vm *VM, m api.Module, a []uint64) uint32 {
		var buf []byte
		switch u(a[0]) {
		case bufPluginConfiguration:
			buf = vm.pluginConfig
		case bufVMConfiguration:
		case bufHTTPCallResponseBody:
			if vm.callResp == nil {
				return StatusNotFound
			}
			buf = vm.callResp.Body
		default:
			return StatusBadArgument
		}
		start, size := int(u(a[1])), int(u(a[2]))
		if start > len(buf) {
			return StatusBadArgument
		}
		end := min(len(buf), start+size)
		return vm.give(m, buf[start:end], u(a[3]), u(a[4]))
	})
	headers := func(vm *VM, typ uint32) *[][2]string {
		switch {
		case typ == mapHTTPCallResponseHeaders && vm.callResp != nil:
			return &vm.callResp.Headers
		case vm.active == nil:
			return nil
		case typ == mapRequestHeaders:
			return &vm.active.RequestHeaders
		case typ == mapResponseHeaders:
			return &vm.active.ResponseHeaders
		case typ == mapResponseTrailers:
			return &vm.active.ResponseTrailers
		}
		return nil
	}
	def("proxy_get_header_map_value", func(vm *VM, m api.Module, a []uint64) uint32 {
		hs := headers(vm, u(a[0]))
		if hs == nil {
			return StatusBadArgument
		}
		k, ok := vm.read(m, u(a[1]), u(a[2]))
		if !ok {
			return StatusInvalidMemoryAccess
		}
		key := strings.ToLower(string(k))
		for _, kv := range *hs {
			if kv[0] == key {
				return vm.give(m, []byte(kv[1]), u(a[3]), u(a[4]))
			}
		}
		return StatusNotFound
	})
	def("proxy_get_header_map_pairs", func(vm *VM, m api.Module, a []uint64) uint32 {
		hs := headers(vm, u(a[0]))
		if hs == nil {
			return StatusBadArgument
		}
		return vm.give(m, serialize(*hs), u(a[1]), u(a[2]))
	})
	def("proxy_replace_header_map_value", func(vm *VM, m api.Module, a []uint64) uint32 {
		hs := headers(vm, u(a[0]))
		if hs == nil {
			return StatusBadArgument
		}
		k, ok1 := vm.read(m, u(a[1]), u(a[2]))
		v, ok2 := vm.read(m, u(a[3]), u(a[4]))
		if !ok1 || !ok2 {
			return StatusInvalidMemoryAccess
		}
		key := strings.ToLower(string(k))
		for i, kv := range *hs {
			if kv[0] == key {
				(*hs)[i][1] = string(v)
				return StatusOK
			}
		}
		*hs = append(*hs, [2]string{key, string(v)})
		return StatusOK
	})
	def("proxy_remove_header_map_value", func(vm *VM, m api.Module, a []uint64) uint32 {
		hs := headers(vm, u(a[0]))
		if hs == nil {
			return StatusBadArgument
		}
		k, ok := vm.read(m, u(a[1]), u(a[2]))
		if !ok {
			return StatusInvalidMemoryAccess
		}
		key := strings.ToLower(string(k))
		*hs = slices.DeleteFunc(*hs, func(kv [2]string) bool { return kv[0] == key })
		return StatusOK
	})
	def("proxy_get_property", func(vm *VM, m api.Module, a []uint64) uint32 {
		p, ok := vm.read(m, u(a[0]), u(a[1]))
		if !ok {
			return StatusInvalidMemoryAccess
		}
		if vm.active == nil {
			return StatusNotFound
		}
		path := strings.ReplaceAll(strings.TrimRight(string(p), "\x00"), "\x00", ".")
		v, found := vm.active.Properties[path]
		if !found {
			return StatusNotFound
		}
		return vm.give(m, []byte(v), u(a[2]), u(a[3]))
	})
	def("proxy_send_local_response", func(vm *VM, m api.Module, a []uint64) uint32 {
		if vm.active == nil {
			return StatusBadArgument
		}
		body, ok1 := vm.read(m, u(a[3]), u(a[4]))
		hb, ok2 := vm.read(m, u(a[5]), u(a[6]))
		if !ok1 || !ok2 {
			return StatusInvalidMemoryAccess
		}
		hs, err := deserialize(hb)
		if err != nil {
			return StatusBadArgument
		}
		vm.active.Local = &LocalResponse{Status: u(a[0]), Headers: hs, Body: append([]byte(nil), body...)}
		return StatusOK
	})
	def("proxy_continue_stream", func(vm *VM, m api.Module, a []uint64) uint32 {
		if vm.active == nil || u(a[0]) != 0 { // HTTP_REQUEST
			return StatusBadArgument
		}
		vm.active.Resumed = true
		return StatusOK
	})
	def("proxy_set_effective_context", func(vm *VM, m api.Module, a []uint64) uint32 {
		id := u(a[0])
		if id == vm.rootID {
			vm.active = nil
			return StatusOK
		}
		s, ok := vm.streams[id]
		if !ok {
			return StatusBadArgument
		}
		vm.active = s
		return StatusOK
	})
	def("proxy_get_shared_data", func(vm *VM, m api.Module, a []uint64) uint32 {
		k, ok := vm.read(m, u(a[0]), u(a[1]))
		if !ok {
			return StatusInvalidMemoryAccess
		}
		vm.h.mu.Lock()
		v, found := vm.h.shared[string(k)]
		vm.h.mu.Unlock()
		if !found {
			return StatusNotFound
		}
		// v.v is never modified in place: a write replaces it.
		if st := vm.give(m, v.v, u(a[2]), u(a[3])); st != StatusOK {
			return st
		}
		if !m.Memory().WriteUint32Le(u(a[4]), v.cas) {
			return StatusInvalidMemoryAccess
		}
		return StatusOK
	})
	def("proxy_set_shared_data", func(vm *VM, m api.Module, a []uint64) uint32 {
		k, ok1 := vm.read(m, u(a[0]), u(a[1]))
		v, ok2 := vm.read(m, u(a[2]), u(a[3]))
		if !ok1 || !ok2 {
			return StatusInvalidMemoryAccess
		}
		cas := u(a[4])
		h := vm.h
		h.mu.Lock()
		defer h.mu.Unlock()
		if old, found := h.shared[string(k)]; found && cas != 0 && cas != old.cas {
			h.Mismatches.Add(1)
			return StatusCASMismatch
		}
		h.cas++
		if h.cas == 0 { // 0 means "no check": never hand it out
			h.cas++
		}
		h.shared[string(k)] = sharedValue{append([]byte(nil), v...), h.cas}
		h.Writes.Add(1)
		return StatusOK
	})
	def("proxy_http_call", func(vm *VM, m api.Module, a []uint64) uint32 {
		cluster, ok1 := vm.read(m, u(a[0]), u(a[1]))
		hb, ok2 := vm.read(m, u(a[2]), u(a[3]))
		body, ok3 := vm.read(m, u(a[4]), u(a[5]))
		if !ok1 || !ok2 || !ok3 {
			return StatusInvalidMemoryAccess
		}
		hs, err := deserialize(hb)
		if err != nil {
			return StatusBadArgument
		}
		for _, want := range []string{":method", ":path", ":authority"} {
			found := false
			for _, kv := range hs {
				found = found || kv[0] == want
			}
			if !found {
				return StatusBadArgument // as the spec says of missing pseudo-headers
			}
		}
		vm.nextCall++
		c := &Callout{ID: vm.nextCall, Cluster: string(cluster), Headers: hs, Body: append([]byte(nil), body...), TimeoutMS: u(a[8])}
		if vm.active != nil {
			vm.active.Callouts = append(vm.active.Callouts, c)
		} else { // the plugin's own (root context): answered with Answer
			vm.Callouts = append(vm.Callouts, c)
		}
		vm.calls[c.ID] = vm.active
		if !m.Memory().WriteUint32Le(u(a[9]), c.ID) {
			return StatusInvalidMemoryAccess
		}
		return StatusOK
	})
	// The root context's tick (VM.Tick); a period of 0 stops it.
	def("proxy_set_tick_period_milliseconds", func(vm *VM, m api.Module, a []uint64) uint32 {
		vm.tickMS = u(a[0])
		return StatusOK
	})
	// Metrics: counters only (the filter defines no other kind), one
	// value per name for every VM of the Host, as Envoy keeps a stat.
	def("proxy_define_metric", func(vm *VM, m api.Module, a []uint64) uint32 {
		name, ok := vm.read(m, u(a[1]), u(a[2]))
		if !ok {
			return StatusInvalidMemoryAccess
		}
		if u(a[0]) != metricCounter {
			return StatusBadArgument
		}
		h := vm.h
		h.mu.Lock()
		id, found := h.metricIDs[string(name)]
		if !found {
			h.metricNames = append(h.metricNames, string(name))
			h.metricValues = append(h.metricValues, 0)
			id = uint32(len(h.metricNames)) // ids from 1
			h.metricIDs[string(name)] = id
		}
		h.mu.Unlock()
		if !m.Memory().WriteUint32Le(u(a[3]), id) {
			return StatusInvalidMemoryAccess
		}
		return StatusOK
	})
	def("proxy_increment_metric", func(vm *VM, m api.Module, a []uint64) uint32 {
		id, offset := u(a[0]), int64(a[1])
		h := vm.h
		h.mu.Lock()
		defer h.mu.Unlock()
		if id == 0 || int(id) > len(h.metricValues) {
			return StatusNotFound
		}
		h.metricValues[id-1] += offset
		return StatusOK
	})
	_, err := b.Instantiate(ctx)
	return err
}
