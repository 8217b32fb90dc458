//go:build unix

package main

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// checkOwner refuses a cache directory that another user owns: its owner
// could write code the service runs.
func checkOwner(dir string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := os.Getuid(); int(st.Uid) != uid {
		return fmt.Errorf("-wasm-cache-dir %q is owned by uid %d, not the service's (%d): its owner could write code the service runs: chown it, or use a directory of the service's own",
			dir, st.Uid, uid)
	}
	return nil
}
