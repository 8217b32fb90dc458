/*
 * The leaky bucket (core.LeakyBucket): the token bucket's level, read as a
 * queue.
 * Its functions have the names and signatures the generated dispatch
 * (rl_algorithms.h, which includes this file) calls: rl_<name>_<role>
 * (ARCHITECTURE.md, "A new algorithm"). A port of its PL/pgSQL file
 * (sql/src/functions/alg_leaky_bucket.sql).
 */
#include "rl_native.h"
#include "rl_levels.h"

static int
rl_leaky_bucket_state_error(const words *s, int logerr)
{
	return s->y != 0 ? 8 : 0;
}

static void
rl_leaky_bucket_step(int64 lim, int64 w, int64 rate, const words *s, bool exact, int64 now, int64 cost, bool take,
            		result *r, Datum *log)
{
	bucket(RL_LEAKY_BUCKET, lim, w, rate, s->alg, s->t, s->x, exact, now, cost, take, r);
}

static bool
rl_leaky_bucket_settle(int64 lim, int64 w, int64 rate, const words *s, bool exact, int64 now, int64 delta, bool caps,
            		  words *n)
{
	return settle_level(RL_LEAKY_BUCKET, lim, w, rate, s, exact, now, delta, caps, n);
}

/* rl._leaky_bucket_anchor, rl._leaky_bucket_usage: the level at the last update. */
static int64
rl_leaky_bucket_usage(const words *s, int64 s_w, int64 s_r, int64 *anchor)
{
	*anchor = s->t;
	return s->x;
}

/* rl._leaky_bucket_carry: the level at a. */
static void
rl_leaky_bucket_carry(int64 a, int64 used, int64 lim, int64 w, int64 rate, words *t)
{
	t->alg = RL_LEAKY_BUCKET;
	t->t = a;
	t->x = used;
}
