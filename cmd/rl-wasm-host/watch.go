package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/rlcore/rl/internal/frontend/rls"
)

// configWatcher is -watch-config: it polls the configuration files'
// content and asks for a reload, as SIGHUP does, when it changed. It reads
// through symbolic links at every poll, so a Kubernetes ConfigMap's update
// (its ..data link swapped to a new directory) is seen like an edit; it
// compares contents (SHA-256), not modification times, which a swap or a
// restored backup need not change.
type configWatcher struct {
	// paths are -config's file and -rls-config's file or directory (whose
	// files are those rls.ConfigFiles lists), or "".
	paths []string
	log   *slog.Logger
	// last is the digest of the files as last read; lastErr the last
	// failure to read them, logged once until it changes.
	last    [sha256.Size]byte
	lastErr string
}

// newConfigWatcher reads the files' digest as they are now: the contents
// Run is about to load, the reference for the first change.
func newConfigWatcher(log *slog.Logger, paths ...string) *configWatcher {
	w := &configWatcher{paths: paths, log: log}
	w.last, _ = w.digest() // unreadable now: Run's load reports it
	return w
}

// digest hashes the watched files' names and contents.
func (w *configWatcher) digest() ([sha256.Size]byte, error) {
	h := sha256.New()
	for _, p := range w.paths {
		if p == "" {
			continue
		}
		files := []string{p}
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			if files, err = rls.ConfigFiles(p); err != nil {
				return [sha256.Size]byte{}, err
			}
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return [sha256.Size]byte{}, err
			}
			// Length-prefixed, so that no two lists of files hash alike.
			fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
			h.Write(b)
		}
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d, nil
}

// poll reads the files once and reports whether they changed since the
// last poll that read them. A file that cannot be read (removed, or
// renamed in the middle of an update) is no change: it is logged, once,
// and the next poll reads again.
func (w *configWatcher) poll() bool {
	d, err := w.digest()
	if err != nil {
		if msg := err.Error(); msg != w.lastErr {
			w.lastErr = msg
			w.log.Warn("-watch-config: cannot read the configuration; keeping the rules in force and reading again at the next poll", "err", err)
		}
		return false
	}
	w.lastErr = ""
	if d == w.last {
		return false
	}
	w.last = d
	return true
}

// run polls at each tick until ctx is done, sending SIGHUP's value on
// reload when the files changed. A reload already waiting is enough: it
// reads the files as they are when it runs.
func (w *configWatcher) run(ctx context.Context, tick <-chan time.Time, reload chan<- os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			if !w.poll() {
				continue
			}
			w.log.Info("-watch-config: the configuration changed; reloading", "files", w.paths)
			select {
			case reload <- syscall.SIGHUP:
			default:
			}
		}
	}
}
