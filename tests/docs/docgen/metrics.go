package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/internal/frontend/rlqs"
	"github.com/rlcore/rl/internal/frontend/rls"
	"github.com/rlcore/rl/internal/frontend/service"
	"github.com/rlcore/rl/internal/request/decisionlog"
	"github.com/rlcore/rl/memstore"
)

// metricsPage is the reference of every rl metric rl-wasm-host exports:
// a service with every front end's metrics registered (the WebAssembly
// pool, the decider, the gRPC rate limit service) is asked for /metrics,
// and each family's name, type, labels and help are listed as the
// registry gives them.
func metricsPage() (string, error) {
	text, err := exposition()
	if err != nil {
		return "", err
	}
	fams, err := parseFamilies(text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(header("the metrics rl-wasm-host's registry exports (their names, types, labels and help texts in internal/frontend)"))
	b.WriteString("# Metrics\n\n")
	b.WriteString("Every metric of rl-wasm-host's `/metrics` besides Go's `go_*` and `process_*`, with its help text. " +
		"Label values come from the configuration (rule, limit, domain names) or from fixed lists, never from a " +
		"request; series of a fixed list exist, at 0, from the start. Dashboard and alerts: " +
		"[operations.md](../operations.md#dashboard).\n\n")
	b.WriteString("| metric | type | labels | help |\n|---|---|---|---|\n")
	for _, f := range fams {
		labels := make([]string, len(f.labels))
		for i, l := range f.labels {
			labels[i] = "`" + l + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.name, f.typ, strings.Join(labels, ", "), strings.ReplaceAll(f.help, "|", `\|`))
	}
	return b.String(), nil
}

// exposition returns /metrics of a service with every collector
// registered.
func exposition() (string, error) {
	// A global rule, so that the RLQS client's families have series (its
	// server unreachable: nothing but the families is read).
	cfg, err := service.ParseConfig("c.yaml", "yaml", []byte("upstream: demo\nrules:\n  - {name: r, endpoint: /r, limits: [{name: burst, strategy: token, limit: 10, window: 1s}, "+
		"{name: candidate, strategy: fixed, limit: 5, window: 1m, shadow: true}]}\n"+
		"  - {name: g, key_by: global, strategy: token, limit: 10, window: 1s, global: {rlqs: \"127.0.0.1:1\", bucket: {name: g}}}\n"))
	if err != nil {
		return "", err
	}
	mem := memstore.New(nil)
	defer mem.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The denial log on, so that its metric is exported too.
	dl, err := decisionlog.New(decisionlog.Config{Logger: quiet, DenialsPerSecond: 1})
	if err != nil {
		return "", err
	}
	defer dl.Close()
	svc, err := service.New(cfg, service.Options{Store: mem, Logger: quiet, DecisionLog: dl})
	if err != nil {
		return "", err
	}
	defer svc.Close()
	if err := svc.MonitorPool(func() service.PoolStats { return service.PoolStats{} }); err != nil {
		return "", err
	}
	if err := svc.MonitorDecider(func() service.DeciderStats { return service.DeciderStats{Deciding: "native"} }); err != nil {
		return "", err
	}
	// A shadow limit, so that the shadow denials' family has a series.
	d, err := rls.ParseDomain("d.yaml", []byte("domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5, "+
		"shadow_limits: [{name: candidate, unit: minute, requests_per_unit: 2}]}\n"))
	if err != nil {
		return "", err
	}
	if _, err := rls.New(svc, &rls.Config{Path: "d.yaml", Domains: map[string]*rls.Domain{"d": d}}, rls.Options{Trusted: true}); err != nil {
		return "", err
	}
	// The RLQS server (-rlqs-config), as the rate limit service's companion
	// registers it.
	q, err := rlqs.New(rlqs.Config{Rules: []rlqs.Rule{{Domain: "envoy", Limit: core.Limit{Algorithm: core.TokenBucket, Limit: 10, Window: 1e6}}}})
	if err != nil {
		return "", err
	}
	if err := svc.Register(q.Collectors()...); err != nil {
		return "", err
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.RemoteAddr = "127.0.0.1:1"
	svc.APIHandler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return "", fmt.Errorf("/metrics: status %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.String(), nil
}

// family is one metric family of an exposition.
type family struct {
	name, typ, help string
	labels          []string
}

var labelName = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)

// parseFamilies reads Prometheus's text format: the rl families (and the
// hosted services' rate_limiter_ ones) in name order, each with the labels
// of its samples (a histogram's le left out).
func parseFamilies(text string) ([]*family, error) {
	byName := map[string]*family{}
	get := func(name string) *family {
		if byName[name] == nil {
			byName[name] = &family{name: name}
		}
		return byName[name]
	}
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, help, _ := strings.Cut(rest, " ")
			get(name).help = strings.NewReplacer(`\\`, `\`, `\n`, " ").Replace(help)
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			get(name).typ = typ
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, labels, _ := strings.Cut(strings.Fields(line)[0], "{")
		f := byName[name]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); f == nil && ok && byName[base] != nil {
				f = byName[base]
			}
		}
		if f == nil {
			return nil, fmt.Errorf("sample %q of no family", line)
		}
		for _, m := range labelName.FindAllStringSubmatch(labels, -1) {
			if m[1] != "le" && !slices.Contains(f.labels, m[1]) {
				f.labels = append(f.labels, m[1])
			}
		}
	}
	var out []*family
	for name, f := range byName {
		if strings.HasPrefix(name, "rl_") || strings.HasPrefix(name, "rate_limiter_") {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b *family) int { return strings.Compare(a.name, b.name) })
	return out, nil
}
