// Command proxywasm is the rate-limiting core (package core) as a proxy-wasm
// HTTP filter for Envoy and Istio: rl-filter.wasm, built from this package
// with standard Go (GOOS=wasip1, -buildmode=c-shared) and the proxy-wasm Go
// SDK. It speaks proxy-wasm ABI 0.2 (it exports proxy_abi_version_0_2_0).
//
// The filter matches each request against rules given as JSON plugin
// configuration (the rule shape of rl-wasm-host's configuration file), keys
// it by client IP, a header, a query parameter, the path, an API key or
// nothing, and decides with core.TakeAll:
//
//   - locally, on the key's state kept in proxy-wasm shared data, which every
//     worker thread's VM of one vm_id sees; each update is a compare-and-swap
//     (set_shared_data with the cas get_shared_data returned), retried on a
//     mismatch, so a limit is exact across Envoy's workers;
//   - or globally, by asking rl-wasm-host's decision API over an HTTP callout
//     to an Envoy cluster, so several Envoy replicas share one limit.
//
// A denial is answered 429 with Retry-After; allowed and denied responses
// carry the draft-11 RateLimit and RateLimit-Policy fields. See README.md for
// the configuration reference and Envoy and Istio examples.
//
// Build it with proxywasm/build.sh, never by hand: the committed
// rl-filter.wasm must be reproducible byte for byte. The package also builds
// natively, where the SDK's host emulator (proxytest) runs its tests.
package main

import (
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
)

func main() {}

func init() {
	proxywasm.SetVMContext(&vmContext{})
}
