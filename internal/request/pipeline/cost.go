package pipeline

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/rlcore/rl/core"
)

// CostError is a cost header that is not one decimal integer in [Min,
// core.MaxCost]; front ends answer 400.
type CostError struct {
	// Value is what was sent, clipped (values given twice joined by
	// ", ").
	Value string
	Min   int64
}

func (e *CostError) Error() string {
	return fmt.Sprintf("cost %s is not an integer between %d and %d", quote(e.Value), e.Min, core.MaxCost)
}

// CheckCost is the one rule for a cost's range, whatever carried it: an
// integer in [min, core.MaxCost], else a *CostError. ParseCost applies it
// to a cost header; the gRPC service to a descriptor's hits_addend (which
// it answers OVER_LIMIT when refused: a gRPC error would be Envoy's
// failure_mode_deny, admitted by default).
func CheckCost(n, min int64) error {
	if n < min || n > core.MaxCost {
		return &CostError{Value: strconv.FormatInt(n, 10), Min: min}
	}
	return nil
}

// ParseCost returns a request's cost from the values of its cost header:
// def when there is none, else the one value, which must be 1 to 19 ASCII
// digits (no sign, space, fraction or exponent) making an integer that
// CheckCost accepts. Every spelling of zero ("0", "00", "-0", "+0",
// " 0 ") is refused alike while min is at least 1, which ruleconfig
// guarantees: a request is never free.
func ParseCost(values []string, def, min int64) (int64, error) {
	if len(values) == 0 {
		return def, nil
	}
	return parseCost(values, min)
}

// ParseResponseCost returns the actual cost of a request as its upstream
// reported it, from the values of the rule's response_cost_header (the
// response's header fields and trailers of that name together): ok is
// false when there is none, and the estimate taken stands. Otherwise the
// one value must be a run of ASCII digits, else a *ResponseCostError: a
// value given twice (as a header and as a trailer too), empty, signed or
// fractional settles nothing. A cost of 0 is a cost (nothing was used),
// and a run of digits too large for an int64 is math.MaxInt64: however
// large, it is a cost, which SettleDelta clamps to core.MaxCost (and floors
// at the rule's min_cost) to give the correction to settle.
func ParseResponseCost(values []string) (actual int64, ok bool, err error) {
	if len(values) == 0 {
		return 0, false, nil
	}
	if len(values) != 1 {
		return 0, false, &ResponseCostError{Value: clip(strings.Join(values, ", "))}
	}
	v := values[0]
	if v == "" {
		return 0, false, &ResponseCostError{Value: v}
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false, &ResponseCostError{Value: clip(v)}
		}
		if actual > (math.MaxInt64-int64(c-'0'))/10 {
			actual = math.MaxInt64 // saturated; the rest must still be digits
			continue
		}
		actual = actual*10 + int64(c-'0')
	}
	return actual, true, nil
}

// ResponseCostError is a response's cost field that is not one run of
// decimal digits; nothing is settled.
type ResponseCostError struct {
	// Value is what was sent, clipped (values given twice joined by
	// ", ").
	Value string
}

func (e *ResponseCostError) Error() string {
	return fmt.Sprintf("response cost %s is not one non-negative decimal integer", quote(e.Value))
}

// parseCost is the one value of values, 1 to 19 ASCII digits making an
// integer that CheckCost accepts with min, else a *CostError.
func parseCost(values []string, min int64) (int64, error) {
	if len(values) != 1 {
		return 0, &CostError{Value: clip(strings.Join(values, ", ")), Min: min}
	}
	v := values[0]
	if v == "" || len(v) > 19 {
		return 0, &CostError{Value: clip(v), Min: min}
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, &CostError{Value: clip(v), Min: min}
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || CheckCost(n, min) != nil {
		return 0, &CostError{Value: clip(v), Min: min}
	}
	return n, nil
}

func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}
