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

// A cost known only at the response: each request is charged an estimate
// of 100 tokens when it arrives, and the handler reports what it used in
// the X-Tokens-Used field (here as a trailer, after a streamed body); the
// middleware settles the difference after the handler returns and keeps
// the field from the client. A request that used more than its estimate
// puts its key in debt: the next is denied until the debt is paid off.
func Example_responseCost() {
	lim, err := rl.New(rl.Config{
		Policy: rl.MustPolicy(rl.Limit{Name: "tokens", Algorithm: core.TokenBucket, Limit: 1000, Window: time.Minute}),
		Clock:  func() int64 { return 1_767_225_600_000_000 }, // a fixed instant, for the output
	})
	if err != nil {
		log.Fatal(err)
	}
	settled := make(chan httplimit.Settlement, 1)
	limit, err := httplimit.New(httplimit.Config{
		Limiter:      lim,
		Key:          httplimit.Header("X-User"), // set by an authenticating gateway
		Cost:         func(*http.Request) (int64, error) { return 100, nil },
		ResponseCost: httplimit.ResponseCost{Field: "X-Tokens-Used"},
		OnSettle:     func(r *http.Request, s httplimit.Settlement) { settled <- s },
		OnError:      func(r *http.Request, err error) { log.Printf("rate limiter: %v", err) },
	})
	if err != nil {
		log.Fatal(err)
	}
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Tokens-Used")
		w.Write([]byte("a long answer\n"))
		w.Header().Set("X-Tokens-Used", "1500")
	}))
	for range 2 {
		r := httptest.NewRequest("POST", "/v1/chat", nil)
		r.Header.Set("X-User", "ann")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d %q %q\n", w.Code, w.Header().Get("Retry-After"), w.Header().Get("X-Tokens-Used"))
		if w.Code == 200 {
			s := <-settled // the settle runs after the handler
			fmt.Printf("estimate %d, actual %d: %d left\n", s.Estimate, s.Actual, s.Result.Remaining)
		}
	}
	// Output:
	// 200 "" ""
	// estimate 100, actual 1500: 0 left
	// 429 "36" ""
}
