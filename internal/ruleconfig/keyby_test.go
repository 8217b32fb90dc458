package ruleconfig

import (
	"strings"
	"testing"
)

// TestKeyBy: every key source parses from its String form and back, and the
// message lists each kind once, from the one list (KeyKinds).
func TestKeyBy(t *testing.T) {
	for _, s := range []string{"ip", "api_key", "api_key:X-API-Key", "header:X-User", "query:tenant", "path", "global"} {
		kb, err := ParseKeyBy(s, true)
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
