/*
 * The fixed window (core.FixedWindow): a count per window of the grid.
 * Its functions have the names and signatures the generated dispatch
 * (rl_algorithms.h, which includes this file) calls: rl_<name>_<role>
 * (ARCHITECTURE.md, "A new algorithm"). A port of its PL/pgSQL file
 * (sql/src/functions/alg_fixed_window.sql).
 */
#include "rl_native.h"

static int
rl_fixed_window_state_error(const words *s, int logerr)
{
	return s->y != 0 ? 8 : 0;
}

/* rl._fixed_window_step */
static void
rl_fixed_window_step(int64 lim, int64 w, int64 rate, const words *s, bool exact, int64 now, int64 cost, bool take,
					 result *r, Datum *log)
{
	int64		start = now - now % w;
	int64		cnt = 0;
	int64		e;

	if (s->alg == RL_FIXED_WINDOW && s->t >= start)
	{
		start = s->t - s->t % w;
		cnt = s->x;
	}
	e = start + w;
	if (cost == 0 || cnt + cost <= lim)
	{
		r->allowed = true;
		if (cost > 0)
		{
			cnt += cost;
			if (take)
			{
				r->algorithm = RL_FIXED_WINDOW;
				r->t = start;
				r->x = cnt;
				r->y = 0;
				r->l = lim;
				r->w = w;
				r->r = 0;
			}
		}
	}
	else if (cost > lim)
		r->retry_after = -1;
	else
		r->retry_after = e - now;
	r->remaining = max64(0, lim - cnt);
	if (cnt > 0)
	{
		r->reset_after = e - now;
		r->next_after = e - now;
	}
}

/*
 * rl._fixed_window_settle: a count above MAX_STATE capped there (caps,
 * migration 19), or refused: false, ErrCost (17, 18).
 */
static bool
rl_fixed_window_settle(int64 lim, int64 w, int64 rate, const words *s, bool exact, int64 now, int64 delta, bool caps,
					   words *n)
{
	int64		start = now - now % w;
	int64		cnt = 0;

	if (s->alg == RL_FIXED_WINDOW && s->t >= start)
	{
		start = s->t - s->t % w;
		cnt = s->x;
	}
	cnt += delta;				/* no overflow: both within MAX_STATE + MAX_COST */
	if (cnt > MAX_STATE)
	{
		if (!caps)
			return false;
		cnt = MAX_STATE;
	}
	if (cnt > 0)
	{
		n->alg = RL_FIXED_WINDOW;
		n->t = start;
		n->x = cnt;
	}
	return true;
}

/* rl._fixed_window_anchor, rl._fixed_window_usage: the window's start, its count. */
static int64
rl_fixed_window_usage(const words *s, int64 s_w, int64 s_r, int64 *anchor)
{
	*anchor = s->t;
	return s->x;
}

/* rl._fixed_window_carry: the count of the window holding a. */
static void
rl_fixed_window_carry(int64 a, int64 used, int64 lim, int64 w, int64 rate, words *t)
{
	t->alg = RL_FIXED_WINDOW;
	t->t = a - a % w;
	t->x = used;
}
