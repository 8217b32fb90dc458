package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/httplimit"
)

func Example() {
	lim, err := rl.New(rl.Config{
		Policy: rl.MustPolicy(rl.Limit{Name: "minute", Algorithm: core.SlidingWindow, Limit: 100, Window: time.Minute}),
	})
	if err != nil {
		log.Fatal(err)
	}
	limit, err := httplimit.New(httplimit.Config{
		Limiter:  lim,
		Key:      httplimit.ClientIP(), // add trusted proxies to read X-Forwarded-For
		FailOpen: true,
		OnError:  func(r *http.Request, err error) { log.Printf("rate limiter: %v", err) },
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello\n")) })
	_ = http.ListenAndServe(":8080", limit(mux))
}

// The hooks a front end uses: fail open on an outage only (never on load),
// observe every outcome (count them in your metrics), and answer refusals
// in the API's own format.
func Example_hooks() {
	lim, err := rl.New(rl.Config{
		Policy: rl.MustPolicy(rl.Limit{Name: "hour", Algorithm: core.TokenBucket, Limit: 1, Window: time.Hour}),
	})
	if err != nil {
		log.Fatal(err)
	}
	limit, err := httplimit.New(httplimit.Config{
		Limiter: lim,
		Key:     httplimit.Header("X-User"), // set by an authenticating gateway
		// Serve while the store is down: a store error matching
		// store.ErrUnavailable, and for timeouts only the third with no
		// decision completing since they began; a busy store (load) is
		// 503 even so.
		FailOpen: true,
		OnDecision: func(r *http.Request, d httplimit.Decision) {
			fmt.Println("outcome:", d.Outcome) // e.g. decisions.WithLabelValues(d.Outcome.String()).Inc()
		},
		Refused: func(w http.ResponseWriter, r *http.Request, d httplimit.Decision) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(d.Outcome.Status())
			fmt.Fprintf(w, "{\"error\":%q}\n", d.Outcome)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello\n")) }))
	for _, user := range []string{"ann", "ann", ""} {
		r := httptest.NewRequest("GET", "/", nil)
		if user != "" {
			r.Header.Set("X-User", user)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Print(w.Code, " ", w.Body.String())
	}
	// Output:
	// outcome: allowed
	// 200 hello
	// outcome: denied
	// 429 Rate limit exceeded
	// outcome: missing_key
	// 400 {"error":"missing_key"}
}
