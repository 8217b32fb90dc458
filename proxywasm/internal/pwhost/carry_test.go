package pwhost

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// TestConfigChangeCarriesUsage (issue 22, item 1): a new plugin
// configuration (Envoy starts VMs with it on the same vm_id, whose shared
// data lives on) that changes a rule's limit decides each key on the usage
// it carries: raised, an exhausted key gets what is left at once; lowered,
// never more than the new limit counting the usage carried, with an exact
// Retry-After no longer than the new limit alone could give. For each of
// the six algorithms, through the committed module.
func TestConfigChangeCarriesUsage(t *testing.T) {
	for _, c := range []struct {
		name, before, after string
		used                int           // requests admitted under before
		more                int           // then admitted under after, at the same instant
		retry               time.Duration // of the next one: exact, in µs (and what the new limit alone gives)
	}{
		{"fixed raised", `"strategy":"fixed","limit":3,"window":"1m"`, `"strategy":"fixed","limit":6,"window":"1m"`, 3, 3, 50 * time.Second},
		{"fixed lowered", `"strategy":"fixed","limit":8,"window":"1m"`, `"strategy":"fixed","limit":4,"window":"1m"`, 5, 0, 50 * time.Second},
		{"sliding raised", `"strategy":"sliding","limit":3,"window":"1m"`, `"strategy":"sliding","limit":6,"window":"1m"`, 3, 3, 60 * time.Second},
		{"sliding lowered", `"strategy":"sliding","limit":8,"window":"1m"`, `"strategy":"sliding","limit":4,"window":"1m"`, 5, 0, 65 * time.Second},
		{"log raised", `"strategy":"log","limit":3,"window":"1m"`, `"strategy":"log","limit":6,"window":"1m"`, 3, 3, time.Minute},
		{"log lowered", `"strategy":"log","limit":8,"window":"1m"`, `"strategy":"log","limit":4,"window":"1m"`, 5, 0, time.Minute},
		{"token raised", `"strategy":"token","limit":3,"window":"1s"`, `"strategy":"token","limit":6,"window":"1s"`, 3, 3, 166667 * time.Microsecond},
		{"token lowered", `"strategy":"token","limit":8,"window":"1s"`, `"strategy":"token","limit":4,"window":"1s"`, 5, 0, time.Second / 4},
		{"leaky raised", `"strategy":"leaky","limit":3,"window":"1s"`, `"strategy":"leaky","limit":6,"window":"1s"`, 3, 3, 166667 * time.Microsecond},
		{"leaky lowered", `"strategy":"leaky","limit":8,"window":"1s"`, `"strategy":"leaky","limit":4,"window":"1s"`, 5, 0, time.Second / 4},
		{"gcra raised", `"strategy":"gcra","limit":3,"window":"1s"`, `"strategy":"gcra","limit":6,"window":"1s"`, 3, 3, 166667 * time.Microsecond},
		{"gcra lowered", `"strategy":"gcra","limit":8,"window":"1s"`, `"strategy":"gcra","limit":4,"window":"1s"`, 5, 0, time.Second / 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHost(t)
			h.Now.Store(t0.Add(10 * time.Second).UnixNano()) // 10 s into a minute
			vm := func(limit string) *VM {
				v, err := h.NewVM(context.Background(), []byte(`{"slots":16,"rules":[{"name":"r","key_by":"header:x-user",`+limit+`}]}`))
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			sendAs := func(v *VM, user string) *LocalResponse {
				t.Helper()
				s, err := v.Request([][2]string{{":method", "GET"}, {":authority", "app"}, {":path", "/"}, {"x-user", user}}, nil, [][2]string{{":status", "200"}})
				if err != nil {
					t.Fatal(err)
				}
				return s.Local
			}
			send := func(v *VM) *LocalResponse { return sendAs(v, "k") }
			old := vm(c.before)
			for i := range c.used {
				if l := send(old); l != nil {
					t.Fatalf("request %d under the old limit: %d", i, l.Status)
				}
			}
			neu := vm(c.after) // the new configuration, on the same shared data
			for i := range c.more {
				if l := send(neu); l != nil {
					t.Fatalf("request %d under the new limit: %d %s", i, l.Status, l.Body)
				}
			}
			l := send(neu)
			if l == nil || l.Status != 429 {
				t.Fatalf("admitted beyond the new limit, counting the usage carried: %+v", l)
			}
			want := strconv.FormatInt(int64((c.retry+time.Second-1)/time.Second), 10)
			got, _ := field(l.Headers, "retry-after")
			if got != want {
				t.Errorf("Retry-After %q, want %q", got, want)
			}
			// The new limit alone: a fresh key exhausted now waits no less.
			var alone *LocalResponse
			for range 10 {
				if alone = sendAs(neu, "fresh"); alone != nil {
					break
				}
			}
			if a, _ := field(alone.Headers, "retry-after"); len(got) > len(a) || len(got) == len(a) && got > a {
				t.Errorf("Retry-After %s, longer than the new limit alone gives (%s)", got, a)
			}
			h.Now.Add(int64(c.retry) - 1000)
			if l := send(neu); l == nil {
				t.Errorf("admitted 1 µs before the retry")
			}
			h.Now.Add(1000)
			if l := send(neu); l != nil {
				t.Errorf("denied at the retry: %d %s", l.Status, l.Body)
			}
		})
	}
}
