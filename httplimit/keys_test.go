package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/httplimit"
	"github.com/rlcore/rl/internal/testkit/fakestore"
)

// TestKeyFuncsFollowThePipeline: httplimit's key functions are
// pipeline.Key, the rule of every front end, not a copy with other rules.
// The copy handed the raw bearer token to the store as the key (PostgreSQL
// rows), to OnDecision (Decision.Key) and, for a token the limiter
// refused, to OnError (*rl.KeyError carries the key's first 64 bytes);
// pipeline.Key keeps "sha256:<digest>". The copy's Header and Query took
// the first of duplicate values (a decoy beside the real one) where
// pipeline.Key refuses them.
func TestKeyFuncsFollowThePipeline(t *testing.T) {
	const secret = "sk_live_0123456789abcdef"
	p := rl.MustPolicy(rl.Limit{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second})
	rs := fakestore.New(t, fakestore.Config{}) // records the keys that reach the store
	l, err := rl.New(rl.Config{Policy: p, Store: rs, BaseKey: "api"})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	var logged []string
	h, _ := setup(t, httplimit.Config{Limiter: l, Key: httplimit.APIKey(),
		OnError:    func(_ *http.Request, err error) { logged = append(logged, err.Error()) },
		OnDecision: func(_ *http.Request, d httplimit.Decision) { logged = append(logged, d.Key) }}, nil)
	get(h, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+secret) })
	get(h, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+secret+" x") })
	require.NotEmpty(t, rs.Requests())
	for _, r := range rs.Requests() {
		k := r.Prefix + ":" + r.Key
		assert.NotContains(t, k, secret, "the bearer token reached the store as its key (pipeline.Key stores sha256:<digest>)")
	}
	for _, m := range logged {
		assert.NotContains(t, m, secret, "the bearer token reached OnError/OnDecision")
	}

	// Duplicates: pipeline.Key refuses a header key given twice (a decoy
	// beside the real value); httplimit.Header keys on the first.
	r, _ := http.NewRequest("GET", "/?k=a&k=b", nil)
	r.Header.Add("X-User", "fresh-decoy")
	r.Header.Add("X-User", "real")
	_, err = httplimit.Header("X-User")(r)
	assert.Error(t, err, "X-User given twice: pipeline.Key answers 400, httplimit keys on the first")
	_, err = httplimit.Query("k")(r)
	assert.Error(t, err, "k given twice: pipeline.Key answers 400, httplimit keys on the first")
	assert.ErrorIs(t, err, httplimit.ErrNoKey)

	// A key field the Connection field lists never reaches the
	// application behind a proxy: a decoy.
	r, _ = http.NewRequest("GET", "/", nil)
	r.Header.Set("X-User", "u")
	r.Header.Set("Connection", "X-User")
	_, err = httplimit.Header("X-User")(r)
	assert.ErrorIs(t, err, httplimit.ErrNoKey)
}
