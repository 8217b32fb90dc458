// Command sqlgen writes every file derived from the SQL source (sql/src):
// the migration of the open version and its down, the extension's control
// file, migrations.Latest, the snapshot of the previous version, and the
// algorithm table of core in SQL and C.
// Run it from anywhere in the repository after editing sql/src:
//
//	go run ./sql/internal/sqlgen
//
// Once a version is released (merged), open the next one before editing,
// naming its migration:
//
//	go run ./sql/internal/sqlgen -new shorter_locks
//
// sql/README.md ("Editing the SQL") explains the workflow.
//
// The extension's install script is built, not committed: make
// (sql/extension/history.mk) runs
//
//	go run ./sql/internal/sqlgen -install N
//
// which prints the install script of version N, the objects of sql/src
// (the Go package sql/extension builds the same file into its FS).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/rlcore/rl/sql/internal/sqlsrc"
)

func main() {
	newTitle := flag.String("new", "", "freeze the open version and open the next one, with this migration title (lower-case letters, digits, _)")
	install := flag.Int("install", 0, "print the extension's install script of this version (the objects of sql/src) instead of writing files")
	flag.Parse()
	var err error
	if *install > 0 {
		err = printInstall(*install)
	} else {
		err = run(*newTitle)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sqlgen:", err)
		os.Exit(1)
	}
}

func run(newTitle string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	files, err := sqlsrc.Generate(root, newTitle)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := filepath.Join(root, filepath.FromSlash(name))
		text := files[name]
		if text == nil {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			fmt.Println("removed", name)
			continue
		}
		if old, err := os.ReadFile(p); err == nil && string(old) == *text {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(*text), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", name)
	}
	return nil
}

// printInstall writes the extension's install script of version v to
// standard output.
func printInstall(v int) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	prologue, err := os.ReadFile(filepath.Join(root, sqlsrc.PrologueFile))
	if err != nil {
		return err
	}
	script, err := sqlsrc.InstallScript(os.DirFS(filepath.Join(root, sqlsrc.SrcDir)), string(prologue), v)
	if err != nil {
		return err
	}
	_, err = os.Stdout.WriteString(script)
	return err
}

// repoRoot is the directory holding go.mod, from the working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory: run it inside the repository")
		}
		dir = parent
	}
}
