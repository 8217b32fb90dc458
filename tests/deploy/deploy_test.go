// Package deploy checks what a new user is handed besides the code: the
// licence files, the container images' definitions (deploy/Containerfile,
// deploy/Containerfile.filter) and the compose example (deploy/compose.yaml),
// so that each says what the rest of the tree does. deploy/build-image.sh
// builds the images in CI; these tests check what a build cannot: that the
// files agree with one another and with the commands.
package deploy

import (
	"bytes"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/rlcore/rl/internal/frontend/service"
)

const root = "../.."

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	require.NoError(t, err)
	return string(b)
}

// Every licence or notice file of the tree other than the root's marks
// third-party files: NOTICE must name its directory.
func TestNoticeNamesThirdPartyFiles(t *testing.T) {
	out, err := exec.Command("git", "-C", root, "ls-files").Output()
	require.NoError(t, err)
	notice := read(t, "NOTICE")
	found := 0
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		base := strings.ToUpper(filepath.Base(f))
		if filepath.Dir(f) == "." || !(strings.HasPrefix(base, "LICENSE") || strings.HasPrefix(base, "LICENCE") ||
			strings.HasPrefix(base, "COPYING") || strings.HasPrefix(base, "NOTICE")) {
			continue
		}
		found++
		require.Contains(t, notice, filepath.Dir(f)+"/", "NOTICE does not name the third-party files beside %s", f)
	}
	require.NotZero(t, found, "no third-party licence found: the test no longer sees envoyproxy/ratelimit's")
}

// containerfile is what the tests read of a Containerfile.
type containerfile struct {
	from, user, healthcheck, expose string
	labels                          map[string]string
	copies                          [][]string // sources..., destination
}

func parseContainerfile(t *testing.T, path string) containerfile {
	t.Helper()
	text := strings.ReplaceAll(read(t, path), "\\\n", " ")
	cf := containerfile{labels: map[string]string{}}
	label := regexp.MustCompile(`([a-z0-9.]+)="([^"]*)"`)
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch instr {
		case "FROM":
			require.Empty(t, cf.from, "%s: a second FROM (a build stage would need a registry)", path)
			cf.from = rest
		case "USER":
			cf.user = rest
		case "HEALTHCHECK":
			cf.healthcheck = rest
		case "EXPOSE":
			cf.expose = rest
		case "LABEL":
			for _, m := range label.FindAllStringSubmatch(rest, -1) {
				cf.labels[m[1]] = m[2]
			}
		case "COPY":
			cf.copies = append(cf.copies, strings.Fields(rest))
		}
	}
	return cf
}

func TestContainerfiles(t *testing.T) {
	require.Contains(t, read(t, "LICENSE"), "Apache License\n                           Version 2.0, January 2004")
	for _, path := range []string{"deploy/Containerfile", "deploy/Containerfile.filter"} {
		t.Run(path, func(t *testing.T) {
			cf := parseContainerfile(t, path)
			require.Equal(t, "scratch", cf.from, "no registry is needed")
			require.Equal(t, "Apache-2.0", cf.labels["org.opencontainers.image.licenses"], "LICENSE is Apache-2.0")
			require.Equal(t, "${VERSION}", cf.labels["org.opencontainers.image.version"])
			require.Equal(t, "${REVISION}", cf.labels["org.opencontainers.image.revision"])
		})
	}

	cf := parseContainerfile(t, "deploy/Containerfile")
	uid, gid, ok := strings.Cut(cf.user, ":")
	require.True(t, ok, "USER %q: want uid:gid (no /etc/passwd in scratch)", cf.user)
	for _, id := range []string{uid, gid} {
		n, err := strconv.Atoi(id)
		require.NoError(t, err, "USER %q: numeric, as scratch has no /etc/passwd", cf.user)
		require.NotZero(t, n, "USER %q: not root", cf.user)
	}
	require.Equal(t, "8080", cf.expose)
	require.Contains(t, cf.copies, []string{"bin/rl-wasm-host", "bin/rl-migrate", "/usr/local/bin/"})
	require.Contains(t, cf.copies, []string{"LICENSE", "NOTICE", "/usr/share/doc/rl/"})
	// The health check asks the decision API's listener at its default
	// address, where /readyz is.
	m := regexp.MustCompile(`(?m)^const DefaultAPIListen = "([^"]+)"$`).FindStringSubmatch(read(t, "cmd/rl-wasm-host/run.go"))
	require.NotNil(t, m, "DefaultAPIListen not found in cmd/rl-wasm-host/run.go")
	require.Contains(t, cf.healthcheck, `CMD ["/usr/local/bin/rl-wasm-host", "-health", "http://`+m[1]+`/readyz"]`)

	filter := parseContainerfile(t, "deploy/Containerfile.filter")
	require.Equal(t, [][]string{{"plugin.wasm", "./"}}, filter.copies, "Istio's image format: plugin.wasm alone")
}

// compose is the part of the compose specification compose.yaml uses;
// decoding refuses any other field.
type compose struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Entrypoint  []string          `yaml:"entrypoint"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		Ports       []string          `yaml:"ports"`
		Restart     string            `yaml:"restart"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Healthcheck *struct {
			Test     []string `yaml:"test"`
			Interval string   `yaml:"interval"`
			Timeout  string   `yaml:"timeout"`
			Retries  int      `yaml:"retries"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
	Volumes map[string]struct{} `yaml:"volumes"`
}

func TestCompose(t *testing.T) {
	var c compose
	dec := yaml.NewDecoder(strings.NewReader(read(t, "deploy/compose.yaml")))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&c))
	for _, name := range []string{"postgres", "migrate", "upstream", "rl-wasm-host"} {
		require.Contains(t, c.Services, name)
	}

	// rl's image is the one build-image.sh builds, unless RL_IMAGE names another.
	m := regexp.MustCompile(`(?m)^registry=\$\{RL_REGISTRY:-([^}]+)\}$`).FindStringSubmatch(read(t, "deploy/build-image.sh"))
	require.NotNil(t, m, "build-image.sh's default registry")
	rlImage := "${RL_IMAGE:-" + m[1] + "/rl:latest}"
	cf := parseContainerfile(t, "deploy/Containerfile")

	for name, s := range c.Services {
		t.Run(name, func(t *testing.T) {
			require.NotEmpty(t, s.Image)
			for dep, d := range s.DependsOn {
				target, ok := c.Services[dep]
				require.True(t, ok, "depends_on %q: no such service", dep)
				switch d.Condition {
				case "service_started":
				case "service_healthy":
					require.True(t, target.Healthcheck != nil || target.Image == rlImage, "%q waits for %q to be healthy, which has no health check", name, dep)
				case "service_completed_successfully":
					require.Equal(t, "no", target.Restart, "%q waits for %q to complete, which restarts", name, dep)
				default:
					t.Fatalf("depends_on %q: condition %q", dep, d.Condition)
				}
			}
			for _, v := range s.Volumes {
				src, _, ok := strings.Cut(v, ":")
				require.True(t, ok, "volume %q", v)
				if strings.HasPrefix(src, "./") {
					_, err := os.Stat(filepath.Join(root, "deploy", src))
					require.NoError(t, err, "volume %q", v)
				} else {
					require.Contains(t, c.Volumes, src, "volume %q: not declared", v)
				}
			}
			if u := s.Environment["DATABASE_URL"]; u != "" {
				checkDatabaseURL(t, c, u)
			}
		})
	}

	migrate, host := c.Services["migrate"], c.Services["rl-wasm-host"]
	require.Equal(t, rlImage, migrate.Image)
	require.Equal(t, rlImage, host.Image)
	require.Equal(t, []string{"/usr/local/bin/rl-migrate"}, migrate.Entrypoint, "the image's COPY puts rl-migrate there")
	require.Equal(t, []string{"up"}, migrate.Command)
	require.Equal(t, []string{"8080:8080"}, host.Ports, "the image EXPOSEs %s", cf.expose)
	require.Equal(t, []string{"-config", "/etc/rl/rules.yaml", "-store", "postgres"}, host.Command)

	// The rules mounted at /etc/rl/rules.yaml load, and their upstream is
	// the upstream service on the port its httpd listens on.
	var rules string
	for _, v := range host.Volumes {
		if src, dst, _ := strings.Cut(v, ":"); strings.HasPrefix(dst, "/etc/rl/rules.yaml") {
			rules = filepath.Join(root, "deploy", src)
		}
	}
	require.NotEmpty(t, rules, "no rules mounted at /etc/rl/rules.yaml")
	cfg, err := service.LoadConfig(rules)
	require.NoError(t, err)
	up, err := url.Parse(cfg.Upstream)
	require.NoError(t, err)
	upHost, upPort, err := net.SplitHostPort(up.Host)
	require.NoError(t, err)
	require.Contains(t, c.Services, upHost, "the rules' upstream %q is no service", cfg.Upstream)
	require.Contains(t, strings.Join(c.Services[upHost].Command, " "), "-p "+upPort+" ", "the upstream service does not listen on %s", upPort)
}

// checkDatabaseURL: u names the postgres service, its port, and the user,
// password and database that service creates.
func checkDatabaseURL(t *testing.T, c compose, u string) {
	t.Helper()
	pu, err := url.Parse(u)
	require.NoError(t, err)
	h, port, err := net.SplitHostPort(pu.Host)
	require.NoError(t, err)
	pg, ok := c.Services[h]
	require.True(t, ok, "DATABASE_URL %q: no service %q", u, h)
	require.True(t, strings.Contains(pg.Image, "/postgres:"), "DATABASE_URL names %q, not PostgreSQL", h)
	require.Equal(t, "5432", port)
	pw, _ := pu.User.Password()
	require.Equal(t, pg.Environment["POSTGRES_USER"], pu.User.Username())
	require.Equal(t, pg.Environment["POSTGRES_PASSWORD"], pw)
	require.Equal(t, pg.Environment["POSTGRES_DB"], strings.TrimPrefix(pu.Path, "/"))
}

// The scripts that CI runs are shell scripts that parse.
func TestScriptsParse(t *testing.T) {
	for _, s := range []string{"deploy/build-image.sh"} {
		out, err := exec.Command("bash", "-n", filepath.Join(root, s)).CombinedOutput()
		require.NoError(t, err, "%s: %s", s, out)
		require.True(t, bytes.HasPrefix([]byte(read(t, s)), []byte("#!/usr/bin/env bash\n")), s)
	}
}
