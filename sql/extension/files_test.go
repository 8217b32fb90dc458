package extension_test

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rlcore/rl/sql/extension"
)

// TestFilesMatchMake: the scripts and pg_tle.sql that FS builds (from the
// migrations, and the install script of Version from sql/src) are the
// files make builds on a database host (history.mk), byte for byte, none
// left out; and FS holds every script from Oldest to Version.
func TestFilesMatchMake(t *testing.T) {
	files, err := extension.Files()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command("make", "-s", "-f", "history.mk", "OUT="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make -f history.mk: %v\n%s", err, out)
	}
	built, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if len(built) == 0 {
		t.Fatal("make built nothing")
	}
	for _, p := range built {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(p)
		if files[name] != string(b) {
			t.Errorf("%s: make builds another file than extension.FS\n%s", name, firstDifference(string(b), files[name]))
		}
	}
	for name := range files {
		if name != "rl.control" && !slices.Contains(built, filepath.Join(dir, name)) {
			t.Errorf("%s: in extension.FS, not built by make -f history.mk", name)
		}
	}
	want := []string{"rl.control", "pg_tle.sql", fmt.Sprintf("rl--%d.sql", extension.Oldest), fmt.Sprintf("rl--%d.sql", extension.Version)}
	for v := extension.Oldest + 1; v <= extension.Version; v++ {
		want = append(want, fmt.Sprintf("rl--%d--%d.sql", v-1, v))
	}
	for _, name := range want {
		if _, err := fs.Stat(extension.FS, name); err != nil {
			t.Errorf("extension.FS lacks %s", name)
		}
	}
	for name, text := range files {
		if strings.HasPrefix(name, "rl--") {
			if err := checkScript(name, strings.Replace(text, "\\echo Use \"CREATE EXTENSION rl\" to load this file. \\quit\n", "", 1)); err != nil {
				t.Error(err)
			}
		}
	}
}

// guard is the first statement of every script: psql stops there.
const guard = "\\echo Use \"CREATE EXTENSION rl\" to load this file. \\quit\n"

var (
	installScriptName = regexp.MustCompile(`^rl--([0-9]+)\.sql$`)
	updateScriptName  = regexp.MustCompile(`^rl--([0-9]+)--([0-9]+)\.sql$`)
)

// TestPrologue: every install and update script of FS, the install script
// built from sql/src and the scripts built from the migrations alike, runs
// prologue.sql first, right after the guard, with what it does written in;
// pg_tle.sql through the latest install script. With TestFilesMatchMake
// (make builds the scripts FS builds), the check lives in prologue.sql
// alone.
func TestPrologue(t *testing.T) {
	files, err := extension.Files()
	if err != nil {
		t.Fatal(err)
	}
	scripts := 0
	for _, name := range sortedNames(files) {
		text := files[name]
		if strings.Contains(text, "@ACTION@") {
			t.Errorf("%s: the placeholder @ACTION@ of prologue.sql is left in", name)
		}
		var action string
		if m := installScriptName.FindStringSubmatch(name); m != nil {
			action = "install the extension rl"
		} else if m := updateScriptName.FindStringSubmatch(name); m != nil {
			action = "update the extension rl to version " + m[2]
		} else {
			continue
		}
		scripts++
		_, after, ok := strings.Cut(text, guard)
		if !ok {
			t.Errorf("%s: no guard %q", name, guard)
			continue
		}
		if want := "\n" + extension.Prologue(action); !strings.HasPrefix(after, want) {
			t.Errorf("%s: does not run prologue.sql (%q) right after the guard\n%s", name, action, firstDifference(after, want))
		}
	}
	if want := 2 + extension.Version - extension.Oldest; scripts != want {
		t.Errorf("%d install and update scripts, want %d", scripts, want)
	}
	if !strings.Contains(files["pg_tle.sql"], extension.Prologue("install the extension rl")) {
		t.Errorf("pg_tle.sql lacks the prologue of an install")
	}
}

// TestCheckScript: the generator refuses text an extension script cannot
// run as the migrations do.
func TestCheckScript(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"plain", "CREATE TABLE rl.t ();\nDO $do$ BEGIN NULL; END $do$;\n", ""},
		{"commit", "CREATE TABLE rl.t ();\nCOMMIT;\n", "transaction control"},
		{"begin", "begin;\nCREATE TABLE rl.t ();\n", "transaction control"},
		{"extschema", "CREATE TABLE @extschema@.t ();\n", "@extschema"},
		{"extowner", "ALTER TABLE rl.t OWNER TO @extowner@;\n", "@extowner@"},
		{"psql", "\\set ON_ERROR_STOP\n", "psql meta-command"},
	} {
		err := checkScript("0099_x.up.sql", c.text)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error naming %q", c.name, err, c.want)
		}
	}
}

var (
	// transactionControl matches a statement that starts or ends a
	// transaction, alone on its line: extension scripts run inside
	// CREATE EXTENSION's transaction and refuse them. (END, a synonym of
	// COMMIT, is left out: PL/pgSQL blocks end with it. A procedure's
	// COMMIT inside a body would match; none exists, and the check would
	// then have to skip dollar-quoted bodies.)
	transactionControl = regexp.MustCompile(`(?im)^\s*(BEGIN|COMMIT|ROLLBACK|START\s+TRANSACTION|ABORT)(\s+(WORK|TRANSACTION))?\s*;\s*$`)
	// psqlCommand matches a psql meta-command: the extension machinery
	// drops \echo lines and runs the rest as SQL.
	psqlCommand = regexp.MustCompile(`(?m)^\s*\\`)
)

// checkScript fails on text that an extension script cannot run as the
// migrations run it: transaction control, psql meta-commands, and the
// placeholders the extension machinery replaces (@extschema@,
// @extschema:name@, @extowner@, MODULE_PATHNAME is replaced only when the
// control file sets module_pathname, which rl's does not). What it cannot
// see, the tests that install the extension do (the catalog must equal the
// migrations').
//
// Two things in the migrations run unchanged on purpose:
//   - SET LOCAL search_path = pg_catalog, pg_temp: CREATE EXTENSION runs
//     the script at a GUC nesting level of its own and restores
//     search_path after it (TestExtensionCatalog checks the session's
//     setting survives), so the line keeps its meaning: the same search
//     path as under rl-migrate, whatever the extension machinery set
//     (pg_catalog, pg_temp for the PGXS install, whose control file says
//     schema = pg_catalog; the current schema first under pg_tle).
//   - CREATE ROLE rl_app / rl_admin, in DO blocks that create each only if
//     missing: roles belong to the cluster and never become members of an
//     extension, so DROP EXTENSION rl leaves them, as rl-migrate down
//     leaves roles still in use.
func checkScript(file, text string) error {
	if m := transactionControl.FindString(text); m != "" {
		return fmt.Errorf("%s: transaction control (%q) cannot run in an extension script", file, strings.TrimSpace(m))
	}
	if psqlCommand.MatchString(text) {
		return fmt.Errorf("%s: a psql meta-command (a line starting with a backslash) cannot run in an extension script", file)
	}
	for _, p := range []string{"@extschema", "@extowner@"} {
		if strings.Contains(text, p) {
			return fmt.Errorf("%s: contains %s, which CREATE EXTENSION would replace", file, p)
		}
	}
	return nil
}

// firstDifference describes the first line where the texts a and b differ.
func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		line := func(ls []string) string {
			if i < len(ls) {
				return fmt.Sprintf("%q", ls[i])
			}
			return "(end of file)"
		}
		if i >= len(al) || i >= len(bl) || al[i] != bl[i] {
			return fmt.Sprintf("first difference at line %d:\n  make: %s\n  FS:   %s", i+1, line(al), line(bl))
		}
	}
	return "no difference"
}

func installName(v int) string { return fmt.Sprintf("%s--%d.sql", extension.Name, v) }

func sortedNames[V any](files map[string]V) []string {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
