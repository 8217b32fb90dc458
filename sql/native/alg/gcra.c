/*
 * GCRA (core.GCRA): the theoretical arrival time of the next unit (T, with
 * the fraction X) and the time of the admission that wrote it (Y).
 * Its functions have the names and signatures the generated dispatch
 * (rl_algorithms.h, which includes this file) calls: rl_<name>_<role>
 * (ARCHITECTURE.md, "A new algorithm"). A port of its PL/pgSQL file
 * (sql/src/functions/alg_gcra.sql).
 */
#include "rl_native.h"
#include "rl_levels.h"

/* X below Rate (<= MaxLimit); Y never after the TAT it wrote. */
static int
rl_gcra_state_error(const words *s, int logerr)
{
	return (s->x > MAX_LIMIT || s->y > s->t) ? 8 : 0;
}

/* rl._gcra */
static void
gcra(int64 lim, int64 w, int64 rate, int32 s_alg, int64 s_t, int64 s_x, int64 s_y, bool exact, int64 now,
	 int64 cost, bool take, result *r)
{
	int64		capacity = lim * w;
	int64		lvl = 0;
	bool		is_full = false;
	int64		dt;

	if (rate == 0)
		rate = lim;
	if (s_alg == RL_GCRA)
	{
		if (s_y > 0 && !exact)
		{
			dt = s_t - s_y;
			if (dt > capacity / rate || dt * rate + s_x > capacity)
			{
				s_t = s_y + capacity / rate;
				s_x = capacity % rate;
			}
		}
		if (s_t >= now)
		{
			dt = s_t - now;
			if (dt > capacity / rate)
				is_full = true;
			else
				lvl = dt * rate + s_x;
		}
		else
		{
			dt = now - s_t;
			if (s_x > 0 && dt < ceil_div(s_x, rate))
				lvl = s_x - dt * rate;
		}
	}
	if (cost == 0)
		r->allowed = true;
	else if (!is_full && cost <= lim && lvl + cost * w <= capacity)
		r->allowed = true;
	if (r->allowed)
	{
		if (cost > 0)
		{
			lvl += cost * w;
			if (take)
			{
				r->algorithm = 6;
				r->t = now + lvl / rate;
				r->x = lvl % rate;
				r->y = now;
				r->l = lim;
				r->w = w;
				r->r = rate;
			}
			r->reset_after = ceil_div(lvl, rate);
		}
	}
	else if (cost > lim)
		r->retry_after = -1;
	else
		r->retry_after = s_t + ceil_div_signed(s_x + cost * w - capacity, rate) - now;
	if (!is_full && lvl < capacity)
		r->remaining = (capacity - lvl) / w;
	if (r->reset_after == 0 && (is_full || lvl > 0))
		r->reset_after = s_t + ceil_div(s_x, rate) - now;
	if (is_full)
		r->next_after = s_t + ceil_div_signed(s_x + w - capacity, rate) - now;
	else if (lvl > 0)
		r->next_after = ceil_div(lvl - capacity + (r->remaining + 1) * w, rate);
}

static void
rl_gcra_step(int64 lim, int64 w, int64 rate, const words *s, bool exact, int64 now, int64 cost, bool take, result *r,
			 Datum *log)
{
	gcra(lim, w, rate, s->alg, s->t, s->x, s->y, exact, now, cost, take, r);
}

static bool
rl_gcra_settle(int64 lim, int64 w, int64 rate, const words *s, bool exact, int64 now, int64 delta, bool caps,
			   words *n)
{
	return settle_level(RL_GCRA, lim, w, rate, s, exact, now, delta, caps, n);
}

/* rl._gcra_anchor, rl._gcra_usage: the level at the last admission, saturating. */
static int64
rl_gcra_usage(const words *s, int64 s_w, int64 s_r, int64 *anchor)
{
	uint128		v = (uint128) (uint64) (s->t - s->y) * (uint64) s_r + (uint64) s->x;

	*anchor = s->y;
	return v > (uint128) MAX_STATE ? MAX_STATE : (int64) v;
}

/* rl._gcra_carry: the arrival time the level at a gives. */
static void
rl_gcra_carry(int64 a, int64 used, int64 lim, int64 w, int64 rate, words *t)
{
	t->alg = RL_GCRA;
	t->t = a + used / rate;
	t->x = used % rate;
	t->y = a;
}
