//go:build !race

package quota

// raceEnabled: see race_on_test.go.
const raceEnabled = false
