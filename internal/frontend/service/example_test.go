package service_test

import (
	"fmt"
	"log"
	"net/http/httptest"
	"strings"

	"github.com/rlcore/rl/internal/frontend/service"
	"github.com/rlcore/rl/memstore"
)

func Example() {
	cfg, err := service.ParseConfig("rules.json", "json", []byte(`[
		{"endpoint":"/v1/pay","strategy":"token_bucket","key_by":"api_key","limit":2,"window":"10s","fail_open":false}
	]`))
	if err != nil {
		log.Fatal(err)
	}
	store := memstore.New(nil)
	defer store.Close()
	svc, err := service.New(cfg, service.Options{Store: store}) // memstore.Config{Decider: a *wasm.Pool} decides in WebAssembly
	if err != nil {
		log.Fatal(err)
	}
	h := svc.APIHandler() // serve it on a listener of its own, loopback only
	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/v1/ratelimit/check", strings.NewReader(`{"rule":"/v1/pay","key":"customer-42"}`)))
		fmt.Println(w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// 200 1
	// 200 0
	// 429 0
}

func ExampleLoadConfig() {
	_, err := service.ParseConfig("rules.yaml", "yaml", []byte(`
rules:
  - {name: pay, strategy: token, limit: 100, window: 10 sec}
  - {name: search, strategy: fixed, limit: 0, window: 1m, key_by: cookie}
`))
	fmt.Println(err)
	// Output:
	// config rules.yaml: 3 problems
	//   rules.yaml: rules[0] "pay": window: "10 sec": want a duration such as "10s", "1m", "24h" or "1d"
	//   rules.yaml: rules[1] "search": limit 0: outside [1, 1099511627776] for fixed_window
	//   rules.yaml: rules[1] "search": key_by: "cookie": want ip, api_key, api_key:<header>, header:<name>, query:<name> or global
}
