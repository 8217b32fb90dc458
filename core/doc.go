// Package core is the one rate-limiting decision function of this project:
// pure, integer-only and allocation-free, so that the native Go build, the
// WebAssembly module and the PL/pgSQL port decide bit for bit the same.
//
// A decision is a function of (limit parameters, stored state, now, cost) that
// returns a Decision and the new State:
//
//	d, next, err := core.Take(lim, state, now, cost)
//
// The package never reads a clock, performs no I/O, keeps no globals and uses
// no floating point. Storage is somebody else's job: a store locks a key,
// reads its State, calls Take and writes the State back.
//
// # Units
//
// Time is an int64 count of microseconds since the Unix epoch (the resolution
// of PostgreSQL's timestamptz), in [0, MaxTime]. Durations in Limit and
// Decision are microseconds too. Costs and limits are plain integer units
// (requests, tokens, bytes: whatever the caller counts).
//
// # Algorithms
//
//   - FixedWindow: at most Limit units per Window, windows aligned to the
//     epoch (a one-minute window starts on the minute).
//   - SlidingWindow: the sliding window counter; the previous window's count
//     is weighted by the part of it still inside the sliding window. It is
//     an approximation: it assumes the previous window's units were spread
//     evenly, so within some sliding interval of one Window it can admit up
//     to 2×Limit−1 units (a burst at the end of one window, then the
//     weighted room of the next; random traffic measured 1.72 to 1.85×
//     Limit at worst), and a client denied after a full window may wait up
//     to two Windows. SlidingLog is exact (never more than Limit in any
//     interval of one Window) at the cost of one stored entry per unit.
//   - SlidingLog: the exact times of admitted units within the last Window,
//     stored in caller-provided storage of at most MaxLogLimit entries.
//   - TokenBucket: capacity Limit, refilled by Rate tokens per Window.
//   - LeakyBucket: capacity Limit, leaking Rate units per Window; an admitted
//     request also reports the Delay after which it leaves the bucket, so a
//     caller can shape (wait) instead of only police.
//   - GCRA: burst Limit at Rate per Window, kept as one theoretical arrival
//     time.
//
// All arithmetic is exact: fractional tokens are carried as integer numerators
// (see State), never rounded away, so "Rate per Window" is exact for any rate.
//
// # Results and errors
//
// Denial is a result (Decision.Allowed == false), not an error. Errors mean
// the input was invalid: bad parameters, a time outside the range, a corrupt
// state. The decisions return values of type Error, matched with errors.Is
// (or ==), and allocate nothing. Validate and Compile return a *LimitError
// for an invalid limit, which names the parameter, its value, the range
// allowed and the algorithm in the words the SQL functions and the
// configuration checker use ("limit 0: outside [1, 1099511627776] for
// fixed_window"), and matches the same Error with errors.Is; a CallError
// does the same for a time or a cost, for a caller that knows the call (rl's
// Limiter builds one). No input makes the package panic.
//
// # Carrying usage when a limit changes
//
// A limit's parameters (Limit, Window, Rate) or algorithm may change
// between two decisions on one key: a configuration reload, a premium
// tier, an operator raising a limit. The change takes effect at the next
// decision, and what carries over is the units the key has used, never a
// fraction of a window stretched or shrunk:
//
//   - Every state records the parameters that wrote it (State.L, W, R). A
//     state read under exactly those is read as it is.
//   - A fixed or sliding window, or a sliding log, read by the same
//     algorithm under other parameters keeps its counts (a log its
//     entries) in the new window that holds its start; counts above a
//     lowered limit count as the limit.
//   - Any other change converts the state at its own time, its anchor (a
//     bucket's last update, GCRA's last admission, a window's start, a
//     log's newest entry): between TokenBucket, LeakyBucket and GCRA the
//     level is rescaled to the new Window exactly, rounded up; otherwise
//     the units used are counted whole (a fraction counts as one) and
//     placed at the anchor by the new algorithm. The usage carried is
//     clamped to the new limit.
//
// So (a) when the usage carried is below the new limit, what is left is
// admitted at once (a raised GCRA rate is not ignored until the old
// arrival time passes); (b) counting the usage carried, the new limit is
// never exceeded (lowering a limit never lets more through); (c) a
// RetryAfter is exact and never longer than the new limit alone could
// give. Because the conversion depends only on the state and the new
// limit, not on when the next call comes, a RetryAfter given after a
// change holds until the state is written again. A legacy state (L, W, R
// zero, written before they were kept) is read as before: under other
// parameters of its algorithm it is clamped to what the new ones allow,
// and a legacy state of another algorithm is read as fresh.
//
// # Settling a cost known only later
//
// Settle (SettleAll, Compiled.SettleInto) corrects the units a key has
// used by a delta at now: the real cost of a call (an LLM's tokens, the
// bytes of a response) against the estimate taken when it arrived. A
// positive delta is charged even beyond the limit, putting the key in
// debt: later calls are denied until the debt is paid off as the
// algorithm restores units (a bucket or GCRA drains it at its rate; a
// window releases it when it ends or slides out; a sliding log holds at
// most Limit entries, so its debt is bounded by one full window; a debt
// larger than a state can record is capped there, never refused). A
// negative delta refunds, the newest units first, never below nothing
// used. A state in debt is read exactly under the parameters that wrote
// it; under other parameters its usage is clamped like any other.
//
// # Clocks that step backwards
//
// A now earlier than the state's own times never refunds: the state is read
// as of its latest time (the window it was written in, its last update, its
// newest log entry), and durations in the Decision are measured from the now
// the caller passed, so a Retry-After is never early on the caller's clock.
package core
