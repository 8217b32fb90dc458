package ruleconfig

import (
	"strings"
	"testing"

	"github.com/rlcore/rl/core"
)

// TestKeyBy: every key source parses from its String form and back, and the
// message lists each kind once, from the one list (KeyKinds).
func TestKeyBy(t *testing.T) {
	var forms []string
	for _, k := range KeyKinds() {
		e := keyKinds[k-1]
		if e.arg == "" || e.opt {
			forms = append(forms, e.name)
		}
		if e.arg != "" {
			forms = append(forms, e.name+":X-Some-Name")
		}
	}
	for _, s := range forms {
		kb, err := ParseKeyBy(s, true)
		if h := kb.Hint(); err == nil && (h == "" || strings.Contains(h, "%") || kb.Name != "" && kb.Name != BearerHeader && !strings.Contains(h, kb.Name)) {
			t.Errorf("%s: hint %q", s, h)
		}
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if kb.String() != s {
			t.Errorf("%s: String %q", s, kb.String())
		}
	}
	if kb, _ := ParseKeyBy("api_key:Authorization", false); kb != (KeyBy{KeyAPIKey, BearerHeader}) {
		t.Errorf("api_key:Authorization = %+v", kb)
	}
	for _, s := range []string{"", "cookie", "ip:x", "global:x", "header:", "header:a b", "query:", "query:a&b", "path", "api_key:", "API_KEY"} {
		if _, err := ParseKeyBy(s, false); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	_, err := ParseKeyBy("cookie", true)
	for _, k := range KeyKinds() {
		if !strings.Contains(err.Error(), k.String()) {
			t.Errorf("message %q lacks %s", err, k)
		}
	}
}

// TestStrategies: the message lists every algorithm's short and canonical
// names, from the one list (core.Algorithms), and each name it lists
// parses.
func TestStrategies(t *testing.T) {
	for _, a := range core.Algorithms() {
		if !strings.Contains(Strategies, a.String()) || !strings.Contains(Strategies, a.ShortName()) {
			t.Errorf("Strategies %q lacks %v", Strategies, a)
		}
	}
	for _, n := range strings.FieldsFunc(Strategies, func(r rune) bool { return r == ',' || r == ' ' || r == '(' || r == ')' }) {
		if n == "or" {
			continue
		}
		if _, err := core.ParseAlgorithm(n); err != nil {
			t.Errorf("Strategies names %q, which does not parse", n)
		}
	}
	// The form: the short names in number order, then the canonical
	// names that differ from them; today's algorithms in their places.
	var short, long []string
	for _, a := range core.Algorithms() {
		short = append(short, a.ShortName())
		if a.String() != a.ShortName() {
			long = append(long, a.String())
		}
	}
	if want := strings.Join(short, ", ") + " (or " + strings.Join(long, ", ") + ")"; Strategies != want {
		t.Errorf("Strategies = %q, want %q", Strategies, want)
	}
	if !strings.HasPrefix(Strategies, "fixed, sliding, sliding_log, token, leaky, gcra") ||
		!strings.Contains(Strategies, " (or fixed_window, sliding_window, token_bucket, leaky_bucket") {
		t.Errorf("Strategies = %q: today's algorithms out of place", Strategies)
	}
}
