package version

import (
	"bytes"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResolve(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "3f5c0e4a9d1b7c2e8f6a5b4c3d2e1f0a9b8c7d6e"
	cases := []struct {
		name   string
		linked string
		bi     *debug.BuildInfo
		module string
		commit string
		dirty  bool
		goVer  string
	}{
		{"go install @v0.1.0 from the module proxy: no commit", "",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/rlcore/rl", Version: "v0.1.0"}},
			"v0.1.0", Unknown, false, "go1.26.8"},
		{"the installed version wins over -ldflags -X", "v9.9.9",
			&debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}},
			"v0.1.0", Unknown, false, Unknown},
		{"go build in a tagged checkout with changes", "",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0+dirty"}, Settings: vcs(rev, "true")},
			"v0.1.0+dirty", rev, true, "go1.26.8"},
		{"go build past a tag: a pseudo-version", "",
			&debug.BuildInfo{Main: debug.Module{Version: "v0.1.1-0.20261129080000-3f5c0e4a9d1b"}, Settings: vcs(rev, "false")},
			"v0.1.1-0.20261129080000-3f5c0e4a9d1b", rev, false, Unknown},
		{"no version recorded: -ldflags -X", "v0.2.0",
			&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "false")},
			"v0.2.0", rev, false, Unknown},
		{"no version anywhere: devel", "",
			&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			Devel, Unknown, false, Unknown},
		{"no build information, -ldflags -X", "v0.2.0", nil, "v0.2.0", Unknown, false, Unknown},
		{"no build information at all", "", nil, Devel, Unknown, false, Unknown},
		{"vcs.modified without a revision is not reported", "",
			&debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}},
			Devel, Unknown, false, Unknown},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.linked, tc.bi)
			require.Equal(t, tc.module, got.Module)
			require.Equal(t, tc.commit, got.Commit)
			require.Equal(t, tc.dirty, got.Modified)
			require.Equal(t, tc.goVer, got.Go)
		})
	}
}

// The three interface versions are read from the files that define them,
// not from the constants Get uses: the newest migration file, rl.control's
// default_version, and ABI.md's abi_version.
func TestInterfaceVersions(t *testing.T) {
	info := Get()

	ups, err := filepath.Glob("../../../sql/migrations/*.up.sql")
	require.NoError(t, err)
	require.NotEmpty(t, ups)
	newest := 0
	for _, f := range ups {
		n, err := strconv.Atoi(strings.SplitN(filepath.Base(f), "_", 2)[0])
		require.NoError(t, err, f)
		newest = max(newest, n)
	}
	require.Equal(t, newest, info.Schema, "schema: the newest migration in sql/migrations")

	control, err := os.ReadFile("../../../sql/extension/rl.control")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^default_version = '([^']+)'$`).FindSubmatch(control)
	require.NotNil(t, m, "rl.control has no default_version")
	require.Equal(t, string(m[1]), info.Extension, "extension: rl.control's default_version")

	abi, err := os.ReadFile("../../../wasm/ABI.md")
	require.NoError(t, err)
	m = regexp.MustCompile("\\| `abi_version` \\| `\\(\\) -> i32` \\| the ABI version: `(\\d+)` \\|").FindSubmatch(abi)
	require.NotNil(t, m, "ABI.md's export table has no abi_version row")
	require.Equal(t, string(m[1]), strconv.Itoa(info.ABI), "wasm-abi: ABI.md's abi_version")
}

func TestWrite(t *testing.T) {
	i := Info{Module: "v0.1.0", Commit: "3f5c0e4a9d1b7c2e8f6a5b4c3d2e1f0a9b8c7d6e", Modified: true, Go: "go1.26.8", Schema: 19, Extension: "19", ABI: 2}
	var b bytes.Buffer
	require.NoError(t, i.Write(&b, "rl-migrate"))
	require.Equal(t, `rl-migrate v0.1.0
commit: 3f5c0e4a9d1b7c2e8f6a5b4c3d2e1f0a9b8c7d6e
modified: true
go: go1.26.8
schema: 19
extension: 19
wasm-abi: 2
`, b.String())
	require.Equal(t, "v0.1.0 (commit 3f5c0e4a9d1b, modified)", i.String())

	b.Reset()
	none := Info{Module: Devel, Commit: Unknown, Go: Unknown, Schema: 19, Extension: "19", ABI: 2}
	require.NoError(t, none.Write(&b, "rl-wasm-host"))
	require.Equal(t, "rl-wasm-host devel\ncommit: unknown\nmodified: unknown\ngo: unknown\nschema: 19\nextension: 19\nwasm-abi: 2\n", b.String())
	require.Equal(t, "devel", none.String())
}

// Every line Write writes is documented in the package documentation,
// which the commands' -version help points to.
func TestLinesDocumented(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "version.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	doc := f.Doc.Text()
	var b bytes.Buffer
	require.NoError(t, Get().Write(&b, "cmd"))
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	require.Len(t, lines, 7)
	for _, l := range lines[1:] {
		name, _, ok := strings.Cut(l, ": ")
		require.True(t, ok, "line %q is not name: value", l)
		require.Contains(t, doc, "  - "+name+": ", "the package documentation does not describe %q", name)
		require.Contains(t, doc, "\t"+name+": ", "the package documentation's example lacks %q", name)
	}
}
