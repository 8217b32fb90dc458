package quota

import (
	"fmt"
	"testing"
	"time"

	"github.com/rlcore/rl/core"
)

// parseCoreLimit reads "algorithm limit window rate".
func parseCoreLimit(t *testing.T, s string) core.Limit {
	t.Helper()
	var name, window string
	var l core.Limit
	if _, err := fmt.Sscan(s, &name, &l.Limit, &window, &l.Rate); err != nil {
		t.Fatal(err)
	}
	a, err := core.ParseAlgorithm(name)
	if err != nil {
		t.Fatal(err)
	}
	d, err := time.ParseDuration(window)
	if err != nil {
		t.Fatal(err)
	}
	l.Algorithm, l.Window = a, d.Microseconds()
	return l
}
