package pipeline

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/core"
)

const sec = int64(1_000_000)

// burstDaily is the sample configuration's /v1/search policy after one
// request: a token bucket of 10 a second and 1000 a day.
func burstDaily() Verdict {
	return Verdict{Allowed: true, Deciding: 0, Limits: []LimitState{
		{Name: "burst", Allowed: true, Limit: 10, Remaining: 9, Window: sec, ResetAfter: sec / 10, NextAfter: sec / 10},
		{Name: "daily", Allowed: true, Limit: 1000, Remaining: 999, Window: 86400 * sec, ResetAfter: 3600 * sec, NextAfter: 3600 * sec},
	}}
}

func TestAppendFields(t *testing.T) {
	for _, c := range []struct {
		name string
		v    Verdict
		f    Fields
		want [][2]string
	}{
		{"every limit, in the policy's order", burstDaily(), Fields{}, [][2]string{
			{"RateLimit-Policy", `"burst";q=10;w=1, "daily";q=1000;w=86400`},
			{"RateLimit", `"burst";r=9;t=1, "daily";r=999;t=3600`},
			{"X-RateLimit-Limit", "10"},
			{"X-RateLimit-Remaining", "9"},
			{"X-RateLimit-Reset", "1"},
		}},
		{"closest: the deciding limit alone in RateLimit", burstDaily(), Fields{Closest: true}, [][2]string{
			{"RateLimit-Policy", `"burst";q=10;w=1, "daily";q=1000;w=86400`},
			{"RateLimit", `"burst";r=9;t=1`},
			{"X-RateLimit-Limit", "10"},
			{"X-RateLimit-Remaining", "9"},
			{"X-RateLimit-Reset", "1"},
		}},
		{"a denial: the denying limit first, then the other denying one, then the rest", Verdict{Deciding: 2, Limits: []LimitState{
			{Name: "a", Allowed: true, Limit: 5, Remaining: 4, Window: 60 * sec, ResetAfter: 12 * sec, NextAfter: 12 * sec},
			{Name: "b", Limit: 10, Remaining: 0, Window: sec, ResetAfter: sec, RetryAfter: sec / 10, NextAfter: sec / 10},
			{Name: "c", Limit: 100, Remaining: 0, Window: 3600 * sec, ResetAfter: 3000 * sec, RetryAfter: 1500*sec + 1, NextAfter: 1500*sec + 1},
		}}, Fields{}, [][2]string{
			{"RateLimit-Policy", `"a";q=5;w=60, "b";q=10;w=1, "c";q=100;w=3600`},
			{"RateLimit", `"c";r=0;t=1501, "b";r=0;t=1, "a";r=4;t=12`},
			{"X-RateLimit-Limit", "100"},
			{"X-RateLimit-Remaining", "0"},
			{"X-RateLimit-Reset", "3000"},
			{"Retry-After", "1501"},
		}},
		{"a denial, closest", Verdict{Deciding: 1, Limits: []LimitState{
			{Name: "a", Allowed: true, Limit: 5, Remaining: 5, Window: 60 * sec},
			{Name: "b", Limit: 10, Remaining: 0, Window: sec, ResetAfter: sec, RetryAfter: 1, NextAfter: 1},
		}}, Fields{Closest: true}, [][2]string{
			{"RateLimit-Policy", `"a";q=5;w=60, "b";q=10;w=1`},
			{"RateLimit", `"b";r=0;t=1`},
			{"X-RateLimit-Limit", "10"},
			{"X-RateLimit-Remaining", "0"},
			{"X-RateLimit-Reset", "1"},
			{"Retry-After", "1"},
		}},
		{"quota unit and partition key", burstDaily(), Fields{QuotaUnit: "content-bytes", PartitionKey: []byte{0xde, 0xad, 0xbe, 0xef}}, [][2]string{
			{"RateLimit-Policy", `"burst";q=10;qu="content-bytes";w=1;pk=:3q2+7w==:, "daily";q=1000;qu="content-bytes";w=86400;pk=:3q2+7w==:`},
			{"RateLimit", `"burst";r=9;t=1;pk=:3q2+7w==:, "daily";r=999;t=3600;pk=:3q2+7w==:`},
			{"X-RateLimit-Limit", "10"},
			{"X-RateLimit-Remaining", "9"},
			{"X-RateLimit-Reset", "1"},
		}},
		{"requests, the default unit, is left out", burstDaily(), Fields{QuotaUnit: "requests", Closest: true}, [][2]string{
			{"RateLimit-Policy", `"burst";q=10;w=1, "daily";q=1000;w=86400`},
			{"RateLimit", `"burst";r=9;t=1`},
			{"X-RateLimit-Limit", "10"},
			{"X-RateLimit-Remaining", "9"},
			{"X-RateLimit-Reset", "1"},
		}},
		{"names are Structured Field Strings; durations round up", Verdict{Limits: []LimitState{
			{Name: `q"uo\te` + "\x01", Limit: 100, Window: 60 * sec, ResetAfter: 16*sec + 1, RetryAfter: 1, NextAfter: 1},
		}}, Fields{}, [][2]string{
			{"RateLimit-Policy", `"q\"uo\\te_";q=100;w=60`},
			{"RateLimit", `"q\"uo\\te_";r=0;t=1`},
			{"X-RateLimit-Limit", "100"},
			{"X-RateLimit-Remaining", "0"},
			{"X-RateLimit-Reset", "17"},
			{"Retry-After", "1"},
		}},
		{"nothing missing: no t; a cost above the limit: no Retry-After; spans saturate", Verdict{Limits: []LimitState{
			{Name: "big", Never: true, Limit: 3, Remaining: 3, Window: 1, ResetAfter: math.MaxInt64},
		}}, Fields{}, [][2]string{
			{"RateLimit-Policy", `"big";q=3;w=1`},
			{"RateLimit", `"big";r=3`},
			{"X-RateLimit-Limit", "3"},
			{"X-RateLimit-Remaining", "3"},
			{"X-RateLimit-Reset", "9223372037"},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := AppendFields(nil, &c.v, &c.f)
			require.Equal(t, c.want, got)
			for _, kv := range got[:2] {
				require.NoError(t, parseSFList(kv[1]), "%s: %s", kv[0], kv[1])
			}
		})
	}
}

// TestAppendFieldsFromCore writes the fields of core's decisions of the
// sample configuration's burst and daily limits: t is NextAfter, not the
// full reset (a day for the daily limit's window end; a tenth of a second
// for a token, not the whole bucket's refill).
func TestAppendFieldsFromCore(t *testing.T) {
	ls := []core.Limit{{Algorithm: core.TokenBucket, Limit: 10, Window: sec}, {Algorithm: core.FixedWindow, Limit: 1000, Window: 86400 * sec}}
	names := []string{"burst", "daily"}
	ss := make([]core.State, 2)
	ds := make([]core.Decision, 2)
	day := int64(1767225600) * sec
	i, err := core.TakeAll(ls, ss, day+3600*sec, 10, ds) // the burst spent
	require.NoError(t, err)
	v := FromCore(names, ls, nil, ds, i)
	f := AppendFields(nil, &v, &Fields{})
	require.Equal(t, `"burst";q=10;w=1, "daily";q=1000;w=86400`, f[0][1])
	require.Equal(t, `"burst";r=0;t=1, "daily";r=990;t=82800`, f[1][1])
	i, err = core.TakeAll(ls, ss, day+3600*sec+sec/20, 1, ds) // denied by the burst
	require.NoError(t, err)
	v = FromCore(names, ls, nil, ds, i)
	require.False(t, v.Allowed)
	require.Equal(t, []string{"burst"}, v.Violated())
	f = AppendFields(nil, &v, &Fields{})
	require.Equal(t, `"burst";r=0;t=1, "daily";r=990;t=82800`, f[1][1])
	require.Equal(t, [2]string{"Retry-After", "1"}, f[5])
}

func TestViolated(t *testing.T) {
	v := Verdict{Deciding: 2, Limits: []LimitState{{Name: "a", Allowed: true}, {Name: "b"}, {Name: "c"}, {Name: "d"}}}
	require.Equal(t, []string{"c", "b", "d"}, v.Violated())
	v = burstDaily()
	require.Empty(t, v.Violated())
}

func TestPartitionKey(t *testing.T) {
	secret := []byte("0123456789abcdef")
	a := PartitionKey(secret, "search", "192.0.2.1")
	require.Len(t, a, PartitionKeyBytes)
	require.Equal(t, a, PartitionKey(secret, "search", "192.0.2.1"), "stable")
	require.NotEqual(t, a, PartitionKey(secret, "export", "192.0.2.1"), "one per quota: the rule counts")
	require.NotEqual(t, a, PartitionKey(secret, "search", "192.0.2.2"))
	require.NotEqual(t, a, PartitionKey([]byte("another secret!!"), "search", "192.0.2.1"), "keyed")
	require.NotEqual(t, PartitionKey(secret, "ab", "c"), PartitionKey(secret, "a", "bc"), "rule and key are delimited")
	require.False(t, bytes.Contains(a, []byte("192.0.2.1")))
}

// parseSFList checks s against RFC 9651's List of Items whose bare items
// are Strings and whose parameters are Integers, Strings or Byte
// Sequences: what AppendFields writes. A client's parser must read it.
func parseSFList(s string) error {
	p := &sfParser{s: s}
	for {
		if err := p.item(); err != nil {
			return err
		}
		p.ows()
		if p.eof() {
			return nil
		}
		if !p.take(',') {
			return fmt.Errorf("at %d: want a comma", p.i)
		}
		p.ows()
		if p.eof() {
			return fmt.Errorf("trailing comma")
		}
	}
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) eof() bool { return p.i >= len(p.s) }
func (p *sfParser) take(c byte) bool {
	if !p.eof() && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}
func (p *sfParser) ows() {
	for !p.eof() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) item() error {
	if err := p.bare(); err != nil {
		return err
	}
	for p.take(';') {
		for p.take(' ') {
		}
		start := p.i
		for !p.eof() && (p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] >= '0' && p.s[p.i] <= '9' || strings.IndexByte("_-.*", p.s[p.i]) >= 0) {
			p.i++
		}
		if p.i == start || p.s[start] < 'a' || p.s[start] > 'z' {
			return fmt.Errorf("at %d: bad parameter key", start)
		}
		if p.take('=') {
			if err := p.bare(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *sfParser) bare() error {
	switch {
	case p.take('"'):
		for !p.eof() {
			c := p.s[p.i]
			p.i++
			switch {
			case c == '\\':
				if p.eof() || p.s[p.i] != '"' && p.s[p.i] != '\\' {
					return fmt.Errorf("at %d: bad escape", p.i)
				}
				p.i++
			case c == '"':
				return nil
			case c < 0x20 || c > 0x7e:
				return fmt.Errorf("at %d: byte %#x in a string", p.i-1, c)
			}
		}
		return fmt.Errorf("unterminated string")
	case p.take(':'):
		end := strings.IndexByte(p.s[p.i:], ':')
		if end < 0 {
			return fmt.Errorf("unterminated byte sequence")
		}
		if _, err := base64.StdEncoding.DecodeString(p.s[p.i : p.i+end]); err != nil {
			return err
		}
		p.i += end + 1
		return nil
	}
	start := p.i
	p.take('-')
	for !p.eof() && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	if p.i-start < 1 || p.i-start > 15 {
		return fmt.Errorf("at %d: want a string, byte sequence or integer of 1 to 15 digits", start)
	}
	_, err := strconv.ParseInt(p.s[start:p.i], 10, 64)
	return err
}

// TestAppendFieldsShadow: a shadow limit is in no field, whatever it
// would have decided; a policy of only shadow limits gets no field and is
// admitted; Violated never names a shadow limit.
func TestAppendFieldsShadow(t *testing.T) {
	ls := []core.Limit{{Algorithm: core.TokenBucket, Limit: 10, Window: sec}, {Algorithm: core.FixedWindow, Limit: 2, Window: 60 * sec}}
	names := []string{"burst", "candidate"}
	shadow := []bool{false, true}
	ds := []core.Decision{
		{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: sec, NextAfter: sec / 10},
		{Allowed: false, Limit: 2, Remaining: 0, ResetAfter: 30 * sec, RetryAfter: 30 * sec, NextAfter: 30 * sec},
	}
	v := FromCore(names, ls, shadow, ds, 0)
	require.True(t, v.Allowed)
	require.True(t, v.WouldDeny(1))
	require.False(t, v.WouldDeny(0))
	f := AppendFields(nil, &v, &Fields{})
	require.Equal(t, [][2]string{{FieldPolicy, `"burst";q=10;w=1`}, {FieldRateLimit, `"burst";r=7;t=1`},
		{FieldLimit, "10"}, {FieldRemaining, "7"}, {FieldReset, "1"}}, f)

	// Denied by the enforced limit: the candidate is neither listed nor
	// violated, even denying.
	ds[0] = core.Decision{Allowed: false, Limit: 10, Remaining: 0, ResetAfter: sec, RetryAfter: sec / 10, NextAfter: sec / 10}
	v = FromCore(names, ls, shadow, ds, 0)
	require.False(t, v.Allowed)
	require.False(t, v.WouldDeny(1), "a would-deny is counted only on an admitted request")
	require.Equal(t, []string{"burst"}, v.Violated())
	f = AppendFields(nil, &v, &Fields{Closest: true})
	require.Equal(t, `"burst";q=10;w=1`, f[0][1])
	require.Equal(t, `"burst";r=0;t=1`, f[1][1])
	require.Equal(t, [2]string{FieldRetryAfter, "1"}, f[len(f)-1])

	// Only shadow limits: admitted, no field at all.
	v = FromCore(names[1:], ls[1:], shadow[1:], ds[1:], 0)
	require.True(t, v.Allowed)
	require.True(t, v.WouldDeny(0))
	require.Empty(t, AppendFields(nil, &v, &Fields{}))
}
