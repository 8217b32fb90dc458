package docs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlcore/rl/internal/frontend/rls"
	"github.com/rlcore/rl/internal/frontend/service"
	"github.com/rlcore/rl/internal/testkit/pgtest"
	"github.com/rlcore/rl/internal/util/codeblocks"

	// The Go fragments of the docs, compiled (codeblocks.Snippets): a
	// fragment that does not compile fails this package's build.
	_ "github.com/rlcore/rl/tests/docs/snippets"
)

// blockFiles are the Markdown files whose code blocks are checked: the
// README and the pages under docs/ (the reference pages are generated).
func blockFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	out := []string{"README.md"}
	for _, f := range files {
		rel, err := filepath.Rel(root, f)
		require.NoError(t, err)
		out = append(out, filepath.ToSlash(rel))
	}
	return out
}

func allBlocks(t *testing.T) []codeblocks.Block {
	t.Helper()
	var out []codeblocks.Block
	for _, f := range blockFiles(t) {
		bs, err := codeblocks.Parse(f, read(t, f))
		require.NoError(t, err)
		out = append(out, bs...)
	}
	return out
}

// notRun is a block's reason not to run, from the marker above it
// (<!-- not run: reason -->), or "".
func notRun(b codeblocks.Block) (string, bool) {
	r, ok := strings.CutPrefix(b.Marker, "not run:")
	return strings.TrimSpace(r), ok
}

// TestCodeBlocks checks every fenced block of README.md and docs/*.md by
// its language, and prints how many of each kind ran:
//
//   - go: a whole program is a file of examples/ byte for byte; an import
//     block names packages that exist; statements compile in package
//     tests/docs/snippets (generated from them, and imported here);
//   - yaml, json: an Envoy or Istio configuration is marked as an example
//     file's copy or fragment, which tests/examples decodes with
//     go-control-plane's types; a rate limit service configuration loads
//     with rls.ParseDomain; anything else is rl-wasm-host's configuration,
//     loaded by service.ParseConfig;
//   - sql: run in page order, one database per page, migrated; a
//     statement followed by "-- ERROR:  message" must fail with it;
//   - sh, and the "$ " lines of a block without a language: every command
//     names a binary this repository builds or a known tool, with flags the
//     command has (docs/reference), paths of the tree that exist, and a
//     configuration written with a heredoc that loads;
//   - a block without a language is shown output or a diagram.
//
// A block that cannot run is marked <!-- not run: reason --> on the line
// above it; the test lists them.
func TestCodeBlocks(t *testing.T) {
	blocks := allBlocks(t)
	count := map[string]int{}
	var skipped []string
	sqlByFile := map[string][]codeblocks.Block{}
	for _, b := range blocks {
		if reason, ok := notRun(b); ok {
			require.NotEmpty(t, reason, "%s: a not-run marker needs its reason", b.Where())
			skipped = append(skipped, fmt.Sprintf("%s [%s]: %s", b.Where(), b.Lang, reason))
			count["not run"]++
			continue
		}
		switch b.Lang {
		case "go":
			count["go "+checkGo(t, b)]++
		case "yaml", "json":
			count[b.Lang+" "+checkConfig(t, b)]++
		case "sql":
			sqlByFile[b.File] = append(sqlByFile[b.File], b)
		case "sh", "console":
			count[b.Lang]++
			checkShell(t, b, b.Lang == "console")
		case "":
			checkShell(t, b, true)
			if ran := runTranscript(t, b); ran {
				count["text: a transcript of rl's commands, run and compared"]++
			} else {
				count["text (output or a diagram)"]++
			}
		default:
			t.Errorf("%s: a block in %q, which this test does not check: use go, yaml, json, sql, sh or none (output), or mark it <!-- not run: reason -->", b.Where(), b.Lang)
		}
	}
	files := make([]string, 0, len(sqlByFile))
	for f := range sqlByFile {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		t.Run("sql "+f, func(t *testing.T) { runSQL(t, sqlByFile[f]) })
		count["sql (run, one database per page)"] += len(sqlByFile[f])
	}
	var kinds []string
	for k := range count {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		t.Logf("%3d %s", count[k], k)
	}
	t.Logf("%3d blocks in all; not run:", len(blocks))
	for _, s := range skipped {
		t.Logf("    %s", s)
	}
}

// checkGo checks a Go block and says what it is.
func checkGo(t *testing.T, b codeblocks.Block) string {
	t.Helper()
	switch kind := codeblocks.GoKind(b.Text); kind {
	case codeblocks.GoProgram:
		var match string
		err := filepath.WalkDir(filepath.Join(root, "examples"), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") {
				if c, err := os.ReadFile(p); err == nil && string(c) == b.Text {
					match = p
				}
			}
			return err
		})
		assert.NoError(t, err)
		if match == "" {
			t.Errorf("%s: a Go program that is no file of examples/ byte for byte: put it there (its tests run it) and show it as it is", b.Where())
		}
		return "program (a file of examples/)"
	case codeblocks.GoImports:
		f, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+b.Text, parser.ImportsOnly)
		assert.NoError(t, err, b.Where())
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if rel, ok := strings.CutPrefix(path, "github.com/rlcore/rl"); ok {
				_, err = os.Stat(filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(rel, "/")), "doc.go"))
				if err != nil {
					_, err = build.Default.ImportDir(filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(rel, "/"))), 0)
				}
			} else {
				_, err = build.Default.Import(path, "", build.FindOnly)
			}
			assert.NoError(t, err, "%s: imports %s, which does not exist", b.Where(), path)
		}
		return "imports"
	default:
		return "fragment (compiled in tests/docs/snippets)"
	}
}

// TestSnippetsCurrent: tests/docs/snippets/zz_generated.go holds the Go
// fragments the docs show now.
func TestSnippetsCurrent(t *testing.T) {
	want, err := codeblocks.Snippets("snippets", allBlocks(t))
	assert.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(root, "tests/docs/snippets/zz_generated.go"))
	assert.NoError(t, err)
	assert.Equal(t, string(want), string(got), "tests/docs/snippets/zz_generated.go is stale: run go run ./tests/docs/docgen")
}

var exampleMarker = regexp.MustCompile(`^(the file|a fragment of) examples/[a-z0-9/._-]+\.yaml$`)

// checkConfig checks a YAML or JSON block and says what it is.
func checkConfig(t *testing.T, b codeblocks.Block) string {
	t.Helper()
	switch {
	case strings.Contains(b.Text, "static_resources:") || strings.Contains(b.Text, "type.googleapis.com/envoy.") || strings.Contains(b.Text, ".istio.io/"):
		if !exampleMarker.MatchString(b.Marker) {
			t.Errorf("%s: an Envoy or Istio configuration without <!-- the file examples/....yaml --> or <!-- a fragment of examples/....yaml -->: tests/examples checks only those", b.Where())
		}
		return "Envoy/Istio (go-control-plane, in tests/examples)"
	case strings.HasPrefix(b.Text, "domain:"):
		_, err := rls.ParseDomain(b.Where(), []byte(b.Text))
		assert.NoError(t, err, "%s: a rate limit service configuration that does not load", b.Where())
		return "rate limit service (rls.ParseDomain)"
	default:
		_, err := service.ParseConfig(b.Where(), b.Lang, []byte(b.Text))
		assert.NoError(t, err, "%s: an rl-wasm-host configuration that does not load", b.Where())
		return "rl-wasm-host configuration (service.ParseConfig)"
	}
}

// runSQL runs a page's SQL blocks in order on a database of their own.
func runSQL(t *testing.T, blocks []codeblocks.Block) {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewMigrated(t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, b := range blocks {
		if setup, ok := strings.CutPrefix(b.Marker, "run after:"); ok {
			_, err := conn.Exec(ctx, setup)
			require.NoError(t, err, "%s: the setup of its marker", b.Where())
		}
		for _, st := range statements(b.Text) {
			var args []any
			for i := 1; strings.Contains(st.sql, "$"+strconv.Itoa(i)); i++ {
				args = append(args, "203.0.113.7")
			}
			_, err := conn.Exec(ctx, st.sql, args...)
			if st.wantErr == "" {
				require.NoError(t, err, "%s, the statement of line %d:\n%s", b.Where(), b.Line+st.line, st.sql)
				continue
			}
			var pe *pgconn.PgError
			require.True(t, errors.As(err, &pe), "%s, line %d: want the error the block shows (%s), got %v", b.Where(), b.Line+st.line, st.wantErr, err)
			require.Equal(t, st.wantErr, pe.Message, "%s, line %d: the error the block shows", b.Where(), b.Line+st.line)
		}
	}
}

type statement struct {
	sql     string
	line    int    // of its first line, from the block's first line (1)
	wantErr string // the message of a "-- ERROR:" comment after it
}

// statements splits a block into statements, each ending with a line
// ending in ";" (a comment after it removed); "-- ERROR:  message" on the
// comment lines after a statement is the error it must raise.
func statements(text string) []statement {
	var out []statement
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(text, "\n") {
		code := stripSQLComment(line)
		if strings.TrimSpace(code) == "" {
			if msg, ok := strings.CutPrefix(strings.TrimSpace(line), "-- ERROR:"); ok && len(out) > 0 && cur.Len() == 0 {
				out[len(out)-1].wantErr = strings.TrimSpace(msg)
			}
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		cur.WriteString(code + "\n")
		if strings.HasSuffix(strings.TrimSpace(code), ";") {
			out = append(out, statement{sql: cur.String(), line: start})
			cur.Reset()
		}
	}
	if strings.TrimSpace(cur.String()) != "" {
		out = append(out, statement{sql: cur.String(), line: start})
	}
	return out
}

// stripSQLComment removes a "--" comment outside quotes from a line.
func stripSQLComment(line string) string {
	quote := false
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\'':
			quote = !quote
		case !quote && strings.HasPrefix(line[i:], "--"):
			return line[:i]
		}
	}
	return line
}

func TestStatements(t *testing.T) {
	got := statements("SELECT 1;  -- one\n-- a comment\nSELECT '--x',\n  2;\n-- ERROR:  boom\n")
	require.Equal(t, []statement{{sql: "SELECT 1;  \n", line: 1}, {sql: "SELECT '--x',\n  2;\n", line: 3, wantErr: "boom"}}, got)
}

// tools are the commands the docs may name that this repository does not
// build: they are not run here, only named.
var tools = []string{"curl", "psql", "python3", "docker", "kubectl", "pgxn", "seq", "xargs", "echo", "cat", "sleep",
	"export", "printf", "sha256sum", "cut", "openssl", "kill", "envoy", "sudo", "systemctl"}

// shellWords are the shell's own words that may start a command.
var shellWords = []string{"until", "while", "do", "done", "then", "if", "fi", "else"}

// checkShell checks the command lines of a block: every line of a sh
// block, the "$ " lines of a console or output block.
func checkShell(t *testing.T, b codeblocks.Block, prompted bool) {
	t.Helper()
	lines := strings.Split(b.Text, "\n")
	created := map[string]bool{}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if prompted {
			l, ok := strings.CutPrefix(line, "$ ")
			if !ok {
				continue
			}
			line = l
		}
		for (strings.HasSuffix(line, "\\") || openQuote(line)) && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, "\\") + " " + lines[i]
		}
		line = stripShellComment(line)
		if m := heredoc.FindStringSubmatch(line); m != nil {
			var body strings.Builder
			for i++; i < len(lines) && lines[i] != m[2]; i++ {
				body.WriteString(lines[i] + "\n")
			}
			created[m[1]] = true
			if ext := filepath.Ext(m[1]); ext == ".yaml" || ext == ".json" {
				_, err := service.ParseConfig(m[1], strings.TrimPrefix(ext, "."), []byte(body.String()))
				assert.NoError(t, err, "%s: the file %s it writes does not load", b.Where(), m[1])
			}
			line = heredoc.ReplaceAllString(line, "")
		}
		for _, cmd := range splitCommands(line) {
			checkCommand(t, b.Where(), cmd, created)
		}
	}
}

// openQuote reports whether a line leaves a quote open (the command goes
// on on the next line).
func openQuote(line string) bool {
	quote := byte(0)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || line[i-1] == ' '):
			return false
		}
	}
	return quote != 0
}

var heredoc = regexp.MustCompile(`cat > (\S+) <<'?(\w+)'?`)

func stripShellComment(line string) string {
	quote := byte(0)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || line[i-1] == ' '):
			return line[:i]
		}
	}
	return line
}

// splitCommands splits a command line at ;, &, && , || and | outside
// quotes, into each command's words (quotes removed).
func splitCommands(line string) [][]string {
	var cmds [][]string
	var words []string
	var word strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	end := func() {
		flush()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				j = len(line) - i - 1
			}
			word.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == ' ' || c == '\t':
			flush()
		case c == ';' || c == '&' || c == '|':
			end()
		case c == '>' || c == '<':
			flush()
			for i+1 < len(line) && (line[i+1] == '>' || line[i+1] == '&') {
				i++
			}
			// the redirection's target
			for i+1 < len(line) && line[i+1] == ' ' {
				i++
			}
			for i+1 < len(line) && line[i+1] != ' ' {
				i++
			}
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	end()
	return cmds
}

var assignment = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)

// checkCommand checks one command's words.
func checkCommand(t *testing.T, where string, words []string, created map[string]bool) {
	t.Helper()
	for len(words) > 0 && (assignment.MatchString(words[0]) || slices.Contains(shellWords, words[0])) {
		words = words[1:]
	}
	if len(words) == 0 {
		return
	}
	name, args := words[0], words[1:]
	switch {
	case name == "go":
		checkGoCommand(t, where, args, created)
	case name == "rl-wasm-host" || name == "rl-migrate":
		checkFlags(t, where, name, args)
	case name == "make":
		if len(args) >= 3 && args[0] == "-C" {
			mk := read(t, args[1]+"/Makefile")
			pgxs := strings.Contains(mk, "include $(PGXS)") && slices.Contains([]string{"install", "installcheck"}, args[2])
			if !pgxs {
				assert.Regexp(t, "(?m)^"+regexp.QuoteMeta(args[2])+":", mk, "%s: make -C %s %s: no such target", where, args[1], args[2])
			}
		}
	case strings.Contains(name, "/"):
		fi, err := os.Stat(filepath.Join(root, name))
		assert.NoError(t, err, "%s: runs %s, which is not in the tree", where, name)
		assert.NotZero(t, fi.Mode()&0o111, "%s: %s is not executable", where, name)
	default:
		assert.Contains(t, tools, name, "%s: %q is no command this repository builds nor a tool the docs may name (tests/docs tools)", where, name)
	}
	for _, a := range args {
		checkPath(t, where, a, created)
	}
}

// checkPath fails on an argument naming a path of the tree that is not
// there.
func checkPath(t *testing.T, where, arg string, created map[string]bool) {
	t.Helper()
	p := strings.TrimPrefix(arg, "$PWD/")
	p, _, _ = strings.Cut(p, ":")
	p = strings.TrimPrefix(p, "./")
	for _, dir := range []string{"cmd/", "examples/", "deploy/", "sql/", "proxywasm/", "docs/", "internal/", "bench/", "tests/"} {
		if strings.HasPrefix(p, dir) && !created[p] {
			_, err := os.Stat(filepath.Join(root, strings.TrimSuffix(p, "/...")))
			assert.NoError(t, err, "%s: names %s, which is not in the tree", where, arg)
		}
	}
}

// checkGoCommand checks go run, go install and go test lines.
func checkGoCommand(t *testing.T, where string, args []string, created map[string]bool) {
	t.Helper()
	assert.NotEmpty(t, args, where)
	switch args[0] {
	case "run":
		assert.GreaterOrEqual(t, len(args), 2, where)
		pkg := strings.TrimPrefix(args[1], "./")
		_, err := os.Stat(filepath.Join(root, pkg))
		assert.NoError(t, err, "%s: go run %s: no such package", where, args[1])
		if name, ok := strings.CutPrefix(pkg, "cmd/"); ok {
			checkFlags(t, where, name, args[2:])
		}
	case "install":
		for _, a := range args[1:] {
			p, _, _ := strings.Cut(a, "@")
			rel, ok := strings.CutPrefix(p, "github.com/rlcore/rl/")
			assert.True(t, ok, "%s: go install %s: not this module", where, a)
			_, err := os.Stat(filepath.Join(root, rel))
			assert.NoError(t, err, "%s: go install %s: no such command", where, a)
		}
	case "test", "generate", "build", "vet":
	default:
		t.Errorf("%s: go %s: a go command the docs do not use", where, args[0])
	}
}

var flagRow = regexp.MustCompile("(?m)^\\| `-([A-Za-z0-9-]+)")

// checkFlags fails on a flag command name does not have, by its
// reference page (generated from its FlagSet).
func checkFlags(t *testing.T, where, name string, args []string) {
	t.Helper()
	page := read(t, "docs/reference/"+name+".md")
	flags := map[string]bool{"h": true, "help": true}
	for _, m := range flagRow.FindAllStringSubmatch(page, -1) {
		flags[m[1]] = true
	}
	for _, a := range args {
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue
		}
		f, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		assert.True(t, flags[f], "%s: %s has no flag -%s (docs/reference/%s.md)", where, name, f, name)
	}
}

// ours are the commands a transcript may run here: they need no server.
var ours = []string{"rl-wasm-host", "rl-migrate"}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds rl-wasm-host and rl-migrate once, into a directory it
// returns.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "rl-docs-bin")
		if buildErr != nil {
			return
		}
		for _, c := range ours {
			build := exec.Command("go", "build", "-o", filepath.Join(binDir, c), "./cmd/"+c)
			build.Dir = root
			out, err := build.CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build ./cmd/%s: %v\n%s", c, err, out)
				return
			}
		}
	})
	require.NoError(t, buildErr)
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// runTranscript runs a block of "$ " command lines and their output when
// every command is one of ours (or echo $?, the last exit status), in the
// repository's root, and compares each command's output with the lines
// shown ("..." alone on a line stands for any lines). It reports whether
// the block is such a transcript.
func runTranscript(t *testing.T, b codeblocks.Block) bool {
	t.Helper()
	type step struct {
		cmd  []string
		want []string
	}
	var steps []step
	for _, line := range strings.Split(strings.TrimSuffix(b.Text, "\n"), "\n") {
		if c, ok := strings.CutPrefix(line, "$ "); ok {
			cmds := splitCommands(c)
			if len(cmds) != 1 || !slices.Contains(ours, cmds[0][0]) && strings.Join(cmds[0], " ") != "echo $?" {
				return false
			}
			steps = append(steps, step{cmd: cmds[0]})
			continue
		}
		if len(steps) == 0 {
			return false
		}
		steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
	}
	if len(steps) == 0 {
		return false
	}
	status := 0
	for _, s := range steps {
		var got string
		if s.cmd[0] == "echo" {
			got = strconv.Itoa(status) + "\n"
		} else {
			cmd := exec.Command(filepath.Join(binaries(t), s.cmd[0]), s.cmd[1:]...)
			cmd.Dir = root
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			status = 0
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				status = ee.ExitCode()
			} else {
				require.NoError(t, err, "%s: %s", b.Where(), strings.Join(s.cmd, " "))
			}
			got = out.String()
		}
		assert.True(t, matchLines(s.want, strings.Split(strings.TrimSuffix(got, "\n"), "\n")),
			"%s: $ %s printed\n%s\nnot what the block shows:\n%s", b.Where(), strings.Join(s.cmd, " "), got, strings.Join(s.want, "\n"))
	}
	return true
}

// matchLines reports whether got is want, a line "..." (any indentation)
// in want standing for any lines.
func matchLines(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if strings.TrimSpace(want[0]) == "..." {
		for i := 0; i <= len(got); i++ {
			if matchLines(want[1:], got[i:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && got[0] == want[0] && matchLines(want[1:], got[1:])
}

func TestMatchLines(t *testing.T) {
	require.True(t, matchLines([]string{"a", "  ...", "d"}, []string{"a", "b", "c", "d"}))
	require.True(t, matchLines([]string{"a", "...", "b"}, []string{"a", "b"}))
	require.False(t, matchLines([]string{"a", "...", "e"}, []string{"a", "b", "c", "d"}))
	require.False(t, matchLines([]string{"a"}, []string{"a", "b"}))
}

var inlineCommand = regexp.MustCompile("`((?:rl-wasm-host|rl-migrate|go run|go test) [^`]*)`")

// TestInlineCommands: a command line of rl-wasm-host, rl-migrate, go run
// or go test shown in a code span of the prose names flags the command
// has and paths of the tree that exist, as checkShell holds the blocks'
// lines.
func TestInlineCommands(t *testing.T) {
	n := 0
	for _, f := range blockFiles(t) {
		prose := fenced.ReplaceAllString(read(t, f), "")
		for _, m := range inlineCommand.FindAllStringSubmatch(prose, -1) {
			for _, cmd := range splitCommands(strings.ReplaceAll(m[1], "\n", " ")) {
				checkCommand(t, f+": `"+m[1]+"`", cmd, map[string]bool{})
				n++
			}
		}
	}
	t.Logf("%d command lines in code spans checked", n)
	require.Greater(t, n, 10)
}
