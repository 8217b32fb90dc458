// Package layers holds the module's layering to the rules the root
// package's doc.go draws ("# Layers") and ARCHITECTURE.md: core, deciders,
// stores, the limiter, the shared request packages, front ends, each built
// on the ones below it and never on one above; front ends import no other
// front end; and each folder of internal/ holds one layer. It reads every
// Go file of the module, whatever its build constraints (the WebAssembly
// guest builds only for wasip1), and checks each import against the rules,
// naming the file, the import and the rule it breaks.
package layers

import (
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// kind is what a package is to the rules.
type kind int

const (
	// layered packages are in one of the layers of doc.go.
	layered kind = iota
	// utility packages (a clock, redaction) are below every layer but
	// core: any package other than core may import them, and they import
	// nothing of the module.
	utility
	// testCode is the test kits and tests/...: imported only by _test.go
	// files and other test code.
	testCode
	// command packages (cmd/...) are front ends that nothing imports.
	command
)

// The layers of doc.go, bottom up.
const (
	layerCore = iota
	layerDeciders
	layerStores
	layerLimiter
	layerRequest
	layerFrontEnds
)

var layerNames = []string{"core", "deciders", "stores", "limiter", "request", "front ends"}

// class is where a package sits.
type class struct {
	kind  kind
	layer int // for layered and command packages
}

// String names the class in messages.
func (c class) String() string {
	switch c.kind {
	case utility:
		return "utility"
	case testCode:
		return "test code"
	case command:
		return "command"
	}
	return layerNames[c.layer]
}

// classes places every package of the module, by its path in the module
// ("" is the root package; "x/..." is x and everything under it). The
// first match wins, so the specific entries come first. A package that
// matches none fails the test: a new package must be given its place here.
var classes = []struct {
	pattern string
	class   class
}{
	// Test code: the test kits (the test-only PL/pgSQL decider among
	// them), the proxy-wasm test host, the conformance tables.
	{"internal/testkit/...", class{kind: testCode}},
	{"store/storetest", class{kind: testCode}},
	{"sql/plproxy/plproxytest", class{kind: testCode}},
	{"proxywasm/internal/pwhost", class{kind: testCode}},
	{"tests/...", class{kind: testCode}},

	{"cmd/...", class{kind: command, layer: layerFrontEnds}},
	// bench/startup times rl-wasm-host's start from outside: a command
	// that imports nothing of the module.
	{"bench/startup", class{kind: command, layer: layerFrontEnds}},
	// examples/...: programs a user copies; they import the public API as a
	// user's command would.
	{"examples/...", class{kind: command, layer: layerFrontEnds}},

	// Utilities: a clock, redaction.
	{"internal/util/...", class{kind: utility}},
	{"sql/internal/sqltext", class{kind: utility}},

	{"core", class{layer: layerCore}},
	// The core's dispatch generator: it writes core/dispatch_gen.go from
	// core.go's source, importing nothing of the module.
	{"core/internal/dispatchgen", class{kind: command, layer: layerCore}},

	// Deciders: the WebAssembly build and its host, the PL/pgSQL port
	// (the migrations, and the extension made from them).
	{"wasm/...", class{layer: layerDeciders}},
	{"sql/migrations", class{layer: layerDeciders}},
	{"sql/extension", class{layer: layerDeciders}},
	// The SQL source's generator: it writes the port's SQL and C from
	// sql/src and core's algorithm table.
	{"sql/internal/sqlsrc", class{layer: layerDeciders}},
	// sql/src embedded, from which sql/extension builds its install script.
	{"sql/src", class{layer: layerDeciders}},
	{"sql/internal/sqlgen", class{kind: command, layer: layerDeciders}},

	// Stores: the interface and its implementations, and the PL/Proxy
	// router that pgstore.Sharded follows.
	{"store", class{layer: layerStores}},
	{"memstore", class{layer: layerStores}},
	{"pgstore", class{layer: layerStores}},
	{"failover", class{layer: layerStores}},
	{"sql/plproxy", class{layer: layerStores}},

	// The limiter: the root package, the Go API, whose Limiter (a
	// compiled policy over a store) every front end decides with.
	{"", class{layer: layerLimiter}},

	// The shared request packages: the decision engine, the request
	// pipeline, the rule configuration, the failure rule, the net/http
	// flow the proxy and the middleware run, the division of a global
	// limit (quota), and the versions the front ends report (version: the
	// module's and those of the interfaces the deciders define, for the
	// commands' -version and the service's rl_build_info).
	{"internal/request/...", class{layer: layerRequest}},

	// Front ends: the middleware, rl-wasm-host's decision API and proxy,
	// the gRPC rate limit and quota services, the proxy-wasm filter.
	{"httplimit", class{layer: layerFrontEnds}},
	{"internal/frontend/...", class{layer: layerFrontEnds}},
	{"proxywasm", class{layer: layerFrontEnds}},
}

// folders are the folders of internal/ and the one class each holds: a
// package of internal/ lies in one of them, and has its class, so that
// nothing imports from a folder that also holds a higher layer.
var folders = []struct {
	folder string
	class  class
}{
	{"internal/util/", class{kind: utility}},
	{"internal/request/", class{layer: layerRequest}},
	{"internal/frontend/", class{layer: layerFrontEnds}},
	{"internal/testkit/", class{kind: testCode}},
}

// classOf returns the class of the package at rel, a path in the module.
func classOf(rel string) (class, bool) {
	for _, c := range classes {
		if base, ok := strings.CutSuffix(c.pattern, "/..."); ok {
			if rel == base || strings.HasPrefix(rel, base+"/") {
				return c.class, true
			}
		} else if rel == c.pattern {
			return c.class, true
		}
	}
	return class{}, false
}

// imp is one import of a module package by a file of the module.
type imp struct {
	pos      token.Position
	from, to string // paths in the module ("" is the root package)
	test     bool   // from a _test.go file
}

// rule is one rule of the layering: broken reports whether i breaks it.
type rule struct {
	name   string
	broken func(i imp, from, to class) bool
}

// rules are the layering, as doc.go ("# Layers") and ARCHITECTURE.md
// state it.
// _test.go files are tests, free to use every layer, and are held only to
// "cmd is imported by nothing".
var rules = []rule{
	{"core imports nothing of the module (it is pure: no clock, I/O or allocation)", func(i imp, from, to class) bool {
		return !i.test && from.kind == layered && from.layer == layerCore
	}},
	{"a layer builds on the layers below it: core < deciders < stores < front ends; none imports one above its own (doc.go, Layers)", func(i imp, from, to class) bool {
		return !i.test && (from.kind == layered || from.kind == command) && to.kind == layered && to.layer > from.layer
	}},
	{"a front end imports no other front end: what two share belongs to the request layer (internal/request/...)", func(i imp, from, to class) bool {
		return !i.test && from.kind == layered && from.layer == layerFrontEnds && to.kind == layered && to.layer == layerFrontEnds
	}},
	{"a utility package imports nothing of the module, so every layer but core may import it", func(i imp, from, to class) bool {
		return !i.test && from.kind == utility
	}},
	{"test code (internal/testkit/..., the other test kits, tests/...) is imported only by _test.go files and other test code", func(i imp, from, to class) bool {
		return !i.test && to.kind == testCode && from.kind != testCode
	}},
	{"nothing imports a command (cmd/...)", func(i imp, from, to class) bool {
		return to.kind == command
	}},
}

// module returns the main module's path and directory.
func module(t *testing.T) (modPath, dir string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-json").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	var m struct{ Path, Dir string }
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	return m.Path, m.Dir
}

// imports reads the imports of every Go file of the module at dir whose
// path is modPath, keeping those of the module's own packages. It also
// returns every package directory it found (paths in the module). It skips
// testdata, directories named with a leading "." or "_", and nested
// modules, as the go command does.
func imports(t *testing.T, modPath, dir string) ([]imp, map[string]bool) {
	t.Helper()
	var imps []imp
	pkgs := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != dir {
				if name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		relDir, err := filepath.Rel(dir, filepath.Dir(p))
		if err != nil {
			return err
		}
		from := filepath.ToSlash(relDir)
		if from == "." {
			from = ""
		}
		pkgs[from] = true
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, spec := range f.Imports {
			ip, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return err
			}
			var to string
			switch {
			case ip == modPath:
				to = ""
			case strings.HasPrefix(ip, modPath+"/"):
				to = ip[len(modPath)+1:]
			default:
				continue
			}
			pos := fset.Position(spec.Pos())
			if rel, err := filepath.Rel(dir, pos.Filename); err == nil {
				pos.Filename = filepath.ToSlash(rel)
			}
			imps = append(imps, imp{pos: pos, from: from, to: to, test: strings.HasSuffix(p, "_test.go")})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return imps, pkgs
}

// name is a package's name in messages: its path in the module.
func name(rel string) string {
	if rel == "" {
		return "the root package"
	}
	return rel
}

// TestLayers checks every import of a module package against the rules.
func TestLayers(t *testing.T) {
	modPath, dir := module(t)
	imps, pkgs := imports(t, modPath, dir)

	// The walk must see at least what the go command sees.
	out, err := exec.Command("go", "list", "-e", "-f", "{{.ImportPath}}", modPath+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, modPath), "/")
		if !pkgs[rel] {
			t.Errorf("go list lists %s, which the walk of %s missed", p, dir)
		}
	}

	for _, p := range slices.Sorted(maps.Keys(pkgs)) {
		c, ok := classOf(p)
		if !ok {
			t.Errorf("package %s has no place in the layers: add it to classes in tests/layers/layers_test.go (doc.go's Layers says where)", name(p))
			continue
		}
		if err := folderOf(p, c); err != "" {
			t.Errorf("package %s: %s", name(p), err)
		}
	}

	broken := 0
	for _, i := range imps {
		from, ok1 := classOf(i.from)
		to, ok2 := classOf(i.to)
		if !ok1 || !ok2 {
			continue // reported above
		}
		for _, r := range rules {
			if r.broken(i, from, to) {
				broken++
				t.Errorf("%s: %s (%s) imports %s (%s), which breaks the rule: %s",
					i.pos, name(i.from), from, name(i.to), to, r.name)
			}
		}
	}
	t.Logf("%d packages, %d imports of module packages checked against %d rules; %d broken", len(pkgs), len(imps), len(rules), broken)
}

// folderOf checks that rel, a package of class c, lies in a folder of its
// class; "" when it does (or is not under internal/).
func folderOf(rel string, c class) string {
	if !strings.HasPrefix(rel, "internal/") {
		return ""
	}
	for _, f := range folders {
		if strings.HasPrefix(rel, f.folder) {
			if f.class != c {
				return fmt.Sprintf("is %s, but lies in %s, the folder of %s: move it to its layer's folder", c, f.folder, f.class)
			}
			return ""
		}
	}
	var names []string
	for _, f := range folders {
		names = append(names, f.folder)
	}
	return "lies in no layer's folder of internal/: move it to one of " + strings.Join(names, ", ")
}

// TestFolderOf pins the folder rule: a package of internal/ outside the
// layers' folders, or in the folder of another layer, breaks it.
func TestFolderOf(t *testing.T) {
	for _, tc := range []struct {
		rel  string
		c    class
		fail bool
	}{
		{"internal/request/engine", class{layer: layerRequest}, false},
		{"internal/frontend/rls", class{layer: layerFrontEnds}, false},
		{"internal/testkit/sqldecider", class{kind: testCode}, false},
		{"internal/util/clock", class{kind: utility}, false},
		{"internal/engine", class{layer: layerRequest}, true},
		{"internal/request/service", class{layer: layerFrontEnds}, true},
		{"httplimit", class{layer: layerFrontEnds}, false},
	} {
		if got := folderOf(tc.rel, tc.c); (got != "") != tc.fail {
			t.Errorf("folderOf(%q, %v) = %q, want failure %v", tc.rel, tc.c, got, tc.fail)
		}
	}
}

// TestClassOf pins the patterns' matching: exact paths, "/..." subtrees,
// first match wins.
func TestClassOf(t *testing.T) {
	for _, tc := range []struct {
		rel  string
		want string
	}{
		{"", "limiter"},
		{"internal/request/engine", "request"},
		{"internal/frontend/service", "front ends"},
		{"internal/util/redact", "utility"},
		{"core", "core"},
		{"wasm/internal/abi", "deciders"},
		{"store", "stores"},
		{"store/storetest", "test code"},
		{"storex", ""},
		{"internal/testkit/pgtest", "test code"},
		{"cmd/rl-wasm-host", "command"},
		{"proxywasm/internal/pwhost", "test code"},
		{"proxywasm/other", ""},
	} {
		c, ok := classOf(tc.rel)
		got := ""
		if ok {
			got = c.String()
		}
		if got != tc.want {
			t.Errorf("classOf(%q) = %q, want %q", tc.rel, got, tc.want)
		}
	}
}
