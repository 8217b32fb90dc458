package outage

import "testing"

// TestClassifyHTTP: an HTTP answer without a decision, by status, Envoy's
// overload mark and rl-wasm-host's error code. Only the service
// unreachable (502, 503 without either) is an Outage; a 504 is a timeout,
// an Outage only as the Detector counts them (Failed on a fresh one).
func TestClassifyHTTP(t *testing.T) {
	for _, c := range []struct {
		name       string
		status     int
		overloaded bool
		code       string
		want, nil  Class
	}{
		{"no healthy host", 503, false, "", Outage, Outage},
		{"connect failure", 502, false, "", Outage, Outage},
		{"gateway timeout", 504, false, "", Failed, Failed},
		{"circuit breaker overflow", 503, true, "", Load, Load},
		{"overloaded mark on any status", 502, true, "", Load, Load},
		{"overloaded mark beside a code", 503, true, "store_unavailable", Load, Load},
		{"too many requests", 429, false, "", Load, Load},
		{"the service overloaded", 503, false, "overloaded", Load, Load},
		{"the service's internal error", 500, false, "internal", Internal, Internal},
		{"the service's store down (a rule it does not open)", 503, false, "store_unavailable", Failed, Failed},
		{"the service refusing the token", 401, false, "unauthorized", Failed, Failed},
		{"a bare 500", 500, false, "", Failed, Failed},
		{"a bare 404", 404, false, "", Failed, Failed},
		{"an unreadable status", 0, false, "", Failed, Failed},
	} {
		err := ClassifyHTTP(c.status, c.overloaded, c.code)
		if got := (&Detector{}).Classify(0, err); got != c.want {
			t.Errorf("%s: %v is %v, want %v", c.name, err, got, c.want)
		}
		if got := (*Detector)(nil).Classify(0, err); got != c.nil {
			t.Errorf("%s (nil Detector): %v is %v, want %v", c.name, err, got, c.nil)
		}
	}
}
