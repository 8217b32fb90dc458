package pipeline

import "github.com/rlcore/rl/core"

// Settling a cost known only at the response. A front end charges a
// request its estimate (its cost) when it arrives; once the response
// reports the actual cost (ParseResponseCost, the rule's
// response_cost_header), or a decision-API client reports it, the front
// end settles the difference that SettleDelta returns, and counts the
// settle by its SettleResult.

// SettleDelta is the one rule turning a request's estimate (the cost it
// was charged) and its actual cost into the correction to settle (a
// positive delta is a debt, a negative one a refund):
//
//   - actual is floored at minCost, the rule's min_cost: a request is never
//     free, whatever its response says, so a refund is at most
//     estimate − minCost;
//   - actual is clamped at core.MaxCost: a larger cost is charged as
//     MaxCost rather than refused, since a refused settle leaves the
//     estimate, which would make the largest costs the cheapest.
//
// estimate is a cost a check took, within [minCost, core.MaxCost] (1 ≤
// minCost), so the delta is within [−core.MaxCost, core.MaxCost], the
// range a settle accepts. Every front end that settles calls it: httplimit
// (and so rl-wasm-host's proxy), the decision API's settle, and the
// proxy-wasm filter.
func SettleDelta(estimate, actual, minCost int64) int64 {
	actual = min(max(actual, minCost), core.MaxCost)
	return actual - estimate
}

// SettleResult is what became of a settle, as every front end that
// settles counts it: rl-wasm-host's rl_settles_total{rule,result} and the
// filter's rl_filter.settles.<rule>.<result>, by its String.
type SettleResult uint8

// The settle results, in the order of SettleResults.
const (
	// Settled: the actual cost corrected the estimate (a cost equal to
	// it needs no store call).
	Settled SettleResult = iota
	// SettleInvalid: the response's cost field is not a cost; nothing is
	// settled and the estimate stands.
	SettleInvalid
	// SettleFailed: the store, or the service that settles for the
	// front end, failed or refused the settle; the estimate stands.
	SettleFailed

	// NumSettleResults is the number of settle results.
	NumSettleResults = 3
)

var settleResultNames = [NumSettleResults]string{"settled", "invalid", "failed"}

func (r SettleResult) String() string {
	if int(r) < len(settleResultNames) {
		return settleResultNames[r]
	}
	return "unknown"
}

// SettleResults lists every settle result, in order: the values of the
// metrics' result label.
func SettleResults() [NumSettleResults]SettleResult {
	return [NumSettleResults]SettleResult{Settled, SettleInvalid, SettleFailed}
}
