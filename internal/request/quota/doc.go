// Package quota divides one global rate limit among many deciders (Envoy
// instances, rl-wasm-host replicas) so that each decides locally, at memory
// speed, and together they never admit more than the limit allows.
//
// It is the pure layer below the RLQS server (internal/frontend/rlqs): no I/O, no
// goroutines, no wall clock. Every method takes the time as an argument, an
// int64 count of microseconds like package core, so the same code runs in
// the gRPC server and, deterministically, in the simulator of its tests.
//
// # Model
//
// A Bucket is one global limit, a sustained rate of Limit.Fill tokens per
// Limit.FillInterval and a burst of Limit.Burst tokens, shared by the
// clients that report usage for it. Each client enforces a Grant: a token
// bucket of Grant.Tokens tokens refilled continuously at Grant.Fill tokens per
// FillInterval, exactly as Envoy's rate_limit_quota filter enforces a
// token_bucket assignment. The bucket keeps, for every client, what that
// client may be enforcing at worst (its commitment), and keeps
//
//	Σ committed Fill ≤ Limit.Fill  and  Σ committed Tokens ≤ Limit.Burst
//
// at every instant. A grant that lowers a client (a cut) counts at its old
// value until a report from that client arrives at least Config.Guard after
// the cut was sent (Envoy never acknowledges; a report sent after it applied
// the cut is the only evidence) or until the old grant has expired; a grant
// that raises a client counts at its new value from the moment it is sent. So
// a raise is only ever paid for by capacity that is free or by cuts already
// in force. A cut that never reached its client (Bucket.Undelivered: the
// client's stream is full, broken or on another server) is acknowledged by
// no report until Step has sent it again.
//
// Shares follow reported demand (requests allowed plus denied, per second of
// server time between reports) by max-min fairness; capacity nobody demands
// is spread evenly as headroom, less a reserve kept free for clients that
// join. Grants change only when a client wants noticeably more than it has
// (Config.Hysteresis), so under steady demand nothing changes at all: every
// change hands the client a fresh, full token bucket, and that fresh burst is
// the only way the clients together can exceed what one ideal bucket would
// admit (see docs/rlqs.md for the bound and its conditions).
//
// # Time to live and departures
//
// Every grant is sent with Config.TTL and re-sent (extended) on every report,
// so a client that keeps reporting keeps its grant; one that stops (a dropped
// stream, a crashed process) is counted until the last grant sent to it has
// expired, plus Config.Guard, and is then forgotten. A client that reports
// no usage for Config.AbandonAfter is told to abandon the bucket.
//
// # Concurrency
//
// A Bucket is not safe for concurrent use: its store serialises access (one
// lock, or one row lock per bucket in PostgreSQL).
package quota
