/*
 * The sliding window (core.SlidingWindow): the counts of the current and the
 * previous window of the grid.
 * Its functions have the names and signatures the generated dispatch
 * (rl_algorithms.h, which includes this file) calls: rl_<name>_<role>
 * (ARCHITECTURE.md, "A new algorithm"). A port of its PL/pgSQL file
 * (sql/src/functions/alg_sliding_window.sql).
 */
#include "rl_native.h"

static int
rl_sliding_window_state_error(const words *s, int logerr)
{
	return 0;
}

/* rl._sliding_retry */
static int64
sliding_retry(int64 w, int64 lim, int64 start, int64 curr, int64 prev, int64 cost)
{
	int64		k;

	if (curr + cost <= lim && prev > 0)
	{
		k = (lim - curr - cost) * w / prev;
		if (w - k < w)
			return start + (w - k);
	}
	if (curr == 0)
		return start + w;
	k = (lim - cost) * w / curr;
	return start + w + max64(0, w - k);
}

/* rl._sliding_window */
static void
sliding_window(int64 lim, int64 w, int32 s_alg, int64 s_t, int64 s_x, int64 s_y, bool exact, int64 now, int64 cost,
			   bool take, result *r)
{
	int64		start = now - now % w;
	int64		curr = 0;
	int64		prev = 0;
	int64		e;
	int64		room;

	if (s_alg == RL_SLIDING_WINDOW)
	{
		int64		st = s_t - s_t % w;

		if (st >= start)
		{
			start = st;
			curr = s_x;
			prev = s_y;
		}
		else if (st + w == start)
			prev = s_x;
	}
	if (!exact)
	{
		curr = min64(curr, lim);
		prev = min64(prev, lim);
	}
	e = max64(now, start) - start;
	/* Counts in debt (exact) can overflow: the core's int64 arithmetic. */
	room = (int64) ((uint64) (lim - curr) * (uint64) w - (uint64) prev * (uint64) (w - e));
	if (cost == 0)
		r->allowed = true;
	else if (cost <= lim - curr && cost * w <= room)
		r->allowed = true;
	if (r->allowed)
	{
		if (cost > 0)
		{
			curr += cost;
			room -= cost * w;
			if (take)
			{
				r->algorithm = 2;
				r->t = start;
				r->x = curr;
				r->y = prev;
				r->l = lim;
				r->w = w;
				r->r = 0;
			}
		}
	}
	else if (cost > lim)
		r->retry_after = -1;
	else
		r->retry_after = sliding_retry(w, lim, start, curr, prev, cost) - now;
	if (room > 0)
		r->remaining = room / w;
	if (curr > 0)
		r->reset_after = start + 2 * w - now;
	else if (prev > 0)
		r->reset_after = start + w - now;
	if (r->remaining < lim)
		r->next_after = sliding_retry(w, lim, start, curr, prev, r->remaining + 1) - now;
}

static void
rl_sliding_window_step(int64 lim, int64 w, int64 rate, const words *s, bool exact, int64 now, int64 cost, bool take,
					   result *r, Datum *log)
{
	sliding_window(lim, w, s->alg, s->t, s->x, s->y, exact, now, cost, take, r);
}

/*
 * rl._settle_sliding: counts whose weighted sum would pass MAX_UNITS
 * capped there (caps, migration 19), or refused: false, ErrCost (17, 18).
 */
static bool
settle_sliding(int64 lim, int64 w, const words *s, bool exact, int64 now, int64 delta, bool caps, words *n)
{
	int64		start = now - now % w;
	int64		curr = 0,
				prev = 0;

	if (s->alg == RL_SLIDING_WINDOW)
	{
		int64		st = s->t - s->t % w;

		if (st >= start)
		{
			start = st;
			curr = s->x;
			prev = s->y;
		}
		else if (st + w == start)
			prev = s->x;
	}
	if (!exact)
	{
		curr = min64(curr, lim);
		prev = min64(prev, lim);
	}
	curr += delta;				/* no overflow: curr <= MAX_STATE, |delta| <= MAX_COST */
	if (!caps && curr > MAX_STATE)
		return false;
	if (curr < 0)
	{
		prev = max64(0, prev + curr);
		curr = 0;
	}
	/* A debt is kept while the counts times w stay within MAX_UNITS. */
	if (caps)
	{
		int64		m = MAX_UNITS / w;

		if (curr > m - min64(prev, m))
		{
			prev = min64(prev, m);
			curr = m - prev;
		}
	}
	else if (curr > MAX_UNITS / w || prev > MAX_UNITS / w - curr)
		return false;
	if (curr > 0 || prev > 0)
	{
		n->alg = 2;
		n->t = start;
		n->x = curr;
		n->y = prev;
	}
	return true;
}

static bool
rl_sliding_window_settle(int64 lim, int64 w, int64 rate, const words *s, bool exact, int64 now, int64 delta,
						 bool caps, words *n)
{
	return settle_sliding(lim, w, s, exact, now, delta, caps, n);
}

/*
 * rl._sliding_window_anchor, rl._sliding_window_usage: the window's start,
 * both counts, saturating.
 */
static int64
rl_sliding_window_usage(const words *s, int64 s_w, int64 s_r, int64 *anchor)
{
	uint64		v = (uint64) s->x + (uint64) s->y;

	*anchor = s->t;
	return v > (uint64) MAX_STATE ? MAX_STATE : (int64) v;
}

/* rl._sliding_window_carry: the current count of the window holding a. */
static void
rl_sliding_window_carry(int64 a, int64 used, int64 lim, int64 w, int64 rate, words *t)
{
	t->alg = RL_SLIDING_WINDOW;
	t->t = a - a % w;
	t->x = used;
}
