package rls

import (
	"math"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
)

// The examples of envoyproxy/ratelimit's README decide as documented there,
// except where a request of several descriptors is denied: there nothing is
// charged here, while envoyproxy/ratelimit charges every descriptor (its
// issue #1060).

const (
	OK   = rlsv3.RateLimitResponse_OK
	OVER = rlsv3.RateLimitResponse_OVER_LIMIT
)

func TestReadmeExample1(t *testing.T) {
	e := newEnv(t, `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
`, envOpts{})
	require.Equal(t, 500, e.admitted(t, 501, "mongo_cps", d("database", "users")))
	r := e.call(t, "mongo_cps", d("database", "users"))
	require.Equal(t, OVER, r.OverallCode)
	st := r.Statuses[0]
	require.Equal(t, uint32(500), st.CurrentLimit.RequestsPerUnit)
	require.Equal(t, rlsv3.RateLimitResponse_RateLimit_SECOND, st.CurrentLimit.Unit)
	require.Zero(t, st.LimitRemaining)
	require.Equal(t, time.Second, st.DurationUntilReset.AsDuration())
	// A limit of its own per value.
	require.Equal(t, 500, e.admitted(t, 500, "mongo_cps", d("database", "default")))
	// A value the configuration does not name matches nothing: OK, no limit.
	r = e.call(t, "mongo_cps", d("database", "other"))
	require.Equal(t, OK, r.OverallCode)
	require.Nil(t, r.Statuses[0].CurrentLimit)
	// A new second: the window is fresh.
	e.now.Add(1_000_000)
	require.Equal(t, OK, e.call(t, "mongo_cps", d("database", "users")).OverallCode)
}

func TestReadmeExample2(t *testing.T) {
	e := newEnv(t, `
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`, envOpts{})
	marketing := func(n string) []*commonv3.RateLimitDescriptor {
		return []*commonv3.RateLimitDescriptor{d("message_type", "marketing", "to_number", n), d("to_number", n)}
	}
	// 5 marketing messages to each number; then denied.
	require.Equal(t, 5, e.admitted(t, 8, "messaging", marketing("2061111111")...))
	require.Equal(t, 5, e.admitted(t, 5, "messaging", marketing("2062222222")...))
	r := e.call(t, "messaging", marketing("2061111111")...)
	require.Equal(t, OVER, r.OverallCode)
	require.Equal(t, OVER, r.Statuses[0].Code)
	require.Equal(t, OK, r.Statuses[1].Code)
	// All or nothing: the denied requests did not charge the per-number
	// limit (envoyproxy/ratelimit would report 100-9 = 91 here).
	require.Equal(t, uint32(95), r.Statuses[1].LimitRemaining)
	// The placeholder alone (no limit at depth 1) matches nothing.
	require.Nil(t, e.call(t, "messaging", d("message_type", "marketing")).Statuses[0].CurrentLimit)
	// 100 messages a day to a number, whatever their type.
	require.Equal(t, 95, e.admitted(t, 100, "messaging", d("to_number", "2061111111")))
	require.Equal(t, 100, e.admitted(t, 101, "messaging", d("to_number", "2063333333")))
}

func TestReadmeExample3(t *testing.T) {
	e := newEnv(t, `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`, envOpts{})
	require.Equal(t, 10, e.admitted(t, 12, "edge_proxy_per_ip", d("remote_address", "50.0.0.1")))
	require.Equal(t, 10, e.admitted(t, 12, "edge_proxy_per_ip", d("remote_address", "50.0.0.2")))
	require.Zero(t, e.admitted(t, 3, "edge_proxy_per_ip", d("remote_address", "50.0.0.5")))
	r := e.call(t, "edge_proxy_per_ip", d("remote_address", "50.0.0.5"))
	require.Equal(t, uint32(0), r.Statuses[0].CurrentLimit.RequestsPerUnit)
	e.now.Add(5_000_000)
	require.Zero(t, e.admitted(t, 1, "edge_proxy_per_ip", d("remote_address", "50.0.0.5")))
}

func TestReadmeExample4(t *testing.T) {
	oneLevel := newEnv(t, `
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
`, envOpts{})
	r := oneLevel.call(t, "example4", d("key", "value", "subkey", "subvalue"))
	require.Equal(t, OK, r.OverallCode)
	require.Nil(t, r.Statuses[0].CurrentLimit, "a request deeper than the configuration matches nothing")

	twoLevels := newEnv(t, `
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
`, envOpts{})
	require.Equal(t, 300, twoLevels.admitted(t, 301, "example4", d("key", "value", "subkey", "subvalue")))
	require.Nil(t, twoLevels.call(t, "example4", d("key", "value")).Statuses[0].CurrentLimit)
}

func TestReadmeExample5(t *testing.T) {
	e := newEnv(t, `
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`, envOpts{})
	require.Equal(t, 1000, e.admitted(t, 1000, "internal", d("ldap", "x")))
	st := e.call(t, "internal", d("ldap", "x")).Statuses[0]
	require.Equal(t, uint32(math.MaxUint32), st.LimitRemaining)
	require.Equal(t, 100, e.admitted(t, 101, "internal", d("azure", "x")))
}

func TestReadmeExample6(t *testing.T) {
	e := newEnv(t, `
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`, envOpts{})
	require.Equal(t, 30, e.admitted(t, 30, "example6", d("service", "auth-service", "user", "user-a")))
	st := e.call(t, "example6", d("service", "auth-service", "user", "user-a")).Statuses[0]
	require.Equal(t, OK, st.Code)
	require.Zero(t, st.LimitRemaining, "the shadow limit is spent, and says so")
	require.Equal(t, 20, e.admitted(t, 30, "example6", d("service", "auth-service", "user", "user-b")))
}

func TestReadmeExample7(t *testing.T) {
	e := newEnv(t, `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
`, envOpts{})
	one := d("key_1", "value_1", "user", "bkthomps")
	two := d("key_2", "value_2", "user", "bkthomps")
	// Both matched: only the replacing 10/s limit applies.
	require.Equal(t, 10, e.admitted(t, 12, "example7", one, two))
	r := e.call(t, "example7", one, two)
	require.Nil(t, r.Statuses[0].CurrentLimit, "replaced")
	require.Equal(t, uint32(10), r.Statuses[1].CurrentLimit.RequestsPerUnit)
	// ... and the replaced 5/s limit was not touched.
	require.Equal(t, 5, e.admitted(t, 6, "example7", one))
	require.Zero(t, e.admitted(t, 1, "example7", two))
}

func TestReadmeExample9(t *testing.T) {
	e := newEnv(t, `
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
`, envOpts{})
	require.Equal(t, 20, e.admitted(t, 21, "example9", d("key1", "value_1")))
	require.Equal(t, 20, e.admitted(t, 21, "example9", d("key1", "value_2")), "a limit per value")
	require.Nil(t, e.call(t, "example9", d("key1", "other")).Statuses[0].CurrentLimit)
}
