package rls_test

import (
	"errors"
	"fmt"

	"github.com/rlcore/rl/internal/frontend/rls"
	"github.com/rlcore/rl/internal/frontend/service"
)

// A configuration file in envoyproxy/ratelimit's format; mistakes are
// reported together, by domain and field.
func ExampleParseDomain() {
	_, err := rls.ParseDomain("messaging.yaml", []byte(`
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: fortnight, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100, algorithm: gcra, burst: 10}
`))
	var ce *service.ConfigError
	if errors.As(err, &ce) {
		for _, p := range ce.Problems {
			fmt.Println(p)
		}
	}
	// Output:
	// domain "messaging": descriptors[0].descriptors[0].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)
	// domain "messaging": descriptors[1].rate_limit.burst: unknown field (want one of unit, requests_per_unit, unlimited, name, replaces, unit_multiplier, algorithm, fail_open, shadow_limits)
}
