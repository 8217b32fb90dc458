package httplimit_test

import (
	"log"
	"net/http"
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
