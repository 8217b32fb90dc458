package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"

	"github.com/rlcore/rl/internal/frontend/service"
	"github.com/rlcore/rl/internal/request/pipeline"
	"github.com/rlcore/rl/internal/request/ruleconfig"
	"github.com/rlcore/rl/memstore"
)

// explainRequest is -explain: how the proxy would answer a request under
// the configuration at path, deciding nothing (service.ExplainRequest),
// printed as JSON. target is "METHOD URL" or a URL (GET), header "Name:
// value" fields, peer the client's address (key_by: ip). Exit status: 0
// explained; 2 a bad argument or configuration.
func explainRequest(path, target string, header []string, peer string, stdout, stderr io.Writer) int {
	req, err := parseExplainTarget(target, header, peer)
	if err != nil {
		fmt.Fprintln(stderr, "rl-wasm-host: -explain:", err)
		return 2
	}
	cfg, err := service.LoadConfig(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	// A store nothing is stored in: explain decides nothing.
	mem := memstore.New(nil)
	defer mem.Close()
	svc, err := service.New(cfg, service.Options{Store: mem, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(stderr, "rl-wasm-host: -explain:", err)
		return 2
	}
	defer svc.Close()
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(svc.ExplainRequest(req)); err != nil {
		fmt.Fprintln(stderr, "rl-wasm-host: -explain:", err)
		return 1
	}
	return 0
}

// parseExplainTarget reads "GET https://api.example.com/v1/search?q=1"
// (the method may be left out: GET) and header fields "Name: value" into
// the pipeline's request form, as the proxy would read that request.
func parseExplainTarget(target string, header []string, peer string) (*pipeline.Request, error) {
	method, rawURL, ok := strings.Cut(strings.TrimSpace(target), " ")
	if !ok {
		method, rawURL = "GET", method
	}
	rawURL = strings.TrimSpace(rawURL)
	if !ruleconfig.IsToken(method) {
		return nil, fmt.Errorf("%q is not an HTTP method (want \"METHOD URL\", e.g. 'GET https://api.example.com/v1/search')", method)
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("%q: want an absolute http(s) URL, e.g. https://api.example.com/v1/search", rawURL)
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	req := &pipeline.Request{Method: method, Host: u.Host, Path: path, Query: u.RawQuery, Peer: peer}
	var fields [][2]string
	for _, h := range header {
		name, value, ok := strings.Cut(h, ":")
		if !ok || !ruleconfig.IsToken(strings.TrimSpace(name)) {
			return nil, fmt.Errorf("-H %q: want \"Name: value\"", h)
		}
		fields = append(fields, [2]string{strings.TrimSpace(name), strings.TrimSpace(value)})
	}
	req.Header = pipeline.HeaderFunc(func(name string) []string {
		var vs []string
		for _, kv := range fields {
			if strings.EqualFold(kv[0], name) {
				vs = append(vs, kv[1])
			}
		}
		return vs
	})
	return req, nil
}
