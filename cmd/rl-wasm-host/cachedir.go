package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// checkCacheDir checks -wasm-cache-dir before anything is served ("" is
// no cache: nothing to check). The directory holds machine code that the
// process maps executable and runs: whoever can write there runs code in
// the service. So it must be a directory (created, mode 0700, when
// missing) that the service's user owns, that neither its group nor
// others can write, and that the service can write (wazero fails a
// compilation whose cache entry it cannot store). Each refusal names the
// directory, what is wrong and what to do.
func checkCacheDir(dir string) error {
	if dir == "" {
		return nil
	}
	fix := "fix it, or leave -wasm-cache-dir unset (the native core decides while the module compiles, so the cache only saves CPU at start)"
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("-wasm-cache-dir %q: cannot create it: %w: %s", dir, err, fix)
		}
		fi, err = os.Stat(dir)
	}
	if err != nil {
		return fmt.Errorf("-wasm-cache-dir %q: %w: %s", dir, err, fix)
	}
	if !fi.IsDir() {
		return fmt.Errorf("-wasm-cache-dir %q is not a directory: %s", dir, fix)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("-wasm-cache-dir %q has mode %v: its group or others could write code the service runs: chmod go-w it (0700 is enough), or %s",
			dir, perm, fix)
	}
	if err := checkOwner(dir, fi); err != nil {
		return err
	}
	probe, err := os.CreateTemp(dir, ".rl-wasm-host-probe-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("-wasm-cache-dir %q is not writable by the service (%v): %s", dir, err, fix)
	}
	probe.Close()
	os.Remove(probe.Name())
	return nil
}
