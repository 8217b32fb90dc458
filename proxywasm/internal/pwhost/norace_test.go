//go:build !race

package pwhost

const raceEnabled = false
