// Package docs holds the hand-written user documentation to its rules: the
// README an index of at most 250 lines, all of it together at most 35,000
// words, no internal issue numbers or machine paths, migration numbers
// only in upgrade notes, every relative link and anchor resolving, and the
// README's Go quick start the program examples/quickstart runs, byte for
// byte, with the output its Example test checks. Generated reference pages
// (docs/reference/) are not hand-written and do not count. Every code block
// of README.md and docs/*.md is checked by its language (TestCodeBlocks).
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

const root = "../.."

// fixedDocs are the user docs outside docs/: the README, the benchmarks,
// the security policy, and the READMEs of the directories a user works in.
var fixedDocs = []string{
	"README.md",
	"BENCHMARKS.md",
	"SECURITY.md",
	"cmd/rl-wasm-host/README.md",
	"proxywasm/README.md",
	"sql/README.md",
	"sql/extension/README.md",
	"sql/native/README.md",
	"wasm/README.md",
	"wasm/ABI.md",
	"deploy/README.md",
	"bench/peers/README.md",
	"bench/pgpeers/README.md",
	"bench/service/README.md",
}

const (
	maxWords       = 35000
	maxReadmeLines = 250
)

// userDocs returns the hand-written user docs: fixedDocs and every
// Markdown file under docs/ but docs/reference/, relative to root.
func userDocs(t *testing.T) []string {
	t.Helper()
	files := append([]string(nil), fixedDocs...)
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() && rel == "docs/reference" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(rel, ".md") {
			files = append(files, rel)
		}
		return nil
	})
	require.NoError(t, err)
	sort.Strings(files)
	return files
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	require.NoError(t, err, "%s: a user doc this test lists", rel)
	return string(b)
}

// TestBudget: the README is at most 250 lines and the user docs together
// at most 35,000 words, counted as wc -w counts them.
func TestBudget(t *testing.T) {
	readme := read(t, "README.md")
	lines := strings.Count(readme, "\n")
	require.LessOrEqual(t, lines, maxReadmeLines, "README.md has %d lines: it is an index, keep it to %d and move the rest to docs/", lines, maxReadmeLines)
	total := 0
	for _, f := range userDocs(t) {
		n := len(strings.Fields(read(t, f)))
		t.Logf("%6d %s", n, f)
		total += n
	}
	t.Logf("%6d words in all", total)
	require.LessOrEqual(t, total, maxWords, "the user docs hold %d words, more than %d: cut, or link to generated reference pages", total, maxWords)
}

var (
	issueRef     = regexp.MustCompile(`(?i)\bissues? #?\d+\b|(?:^|[\s(\[])#\d+\b`)
	machinePath  = regexp.MustCompile(`(?:^|[\s(\x60'"=])(/work/|/home/|/Users/|/root/)`)
	migrationRef = regexp.MustCompile(`(?i)\bmigrations? \d+\b`)
	heading      = regexp.MustCompile(`^(#{1,6}) +(.*?) *#*$`)
)

// TestNoInternalReferences: user docs name no issue numbers ("issue 12",
// "#12") and no paths of a machine (/work/..., /home/...); migration
// numbers appear only under a heading of upgrade notes.
func TestNoInternalReferences(t *testing.T) {
	for _, f := range userDocs(t) {
		upgrade := false
		level := 0
		for i, line := range strings.Split(read(t, f), "\n") {
			if m := heading.FindStringSubmatch(line); m != nil {
				if upgrade && len(m[1]) <= level {
					upgrade = false
				}
				if strings.Contains(strings.ToLower(m[2]), "upgrad") {
					upgrade, level = true, len(m[1])
				}
			}
			if m := issueRef.FindString(line); m != "" {
				t.Errorf("%s:%d: %q names an issue: say what it changed instead", f, i+1, strings.TrimSpace(m))
			}
			if m := machinePath.FindStringSubmatch(line); m != nil {
				t.Errorf("%s:%d: %q is a path of one machine", f, i+1, m[1])
			}
			if m := migrationRef.FindString(line); m != "" && !upgrade {
				t.Errorf("%s:%d: %q: migration numbers belong in upgrade notes (a heading with \"Upgrade\")", f, i+1, m)
			}
		}
	}
}

func TestIssueAndPathPatterns(t *testing.T) {
	for _, c := range []struct {
		line        string
		issue, path bool
	}{
		{"fixed in issue 12", true, false},
		{"see issues 3 and 4", true, false},
		{"as #12 says", true, false},
		{"(#12)", true, false},
		{"[link](#per-key-overrides)", false, false},
		{"envoyproxy/ratelimit#1060", false, false},
		{"an `issue` of the day", false, false},
		{"ran `/work/shared/bin/quiet`", false, true},
		{"cd /home/me/rl", false, true},
		{"OUT=/tmp/peers", false, false},
		{"a/work/b", false, false},
	} {
		require.Equal(t, c.issue, issueRef.MatchString(c.line), c.line)
		require.Equal(t, c.path, machinePath.MatchString(c.line), c.line)
	}
}

var (
	fenced = regexp.MustCompile("(?ms)^ *```.*?^ *```")
	link   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
)

// slugs returns the anchors GitHub makes of a Markdown file's headings.
func slugs(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(fenced.ReplaceAllString(text, ""), "\n") {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[2]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		s := b.String()
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func TestSlugs(t *testing.T) {
	s := slugs("# rl in PostgreSQL\n## The extension: `CREATE EXTENSION rl`\n## Per-key overrides\n## A global limit divided (RLQS)\n## Tests\n### Tests\n```\n# not a heading\n```\n")
	for _, want := range []string{"rl-in-postgresql", "the-extension-create-extension-rl", "per-key-overrides", "a-global-limit-divided-rlqs", "tests", "tests-1"} {
		require.True(t, s[want], want)
	}
	require.False(t, s["not-a-heading"])
}

// TestLinks: every relative link of a user doc names a file of the tree,
// and every anchor a heading of the Markdown file it points into.
func TestLinks(t *testing.T) {
	for _, f := range userDocs(t) {
		text := read(t, f)
		for _, m := range link.FindAllStringSubmatch(fenced.ReplaceAllString(text, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			rel := f
			if path != "" {
				rel = filepath.ToSlash(filepath.Join(filepath.Dir(f), path))
				if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
					t.Errorf("%s: link %q: no file %s", f, target, rel)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(rel, ".md") {
				continue
			}
			if !slugs(read(t, rel))[anchor] {
				t.Errorf("%s: link %q: %s has no heading with the anchor #%s", f, target, rel, anchor)
			}
		}
	}
}

// TestGoQuickStart: the README's Go quick start is examples/quickstart's
// program byte for byte, and the output it shows is the one that
// program's Example test checks.
func TestGoQuickStart(t *testing.T) {
	readme := read(t, "README.md")
	_, section, ok := strings.Cut(readme, "\n## Go library\n")
	require.True(t, ok, "README.md has no section \"Go library\"")
	section, _, _ = strings.Cut(section, "\n## ")
	block := func(lang string) string {
		_, after, ok := strings.Cut(section, "```"+lang+"\n")
		require.True(t, ok, "README.md's Go quick start has no %q block", lang)
		b, _, ok := strings.Cut(after, "```\n")
		require.True(t, ok)
		return b
	}
	require.Equal(t, read(t, "examples/quickstart/main.go"), block("go"), "README.md's Go quick start differs from examples/quickstart/main.go")

	_, out, ok := strings.Cut(read(t, "examples/quickstart/main_test.go"), "// Output:\n")
	require.True(t, ok)
	var want strings.Builder
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "//") {
			break
		}
		want.WriteString(strings.TrimSpace(strings.TrimPrefix(l, "//")) + "\n")
	}
	_, after, ok := strings.Cut(section, "It prints:\n\n```\n")
	require.True(t, ok, "README.md's Go quick start shows no output")
	shown, _, _ := strings.Cut(after, "```\n")
	require.Equal(t, want.String(), shown, "the output README.md shows is not the one examples/quickstart's Example checks")
}
