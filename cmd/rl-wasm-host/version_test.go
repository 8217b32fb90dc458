package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/sql/extension"
	"github.com/rlcore/rl/sql/migrations"
	"github.com/rlcore/rl/wasm"
)

func TestVersion(t *testing.T) {
	out, err := exec.Command(binary(t), "-version").CombinedOutput()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	require.Len(t, lines, 7, "%s", out)
	// The module version go build stamped from the checkout when it did
	// (a clone: a pseudo-version), else the one given with -ldflags -X.
	info, err := exec.Command("go", "version", "-m", binary(t)).Output()
	require.NoError(t, err)
	want := "v0.0.0-e2e"
	if m := regexp.MustCompile(`(?m)^\tmod\t\S+\t(\S+)`).FindSubmatch(info); m != nil && string(m[1]) != "(devel)" {
		want = string(m[1])
	}
	require.Equal(t, "rl-wasm-host "+want, lines[0])
	require.Equal(t, []string{
		fmt.Sprintf("schema: %d", migrations.Latest),
		fmt.Sprintf("extension: %d", extension.Version),
		fmt.Sprintf("wasm-abi: %d", wasm.ABIVersion),
	}, lines[4:])
	// Built in a git checkout: the revision it was built from (a commit of
	// this repository; HEAD may have moved on since the build). The go
	// command stamps none in a linked worktree (its .git is a file), so the
	// test asks the binary's build info, not git, whether there is one.
	if strings.Contains(string(info), "vcs.revision=") {
		rev := regexp.MustCompile(`(?m)^commit: ([0-9a-f]{40})$`).FindStringSubmatch(string(out))
		require.NotNil(t, rev, "no revision in %q", out)
		typ, err := exec.Command("git", "cat-file", "-t", rev[1]).Output()
		require.NoError(t, err)
		require.Equal(t, "commit", strings.TrimSpace(string(typ)))
		require.Regexp(t, `^modified: (true|false)$`, lines[2])
	} else {
		require.Equal(t, []string{"commit: unknown", "modified: unknown"}, lines[1:3])
	}
}

func TestHealthCheck(t *testing.T) {
	answer := map[string]int{"/ok": 200, "/draining": 503, "/moved": 302}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/ok", http.StatusFound)
			return
		}
		w.WriteHeader(answer[r.URL.Path])
	}))
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	cases := []struct {
		name string
		url  string
		code int
		says string
	}{
		{"200 is healthy", srv.URL + "/ok", 0, ""},
		{"503 is not", srv.URL + "/draining", 1, "answered 503 Service Unavailable"},
		{"a redirect is not followed", srv.URL + "/moved", 1, "answered 302 Found"},
		{"nothing listening", closed.URL + "/ok", 1, "connection refused"},
		{"not a URL", "127.0.0.1:8081/readyz", 2, "want an http or https URL"},
		{"another scheme", "file:///etc/passwd", 2, "want an http or https URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stderr strings.Builder
			require.Equal(t, tc.code, healthCheck(tc.url, time.Second, &stderr))
			if tc.says == "" {
				require.Empty(t, stderr.String())
			} else {
				require.Contains(t, stderr.String(), tc.says)
			}
		})
	}
}

// The image's HEALTHCHECK: -health against a running rl-wasm-host's
// /readyz, then against one that has exited.
func TestHealthFlag(t *testing.T) {
	p := start(t, "-config", "sample.yaml")
	out, err := exec.Command(binary(t), "-health", p.api+"/readyz").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Empty(t, string(out))

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait(t))
	out, err = exec.Command(binary(t), "-health", p.api+"/readyz", "-health-timeout", "2s").CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 1, ee.ExitCode(), "%s", out)
	require.Contains(t, string(out), "rl-wasm-host: -health:")
}
