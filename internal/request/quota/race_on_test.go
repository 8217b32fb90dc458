//go:build race

package quota

// raceEnabled reports a build with the race detector, which makes the
// simulator (single-threaded, deterministic) about 15 times slower: such a
// build simulates the smaller client counts only, and `make test` runs the
// whole matrix once more without the race detector.
const raceEnabled = true
