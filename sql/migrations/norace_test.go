//go:build !race

package migrations_test

const raceEnabled = false
