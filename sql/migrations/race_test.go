//go:build race

package migrations_test

// The race detector slows the Go side of the differential test (JSON and the
// core) about fivefold; it runs fewer sequences by default then.
const raceEnabled = true
