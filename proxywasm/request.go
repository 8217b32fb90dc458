package main

import (
	"errors"
	"slices"
	"strings"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/rlcore/rl/internal/request/pipeline"
)

// The filter's request rules are the pipeline's (internal/request/pipeline), the
// ones rl-wasm-host's proxy, decision API and gRPC service follow: this file
// only reads proxy-wasm's request form into it. The filter matches and keys
// on the canonical form of the path and, as rl-wasm-host's proxy does,
// forwards that form, without path-override fields (forward).

// sortRules orders the rules most specific first (pipeline.CompareMatchers).
func (c *config) sortRules() {
	c.proxied = slices.Clone(c.Rules)
	slices.SortStableFunc(c.proxied, func(a, b *rule) int { return pipeline.CompareMatchers(&a.match, &b.match) })
}

// request is what the filter reads of a request to match and key it.
type request struct {
	pipeline.Request
	// raw is the :path as sent, query included.
	raw string
	// target is the request in the forms rules match, and canonical its
	// path in the form forwarded, set by match.
	target    pipeline.Target
	canonical string
}

// newRequest reads a request's pseudo-headers and headers (all pairs, as
// proxy-wasm gives them; names in lower case) and Envoy's source.address.
func newRequest(hs [][2]string, source string) *request {
	req := &request{Request: pipeline.Request{Peer: source}}
	for _, kv := range hs {
		switch kv[0] {
		case ":method":
			req.Method = kv[1]
		case ":authority":
			req.Host = kv[1]
		case ":path":
			req.raw = kv[1]
			req.Path, req.Query, _ = strings.Cut(kv[1], "?")
			req.Path, _, _ = strings.Cut(req.Path, "#")
			req.Query, _, _ = strings.Cut(req.Query, "#")
		}
	}
	req.Header = pipeline.HeaderFunc(func(name string) []string {
		var vs []string
		for _, kv := range hs {
			if strings.EqualFold(kv[0], name) {
				vs = append(vs, kv[1])
			}
		}
		return vs
	})
	return req
}

// match returns the most specific rule matching req, or nil; an error for a
// path or host that cannot be matched safely (the filter answers 400).
func (c *config) match(req *request) (*rule, error) {
	t, canonical, err := pipeline.Prepare(&req.Request)
	if err != nil {
		return nil, err
	}
	req.target, req.canonical = t, canonical
	for _, r := range c.proxied {
		if r.match.Matches(&t) {
			return r, nil
		}
	}
	return nil, nil
}

// forward makes the request, matched by r or by no rule (nil), what
// rl-wasm-host's proxy would forward: no field pipeline.DropsField names
// (path-override fields: IIS, Symfony and Zend serve X-Original-URL's path
// instead of the matched one; r's response_cost_header, in which the
// upstream reports the actual cost, never the client) and the path in the
// canonical form it was matched on, the rest of the :path (the query) as
// sent. hs are the request's headers as read.
func forward(hs [][2]string, req *request, r *rule) error {
	responseCost := ""
	if r != nil {
		responseCost = r.ResponseCostHeader
	}
	var removed []string
	for _, kv := range hs {
		if pipeline.DropsField(kv[0], responseCost) && !slices.Contains(removed, kv[0]) {
			if err := proxywasm.RemoveHttpRequestHeader(kv[0]); err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
				return err
			}
			removed = append(removed, kv[0])
		}
	}
	if req.canonical == req.Path {
		return nil
	}
	return proxywasm.ReplaceHttpRequestHeader(":path", req.canonical+req.raw[len(req.Path):])
}

// key returns the request's key under r (before the rule's name is
// added): the engine's key step (engine.Reading.Key), as every front end
// reads a key.
func (r *rule) key(req *request) (string, error) { return r.Reading.Key(&req.Request, req.target.Path) }

// cost returns the cost of a request under r: the engine's cost step
// (engine.Reading.ReadCost).
func (r *rule) cost(req *request) (int64, error) { return r.Reading.ReadCost(&req.Request) }
