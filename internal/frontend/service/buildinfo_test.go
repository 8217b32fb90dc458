package service

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/request/version"
)

// rl_build_info says which build runs, with -version's values; and
// rl_config_last_reload_timestamp_seconds when the rules in force were
// loaded: at start, moved by a successful reload, kept by a failed one.
func TestBuildInfoAndReloadTimestamp(t *testing.T) {
	const rules = "rules: [{name: r, strategy: fixed, limit: 1, window: 1m}]\n"
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(rules), 0o600))
	beforeStart := time.Now()
	e := newEnv(t, rules, nil)
	afterStart := time.Now()

	v := version.Get()
	want := `rl_build_info{extension="` + v.Extension + `",goversion="` + v.Go + `",revision="` + v.Commit +
		`",schema="` + strconv.Itoa(v.Schema) + `",version="` + v.Module + `",wasm_abi="` + strconv.Itoa(v.ABI) + `"} 1` + "\n"
	require.Contains(t, e.metrics(t), want)

	loadedAt := func() time.Time {
		m := regexp.MustCompile(`(?m)^rl_config_last_reload_timestamp_seconds (\S+)$`).FindStringSubmatch(e.metrics(t))
		require.NotNil(t, m, "rl_config_last_reload_timestamp_seconds is exported")
		f, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return time.Unix(0, int64(f*1e9))
	}
	// The exposition rounds to the float's precision: a microsecond of slack.
	within := func(got, from, to time.Time) {
		t.Helper()
		require.False(t, got.Before(from.Add(-time.Microsecond)) || got.After(to.Add(time.Microsecond)),
			"loaded at %v, not between %v and %v", got, from, to)
	}
	started := loadedAt()
	within(started, beforeStart, afterStart)

	beforeReload := time.Now()
	require.NoError(t, e.svc.Reload(path))
	reloaded := loadedAt()
	within(reloaded, beforeReload, time.Now())

	require.NoError(t, os.WriteFile(path, []byte("rules: [{name: r, strategy: nope, limit: 1, window: 1m}]\n"), 0o600))
	require.Error(t, e.svc.Reload(path))
	require.Equal(t, reloaded, loadedAt(), "a failed reload leaves the time the rules in force were loaded")
	require.Contains(t, e.metrics(t), "rl_config_last_reload_success 0\n")
}
