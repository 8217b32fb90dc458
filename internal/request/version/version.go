// Package version says which build of rl a command is: the module version,
// the commit it was built from, and the versions of the interfaces it
// speaks (the database schema, the extension, the WebAssembly ABI). Both
// commands print it with -version, one "name: value" line each:
//
//	rl-wasm-host v0.1.0
//	commit: 3f5c0e4a9d1b7c2e8f6a5b4c3d2e1f0a9b8c7d6e
//	modified: false
//	go: go1.26.8
//	schema: 19
//	extension: 19
//	wasm-abi: 2
//
// The first line is the command and the module version: the version the
// module was installed at ("go install github.com/rlcore/rl/cmd/rl-migrate@v0.1.0"),
// or the one go build stamps from the checkout's tag (a pseudo-version such
// as v0.1.1-0.20261129080000-3f5c0e4a9d1b when the commit is past a tag,
// "+dirty" with uncommitted changes); else the one given at link time
// (-ldflags "-X github.com/rlcore/rl/internal/request/version.version=v0.1.0", for a
// build outside a checkout); else "devel".
//
//   - commit: the commit the binary was built from (vcs.revision), "unknown"
//     when it was not built in a git checkout (go install from the module
//     proxy records none).
//   - modified: whether that checkout had uncommitted changes (vcs.modified),
//     "unknown" with no commit.
//   - go: the Go toolchain that built it.
//   - schema: the newest migration of sql/migrations, the schema version
//     "rl-migrate up" migrates a database to and the version its decisions
//     expect (compare "rl-migrate version").
//   - extension: the default_version of the extension rl built from the same
//     migrations (sql/extension): what CREATE EXTENSION rl installs and ALTER
//     EXTENSION rl UPDATE updates to, with this build's make -C sql/extension
//     install.
//   - wasm-abi: the abi_version of the WebAssembly module's interface
//     (wasm/ABI.md): the embedded module answers it and the host refuses a
//     module answering another.
package version

import (
	"fmt"
	"io"
	"runtime/debug"
	"strconv"

	"github.com/rlcore/rl/sql/extension"
	"github.com/rlcore/rl/sql/migrations"
	"github.com/rlcore/rl/wasm"
)

// version is the module version given at link time, for a build that has
// no other: go build -ldflags "-X github.com/rlcore/rl/internal/request/version.version=v0.1.0".
var version = ""

// Devel is the module version of a build that has none: built in a
// directory without version control and without -ldflags -X.
const Devel = "devel"

// Unknown is the commit (and modified) of a build made outside a git
// checkout.
const Unknown = "unknown"

// Info is what a build is. The zero value is no build: use Get.
type Info struct {
	// Module is the module version: "v0.1.0", a pseudo-version, or Devel.
	Module string
	// Commit is the git commit the binary was built from, or Unknown.
	Commit string
	// Modified reports uncommitted changes in that checkout; false when
	// Commit is Unknown.
	Modified bool
	// Go is the Go version that built the binary ("go1.26.8"), or Unknown.
	Go string
	// Schema is the newest database migration (migrations.Latest).
	Schema int
	// Extension is the extension rl's default version (extension.Version),
	// as rl.control's default_version writes it ("19").
	Extension string
	// ABI is the WebAssembly module's abi_version (wasm.ABIVersion).
	ABI int
}

// Get returns this binary's Info.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return resolve(version, bi)
}

// resolve is Get for a link-time version and the build's information (nil
// when the binary has none).
func resolve(linked string, bi *debug.BuildInfo) Info {
	info := Info{
		Module:    Devel,
		Commit:    Unknown,
		Go:        Unknown,
		Schema:    migrations.Latest,
		Extension: fmt.Sprint(extension.Version),
		ABI:       wasm.ABIVersion,
	}
	if linked != "" {
		info.Module = linked
	}
	if bi == nil {
		return info
	}
	// go install m@v and go build in a tagged checkout record the version;
	// go build elsewhere (and go test, go run) record "(devel)".
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		info.Module = v
	}
	if bi.GoVersion != "" {
		info.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if s.Value != "" {
				info.Commit = s.Value
			}
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	if info.Commit == Unknown {
		info.Modified = false
	}
	return info
}

// String is the build in one line, for logs: "v0.1.0 (commit 3f5c0e4a9d1b)",
// "devel (commit 3f5c0e4a9d1b, modified)", or "v0.1.0" with no commit.
func (i Info) String() string {
	if i.Commit == Unknown || i.Commit == "" {
		return i.Module
	}
	c := i.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	if i.Modified {
		return i.Module + " (commit " + c + ", modified)"
	}
	return i.Module + " (commit " + c + ")"
}

// Write writes the -version output of the command named command to w: the
// command and the module version, then one "name: value" line each for the
// commit, modified, go, schema, extension and wasm-abi (the package
// documentation says what each is).
func (i Info) Write(w io.Writer, command string) error {
	modified := strconv.FormatBool(i.Modified)
	if i.Commit == Unknown || i.Commit == "" {
		modified = Unknown
	}
	_, err := fmt.Fprintf(w, "%s %s\ncommit: %s\nmodified: %s\ngo: %s\nschema: %d\nextension: %s\nwasm-abi: %d\n",
		command, i.Module, orUnknown(i.Commit), modified, orUnknown(i.Go), i.Schema, i.Extension, i.ABI)
	return err
}

func orUnknown(s string) string {
	if s == "" {
		return Unknown
	}
	return s
}
