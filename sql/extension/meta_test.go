package extension_test

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlcore/rl/sql/extension"
)

// meta is the part of META.json (PGXN Meta Spec 1.0.0) the tests read.
type meta struct {
	Name         string   `json:"name"`
	Abstract     string   `json:"abstract"`
	Version      string   `json:"version"`
	Maintainer   []string `json:"maintainer"`
	License      string   `json:"license"`
	GeneratedBy  string   `json:"generated_by"`
	ReleaseState string   `json:"release_status"`
	MetaSpec     struct {
		Version string `json:"version"`
		URL     string `json:"url"`
	} `json:"meta-spec"`
	Provides map[string]struct {
		File     string `json:"file"`
		DocFile  string `json:"docfile"`
		Version  string `json:"version"`
		Abstract string `json:"abstract"`
	} `json:"provides"`
	Prereqs struct {
		Runtime struct {
			Requires map[string]any `json:"requires"`
		} `json:"runtime"`
	} `json:"prereqs"`
	Resources struct {
		Homepage   string `json:"homepage"`
		Bugtracker struct {
			Web string `json:"web"`
		} `json:"bugtracker"`
		Repository struct {
			URL  string `json:"url"`
			Web  string `json:"web"`
			Type string `json:"type"`
		} `json:"repository"`
	} `json:"resources"`
}

// semver is a semantic version as PGXN takes it (major.minor.patch).
var semver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// pgxnVersion is the version META.json gives the extension for its
// default_version N: N.0.0 (PGXN wants semantic versions; the extension's
// are the migrations' numbers).
func pgxnVersion(v int) string { return fmt.Sprintf("%d.0.0", v) }

func readMeta(t *testing.T) meta {
	t.Helper()
	b, err := os.ReadFile("META.json")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("META.json is not valid JSON: %v", err)
	}
	for _, key := range []string{"name", "abstract", "version", "maintainer", "license", "provides", "meta-spec"} {
		if _, ok := raw[key]; !ok {
			t.Errorf("META.json lacks %q, which PGXN's Meta Spec 1.0.0 requires", key)
		}
	}
	var m meta
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("META.json: %v", err)
	}
	return m
}

// TestMeta: META.json is valid PGXN metadata (Meta Spec 1.0.0) for the
// extension at its default version: provides.rl.version is
// default_version N as N.0.0, its file the install script of N.
func TestMeta(t *testing.T) {
	m := readMeta(t)
	if m.Name != extension.Name {
		t.Errorf("name %q, want %q", m.Name, extension.Name)
	}
	if m.MetaSpec.Version != "1.0.0" {
		t.Errorf("meta-spec.version %q, want 1.0.0", m.MetaSpec.Version)
	}
	if !semver.MatchString(m.Version) {
		t.Errorf("version %q is not a semantic version (major.minor.patch)", m.Version)
	}
	if m.License != "apache_2_0" {
		t.Errorf("license %q, want apache_2_0 (the repository's LICENSE)", m.License)
	}
	if m.Abstract == "" || len(m.Maintainer) == 0 || m.GeneratedBy == "" {
		t.Errorf("abstract %q, maintainer %q, generated_by %q: none may be empty", m.Abstract, m.Maintainer, m.GeneratedBy)
	}
	if m.ReleaseState != "stable" {
		t.Errorf("release_status %q: pgxn install takes stable releases only by default", m.ReleaseState)
	}
	if len(m.Provides) != 1 {
		t.Errorf("provides %d extensions, want %s alone", len(m.Provides), extension.Name)
	}
	p, ok := m.Provides[extension.Name]
	if !ok {
		t.Fatalf("provides has no %q", extension.Name)
	}
	if want := pgxnVersion(extension.Version); p.Version != want {
		t.Errorf("provides.%s.version %q, want %q (default_version %d, which go run ./sql/internal/sqlgen writes: set it in META.json)", extension.Name, p.Version, want, extension.Version)
	}
	if want := installName(extension.Version); p.File != want {
		t.Errorf("provides.%s.file %q, want %q", extension.Name, p.File, want)
	}
	if _, err := fs.Stat(extension.FS, p.File); err != nil {
		t.Errorf("provides.%s.file: %v", extension.Name, err)
	}
	if _, err := os.Stat(p.DocFile); err != nil {
		t.Errorf("provides.%s.docfile: %v", extension.Name, err)
	}
	control, err := fs.ReadFile(extension.FS, "rl.control")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("default_version = '%d'\n", extension.Version); !strings.Contains(string(control), want) {
		t.Errorf("rl.control lacks %q", want)
	}
	if got := m.Prereqs.Runtime.Requires["PostgreSQL"]; got != "15.0.0" {
		t.Errorf("prereqs.runtime.requires.PostgreSQL %v, want 15.0.0 (sql/README.md: PostgreSQL 15 or later)", got)
	}
	if _, ok := m.Prereqs.Runtime.Requires["plpgsql"]; !ok {
		t.Errorf("prereqs.runtime.requires lacks plpgsql (rl.control requires it)")
	}
	r := m.Resources
	if r.Homepage == "" || r.Bugtracker.Web == "" || r.Repository.URL == "" || r.Repository.Type != "git" {
		t.Errorf("resources incomplete: %+v", r)
	}
}

// TestRegressVersions: the update test runs from extension.Oldest to
// extension.Version, whatever they are now.
func TestRegressVersions(t *testing.T) {
	sql, err := os.ReadFile("test/sql/update.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("CREATE EXTENSION rl VERSION '%d';", extension.Oldest),
		fmt.Sprintf("WHERE source = '%d' AND target = '%d'", extension.Oldest, extension.Version),
	} {
		if !strings.Contains(string(sql), want) {
			t.Errorf("test/sql/update.sql lacks %q: update it (and test/expected/update.out) to the oldest and default versions", want)
		}
	}
	// rl.out shows the version CREATE EXTENSION rl installs: the default.
	out, err := os.ReadFile("test/expected/rl.out")
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile(`(?m)^ (\d+) +\| regress_rl_`).FindAllStringSubmatch(string(out), -1)
	if len(rows) == 0 {
		t.Fatal("test/expected/rl.out: no extversion row found")
	}
	for _, r := range rows {
		if r[1] != fmt.Sprint(extension.Version) {
			t.Errorf("test/expected/rl.out shows extversion %s after CREATE EXTENSION rl, want %d (the default version): update it", r[1], extension.Version)
		}
	}
}

// TestDist runs make dist and reads the archive: a zip whose one top
// directory, rl-VERSION (META.json's version), holds META.json, README.md,
// LICENSE, the Makefile with history.mk and prologue.sql, the regression
// tests, each as committed, and every file of extension.FS, the files make
// install installs and pg_tle.sql: rl.control as committed, and the scripts
// and pg_tle.sql, which make dist builds (they are not committed), as FS
// builds them. Unpacked, where there are no migrations or sql/src to build
// from, make takes the built files as they are.
func TestDist(t *testing.T) {
	m := readMeta(t)
	dir := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "dist", "PG_CONFIG="+pgConfig(t), "DISTDIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make dist: %v\n%s", err, out)
	}
	name := fmt.Sprintf("%s-%s", m.Name, m.Version)
	zr, err := zip.OpenReader(filepath.Join(dir, name+".zip"))
	if err != nil {
		t.Fatalf("make dist made no %s.zip (the name comes from META.json): %v\n%s", name, err, out)
	}
	defer zr.Close()

	got := map[string][]byte{}
	for _, f := range zr.File {
		rest, ok := strings.CutPrefix(f.Name, name+"/")
		if !ok {
			t.Errorf("%s is outside the top directory %s/", f.Name, name)
			continue
		}
		if rest == "" || strings.HasSuffix(rest, "/") {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		got[rest] = b
	}

	want := map[string]string{ // in the archive: the file it must equal
		"META.json": "META.json", "README.md": "README.md", "Makefile": "Makefile", "LICENSE": "../../LICENSE",
		"history.mk": "history.mk", "prologue.sql": "prologue.sql",
	}
	installed, err := fs.Glob(extension.FS, "*")
	if err != nil {
		t.Fatal(err)
	}
	fromFS := map[string]bool{}
	for _, n := range installed { // rl.control, rl--*.sql and pg_tle.sql
		want[n] = n
		fromFS[n] = true
	}
	for _, pattern := range []string{"test/sql/*.sql", "test/expected/*.out"} {
		tests, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range tests {
			want[n] = n
		}
	}
	for _, n := range sortedNames(want) {
		b, ok := got[n]
		if !ok {
			t.Errorf("%s.zip lacks %s", name, n)
			continue
		}
		var local []byte
		if fromFS[n] {
			local, err = fs.ReadFile(extension.FS, n)
		} else {
			local, err = os.ReadFile(want[n])
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, local) {
			t.Errorf("%s in %s.zip differs from %s: make dist packs the committed files (commit first) and builds the scripts as extension.FS does", n, name, want[n])
		}
	}
	var extra []string
	for n := range got {
		if _, ok := want[n]; !ok {
			extra = append(extra, n)
		}
	}
	slices.Sort(extra)
	if len(extra) > 0 {
		t.Errorf("%s.zip holds files it should not: %v", name, extra)
	}

	// Unpacked alone (no ../migrations), make builds nothing and changes
	// nothing: the distribution installs the files it carries.
	unpacked := filepath.Join(dir, name)
	for n, b := range got {
		p := filepath.Join(unpacked, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The prologue newer than the history: with the migrations, make would
	// build the history again.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(unpacked, "prologue.sql"), later, later); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command("make", "--no-print-directory", "-C", unpacked, "PG_CONFIG="+pgConfig(t))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make in the unpacked %s.zip: %v\n%s", name, err, out)
	}
	for n, b := range got {
		after, err := os.ReadFile(filepath.Join(unpacked, filepath.FromSlash(n)))
		if err != nil || !bytes.Equal(after, b) {
			t.Errorf("make in the unpacked %s.zip changed or removed %s (%v)", name, n, err)
		}
	}
}
