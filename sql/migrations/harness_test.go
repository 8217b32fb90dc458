package migrations_test

import (
	"regexp"
	"slices"
	"strconv"

	"github.com/rlcore/rl/tests/vectors"
)

// Helpers of the table-function runner (table_test.go). The pure functions
// are run by vectorstest and difftest through internal/testkit/sqldecider.

var indexDetail = regexp.MustCompile(`^limit index (\d+)`)

// errorIndex returns the limit index an RL0NN error names in its DETAIL, 0
// when it names none (single-limit calls).
func errorIndex(detail string) int {
	m := indexDetail.FindStringSubmatch(detail)
	if m == nil {
		return 0
	}
	i, _ := strconv.Atoi(m[1])
	return i
}

// stateEqual compares states, the parameters that wrote them included; a
// nil log equals an empty one.
func stateEqual(a, b vectors.State) bool {
	return a.Algorithm == b.Algorithm && a.T == b.T && a.X == b.X && a.Y == b.Y && a.L == b.L && a.W == b.W &&
		a.R == b.R && slices.Equal(a.Log, b.Log)
}
