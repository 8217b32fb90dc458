package core_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rlcore/rl/core"
)

// TestAlgorithmSwitchesExhaustive: a new algorithm needs no new case in
// handwritten code. Every switch in the module that has a case naming an
// algorithm (FixedWindow, core.GCRA, ...) is in a generated file (the
// core's dispatch, dispatch_gen.go) and names every algorithm of
// core.Algorithms() in its cases, so that no algorithm falls silently into
// a default; handwritten code reaches an algorithm's own code through that
// dispatch, the table's properties (Windowed, UnitsBounded) or a
// per-algorithm entry of its own (difftest's oracles, the vector
// generator's files). And no code compares algorithms by order (alg >=
// core.TokenBucket), which the table's properties say instead.
func TestAlgorithmSwitchesExhaustive(t *testing.T) {
	names := algorithmConstants(t)
	if len(names) != len(core.Algorithms()) {
		t.Fatalf("core/core.go declares %d Algorithm constants %v, core.Algorithms() has %d", len(names), names, len(core.Algorithms()))
	}
	// inCore: the file being walked is package core, where the
	// constants are named bare; elsewhere only core.X names one (another
	// package may have a TokenBucket of its own).
	inCore := false
	algName := func(e ast.Expr) string {
		switch x := e.(type) {
		case *ast.Ident:
			if inCore && slices.Contains(names, x.Name) {
				return x.Name
			}
		case *ast.SelectorExpr:
			if id, ok := x.X.(*ast.Ident); ok && id.Name == "core" && slices.Contains(names, x.Sel.Name) {
				return x.Sel.Name
			}
		}
		return ""
	}
	fset := token.NewFileSet()
	switches := 0
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		inCore = f.Name.Name == "core"
		generated := ast.IsGenerated(f)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SwitchStmt:
				var covered []string
				for _, c := range n.Body.List {
					for _, e := range c.(*ast.CaseClause).List {
						if name := algName(e); name != "" {
							covered = append(covered, name)
						}
					}
				}
				if len(covered) == 0 {
					return true
				}
				if !generated {
					t.Errorf("%s: a handwritten switch over the algorithms (cases %v): a new algorithm would need a case here; "+
						"put the per-algorithm part with the algorithm (its type in core, its oracle in difftest, its vector file)", fset.Position(n.Pos()), covered)
					return true
				}
				switches++
				var missing []string
				for _, name := range names {
					if !slices.Contains(covered, name) {
						missing = append(missing, name)
					}
				}
				if len(missing) > 0 {
					t.Errorf("%s: a generated switch over the algorithms has no case for %v: stale, regenerate it (go generate ./core)", fset.Position(n.Pos()), missing)
				}
			case *ast.BinaryExpr:
				switch n.Op {
				case token.LSS, token.GTR, token.LEQ, token.GEQ:
					if algName(n.X) != "" || algName(n.Y) != "" {
						t.Errorf("%s: algorithms compared by order: use a property of the table (Windowed, UnitsBounded, Valid)", fset.Position(n.Pos()))
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if switches < 5 {
		t.Errorf("found %d generated switches over the algorithms; the walk missed the module's files", switches)
	}
}

// algorithmConstants returns the names of the constants of type Algorithm
// that core/core.go declares.
func algorithmConstants(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "core.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); ok && id.Name == "Algorithm" {
				for _, n := range v.Names {
					names = append(names, n.Name)
				}
			}
		}
	}
	return names
}
