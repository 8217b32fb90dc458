package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// configMap lays out dir as the kubelet mounts a ConfigMap: the files are
// symbolic links through ..data, a link to a timestamped directory that an
// update replaces by renaming a new link over it. It writes version's
// files and swaps ..data to them.
func configMap(t *testing.T, dir, version string, files map[string]string) {
	t.Helper()
	ts := filepath.Join(dir, "..2026_"+version)
	require.NoError(t, os.Mkdir(ts, 0o755))
	for name, text := range files {
		require.NoError(t, os.WriteFile(filepath.Join(ts, name), []byte(text), 0o644))
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			require.NoError(t, os.Symlink(filepath.Join("..data", name), link))
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	require.NoError(t, os.Symlink(filepath.Base(ts), tmp))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "..data")))
}

const (
	watchRulesA = "upstream: demo\nrules: [{name: a, strategy: fixed, limit: 1, window: 1m}]\n"
	watchRulesB = "upstream: demo\nrules: [{name: a, strategy: fixed, limit: 1, window: 1m}, {name: b, strategy: fixed, limit: 2, window: 1m}]\n"
)

// The watcher sees an edit, a ConfigMap's symbolic-link swap and a rate
// limit service directory's new file; not a rewrite with the same content,
// nor files LoadConfig does not read; a file gone is logged once and no
// change.
func TestConfigWatcherPoll(t *testing.T) {
	dir := t.TempDir()
	cm, rlsDir := filepath.Join(dir, "cm"), filepath.Join(dir, "rls")
	require.NoError(t, os.Mkdir(cm, 0o755))
	require.NoError(t, os.Mkdir(rlsDir, 0o755))
	configMap(t, cm, "a", map[string]string{"rules.yaml": watchRulesA})
	require.NoError(t, os.WriteFile(filepath.Join(rlsDir, "edge.yaml"), []byte("domain: edge\n"), 0o600))
	var logs bytes.Buffer
	w := newConfigWatcher(slog.New(slog.NewTextHandler(&logs, nil)), filepath.Join(cm, "rules.yaml"), rlsDir)

	require.False(t, w.poll(), "unchanged")
	configMap(t, cm, "b", map[string]string{"rules.yaml": watchRulesA})
	require.False(t, w.poll(), "a swap to the same content")
	configMap(t, cm, "c", map[string]string{"rules.yaml": watchRulesB})
	require.True(t, w.poll(), "a ConfigMap update")
	require.False(t, w.poll(), "seen once")

	require.NoError(t, os.WriteFile(filepath.Join(rlsDir, ".hidden.yaml"), []byte("x"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(rlsDir, "notes.txt"), []byte("x"), 0o600))
	require.False(t, w.poll(), "files the rate limit service does not read")
	require.NoError(t, os.WriteFile(filepath.Join(rlsDir, "mesh.yaml"), []byte("domain: mesh\n"), 0o600))
	require.True(t, w.poll(), "a new domain file")

	rules := filepath.Join(cm, "..2026_c", "rules.yaml")
	require.NoError(t, os.Rename(rules, rules+".moved"))
	require.False(t, w.poll(), "unreadable: no change")
	require.False(t, w.poll())
	require.Equal(t, 1, strings.Count(logs.String(), "cannot read the configuration"), "logged once: %s", logs.String())
	require.NoError(t, os.Rename(rules+".moved", rules))
	require.False(t, w.poll(), "back as it was")
	require.NoError(t, os.WriteFile(rules, []byte(watchRulesA), 0o644))
	require.True(t, w.poll(), "an edit in place")
}

// run polls at each tick it is given (the test's, not a clock) and asks
// for a reload when the files changed, without blocking on a reload
// already waiting.
func TestConfigWatcherRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(watchRulesA), 0o600))
	w := newConfigWatcher(slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)), path, "")
	tick, reload := make(chan time.Time), make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		w.run(ctx, tick, reload)
		close(done)
	}()
	// Two ticks: the second is taken only once the first poll is over
	// (the second poll may still be reading when polled returns).
	polled := func() {
		tick <- time.Time{}
		tick <- time.Time{}
	}
	// Written as a whole (a new file renamed over the old one): the poll
	// still running may read the file while it is written, and an edit in
	// place could show it half written, a change of its own that would
	// ask for a second reload.
	write := func(rules string) {
		tmp := path + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(rules), 0o600))
		require.NoError(t, os.Rename(tmp, path))
	}
	polled()
	require.Empty(t, reload, "nothing changed")
	write(watchRulesB)
	tick <- time.Time{}
	require.Equal(t, syscall.SIGHUP, <-reload)
	polled()
	require.Empty(t, reload, "one change, one reload")

	reload <- syscall.SIGHUP // a reload waiting (a SIGHUP, say)
	write(watchRulesA)
	polled() // does not block on it
	require.Len(t, reload, 1)
	cancel()
	<-done
}

// waitLogged waits, with the test's deadline as the only bound, for the
// log to hold a line with all of parts, and returns it.
func waitLogged(t *testing.T, p *proc, parts ...string) string {
	t.Helper()
	deadline, ok := t.Deadline()
	for !ok || time.Now().Before(deadline.Add(-5*time.Second)) {
		for _, l := range strings.Split(p.log(), "\n") {
			found := true
			for _, s := range parts {
				found = found && strings.Contains(l, s)
			}
			if found {
				return l
			}
		}
		select {
		case err := <-p.exited:
			t.Fatalf("rl-wasm-host exited (%v):\n%s", err, p.log())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no log line with %q by the test's deadline:\n%s", parts, p.log())
	return ""
}

// -watch-config: the binary, its rules a ConfigMap's file, reloads when
// the ConfigMap is updated, with no signal; an invalid update keeps the
// rules in force; a negative interval is refused.
func TestWatchConfigConfigMap(t *testing.T) {
	cm := t.TempDir()
	configMap(t, cm, "a", map[string]string{"rules.yaml": watchRulesA})
	p := start(t, "-config", filepath.Join(cm, "rules.yaml"), "-watch-config", "20ms")
	code, _, body := call(t, "POST", p.api+"/v1/ratelimit/check", `{"rule":"b","key":"k"}`)
	require.Equal(t, 404, code, body)

	configMap(t, cm, "b", map[string]string{"rules.yaml": watchRulesB})
	waitLogged(t, p, `"msg":"config reloaded"`, `"rules":2`)
	code, _, body = call(t, "POST", p.api+"/v1/ratelimit/check", `{"rule":"b","key":"k"}`)
	require.Equal(t, 200, code, body)

	configMap(t, cm, "c", map[string]string{"rules.yaml": "rules: [{name: a, strategy: nope}]\n"})
	waitLogged(t, p, "config reload failed; keeping the rules in force")
	code, _, body = call(t, "POST", p.api+"/v1/ratelimit/check", `{"rule":"b","key":"k"}`)
	require.Equal(t, 200, code, "the rules in force stay: %s", body)

	out, err := exec.Command(binary(t), "-config", "sample.yaml", "-watch-config", "-1s").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "-watch-config -1s: want a positive duration")
}
