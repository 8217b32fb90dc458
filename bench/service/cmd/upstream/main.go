// Command upstream is the tiny HTTP upstream the service benchmark puts
// behind rl-wasm-host and nginx: it reads the request body and answers a
// small JSON document with a Content-Length, keeping connections alive.
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"strconv"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18090", "address to listen on")
	flag.Parse()
	body := []byte(`{"upstream":"bench","ok":true}` + "\n")
	length := strconv.Itoa(len(body))
	srv := &http.Server{
		Addr: *listen,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			h := w.Header()
			h["Content-Type"] = []string{"application/json"}
			h["Content-Length"] = []string{length}
			w.Write(body)
		}),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	log.Fatal(srv.ListenAndServe())
}
