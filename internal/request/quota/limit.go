package quota

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/rlcore/rl/core"
)

// Second is one second in the package's time unit, the microsecond.
const Second int64 = 1_000_000

// MaxTokens is the largest Limit.Fill and Limit.Burst: Envoy's token bucket
// carries max_tokens and tokens_per_fill as uint32.
const MaxTokens int64 = math.MaxUint32

// maxFillInterval is the longest FillInterval, about 12 days.
const maxFillInterval = 1 << 20 * Second

// Limit is one global limit: a sustained rate of Fill tokens per
// FillInterval, summed over every client, and a burst of Burst tokens, the
// most the clients together may hold at once.
type Limit struct {
	// Fill is the number of tokens the whole bucket regains per
	// FillInterval, in [1, MaxTokens].
	Fill int64
	// FillInterval is in µs, a whole number of seconds, at least one:
	// Envoy reads only the seconds of a fill_interval and turns one under a
	// second into a bucket that never empties. The refill is continuous
	// (Fill/FillInterval per second); the interval only sets how finely a
	// rate can be divided, one token per interval.
	FillInterval int64
	// Burst is the most tokens the clients together may hold, in
	// [1, MaxTokens].
	Burst int64
}

// Validate reports whether l can be divided and handed to Envoy.
func (l Limit) Validate() error {
	switch {
	case l.Fill < 1 || l.Fill > MaxTokens:
		return fmt.Errorf("quota: fill %d is outside [1, %d]: raise or lower the limit's rate", l.Fill, MaxTokens)
	case l.FillInterval < Second || l.FillInterval%Second != 0:
		return fmt.Errorf("quota: fill interval %dµs is not a whole number of seconds ≥ 1s (Envoy ignores fractions of a second)", l.FillInterval)
	case l.FillInterval > maxFillInterval:
		return fmt.Errorf("quota: fill interval %dµs is longer than %ds", l.FillInterval, maxFillInterval/Second)
	case l.Burst < 1 || l.Burst > MaxTokens:
		return fmt.Errorf("quota: burst %d is outside [1, %d]: change the limit's capacity", l.Burst, MaxTokens)
	}
	return nil
}

// PerSecond returns the sustained rate in tokens per second, for display.
func (l Limit) PerSecond() float64 {
	return float64(l.Fill) * float64(Second) / float64(l.FillInterval)
}

// FromCore expresses a limit of package core as a sustained rate and a
// burst. The conversion, per algorithm:
//
//   - FixedWindow, SlidingWindow, SlidingLog (Limit per Window): rate
//     Limit/Window, burst Limit. A fixed window itself admits up to
//     2×Limit within one Window across a boundary; the divided limit
//     admits at most Limit×W/Window + Limit in any interval W.
//   - TokenBucket, LeakyBucket, GCRA (capacity or burst Limit, Rate per
//     Window, Rate 0 meaning Limit): rate Rate/Window, burst Limit.
//
// The rate is written as Fill tokens per FillInterval: FillInterval is the
// Window rounded up to whole seconds when that is longer than a minute (at
// most about 12 days), else one minute (finer shares: one token per minute),
// shortened to a second if Fill would not fit a uint32. Fill is rounded down, so the divided limit is
// never looser than the original.
func FromCore(l core.Limit) (Limit, error) {
	if err := l.Validate(); err != nil {
		return Limit{}, err
	}
	rate := l.Rate
	if rate == 0 || l.Algorithm.Windowed() {
		rate = l.Limit
	}
	interval := min(max(60*Second, (l.Window+Second-1)/Second*Second), maxFillInterval)
	fill := mulDiv(rate, interval, l.Window)
	if fill > MaxTokens {
		interval = Second
		fill = mulDiv(rate, interval, l.Window)
	}
	out := Limit{Fill: fill, FillInterval: interval, Burst: l.Limit}
	if fill < 1 {
		return Limit{}, fmt.Errorf("quota: %d per %dµs is less than one token per %ds: Envoy cannot enforce it", rate, l.Window, interval/Second)
	}
	if err := out.Validate(); err != nil {
		return Limit{}, err
	}
	return out, nil
}

// mulDiv returns ⌊a×b/c⌋ for non-negative a, b and positive c, saturating
// at math.MaxInt64.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}
