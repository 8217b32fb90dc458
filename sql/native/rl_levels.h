/*
 * The level arithmetic the token and leaky buckets share (alg/token_bucket.c
 * and alg/leaky_bucket.c call it with their numbers), and the settle of a
 * level, theirs and GCRA's: a port of sql/src/functions/levels.sql.
 */
#ifndef RL_LEVELS_H
#define RL_LEVELS_H

#include "rl_native.h"

/* rl._bucket: token bucket (4) and leaky bucket (5). */
static void
bucket(int32 alg, int64 lim, int64 w, int64 rate, int32 s_alg, int64 s_t, int64 s_x, bool exact, int64 now,
	   int64 cost, bool take, result *r)
{
	int64		capacity = lim * w;
	int64		last = now;
	int64		lvl = 0;
	int64		ne;
	int64		el;

	if (rate == 0)
		rate = lim;
	if (s_alg == alg)
	{
		last = s_t;
		lvl = exact ? s_x : min64(s_x, capacity);
	}
	ne = max64(now, last);
	el = ne - last;
	if (el > 0 && lvl > 0)
	{
		if (el >= ceil_div(lvl, rate))
			lvl = 0;
		else
			lvl = lvl - el * rate;
	}
	if (lvl > capacity)
	{
		/*
		 * rl._bucket_debt: in debt (exact), only a cost of 0 is admitted,
		 * and the times wrap as the core's int64 sums do.
		 */
		if (cost == 0)
		{
			r->allowed = true;
			if (alg == RL_LEAKY_BUCKET)
				r->delay = wrap64(ceil_div(lvl, rate), ne, now);
		}
		else if (cost > lim)
			r->retry_after = -1;
		else
			r->retry_after = wrap64(ceil_div(lvl + cost * w - capacity, rate), ne, now);
		r->reset_after = wrap64(ceil_div(lvl, rate), ne, now);
		r->next_after = wrap64(ceil_div(lvl - capacity + w, rate), ne, now);
		return;
	}
	if (cost == 0)
		r->allowed = true;
	else if (cost <= lim && lvl + cost * w <= capacity)
		r->allowed = true;
	if (r->allowed)
	{
		if (alg == RL_LEAKY_BUCKET && lvl > 0)
			r->delay = ceil_div(lvl, rate) + ne - now;
		if (cost > 0)
		{
			lvl += cost * w;
			if (take)
			{
				r->algorithm = alg;
				r->t = ne;
				r->x = lvl;
				r->y = 0;
				r->l = lim;
				r->w = w;
				r->r = rate;
			}
		}
	}
	else if (cost > lim)
		r->retry_after = -1;
	else
		r->retry_after = ceil_div(lvl + cost * w - capacity, rate) + ne - now;
	if (lvl < capacity)
		r->remaining = (capacity - lvl) / w;
	if (lvl > 0)
	{
		r->reset_after = ceil_div(lvl, rate) + ne - now;
		r->next_after = ceil_div(lvl - capacity + (r->remaining + 1) * w, rate) + ne - now;
	}
}

/*
 * rl._settle_level: the buckets and GCRA. A level above MAX_STATE, or a
 * GCRA arrival time beyond it, is capped there (caps, migration 19), or
 * refused: false, ErrCost (17, 18).
 */
static bool
settle_level(int32 p_alg, int64 lim, int64 w, int64 rate, const words *s, bool exact, int64 now, int64 delta,
			 bool caps, words *n)
{
	int64		capacity = lim * w;
	int64		ne = now,
				lvl = 0;
	uint128		d;

	if (rate == 0)
		rate = lim;
	if (s->alg == p_alg)
	{
		if (p_alg == RL_GCRA)
		{
			int64		st = s->t,
						sx = s->x;

			if (s->y > 0 && !exact)
			{
				int64		dt = st - s->y;

				if (dt > capacity / rate || dt * rate + sx > capacity)
				{
					st = s->y + capacity / rate;
					sx = capacity % rate;
				}
			}
			ne = max64(now, s->y);
			if (st >= ne)
			{
				uint128		v = (uint128) (uint64) (st - ne) * (uint64) rate + (uint64) sx;

				lvl = v > (uint128) MAX_STATE ? MAX_STATE : (int64) v;
			}
			else
			{
				int64		dt = ne - st;

				if (sx > 0 && dt < ceil_div(sx, rate))
					lvl = sx - dt * rate;
			}
		}
		else
		{
			int64		el;

			ne = max64(now, s->t);
			lvl = exact ? s->x : min64(s->x, capacity);
			el = ne - s->t;
			if (el > 0 && lvl > 0)
			{
				if (el >= ceil_div(lvl, rate))
					lvl = 0;
				else
					lvl -= el * rate;
			}
		}
	}
	d = (uint128) (uint64) (delta >= 0 ? delta : -delta) * (uint64) w;
	if (delta >= 0)
	{
		if (d <= (uint128) (MAX_STATE - lvl))
			lvl += (int64) d;
		else if (caps)
			lvl = MAX_STATE;	/* a debt beyond a state: capped */
		else
			return false;
	}
	else if (d >= (uint128) lvl)
		lvl = 0;
	else
		lvl -= (int64) d;
	if (lvl == 0)
		return true;
	n->alg = p_alg;
	if (p_alg == RL_GCRA)
	{
		int64		q = lvl / rate;

		if (q > MAX_STATE - ne)	/* its arrival time would not fit a state */
		{
			if (!caps)
				return false;
			q = MAX_STATE - ne;
			lvl = q * rate;		/* <= the level: no overflow */
		}
		n->t = ne + q;
		n->x = lvl - q * rate;
		n->y = ne;
	}
	else
	{
		n->t = ne;
		n->x = lvl;
	}
	return true;
}

#endif
