/*
 * The sliding log (core.SlidingLog): the time of every admitted unit within
 * the window.
 * Its functions have the names and signatures the generated dispatch
 * (rl_algorithms.h, which includes this file) calls: rl_<name>_<role>
 * (ARCHITECTURE.md, "A new algorithm"). A port of its PL/pgSQL file
 * (sql/src/functions/alg_sliding_log.sql).
 */
#include "rl_native.h"

static int
rl_sliding_log_state_error(const words *s, int logerr)
{
	return (s->t != 0 || s->x != 0 || s->y != 0) ? 8 : logerr;
}

/*
 * core's logNext: the time of the admission whose expiry brings a sliding
 * log of n live units (the entries log[i0 .. n_log), then units admitted at
 * ne) back to one more remaining unit than it has.
 */
static int64
log_next(const int64 *log, int i0, int n_log, int64 ne, int64 n, int64 lim)
{
	int64		j = max64(0, n - lim);

	if (j < n_log - i0)
		return log[i0 + j];
	return ne;
}

/*
 * rl._sliding_log over the live log (s_alg 3) or none. The new log, when a
 * take admits, is the live entries from *keep_from (0-based) followed by
 * *append copies of ne (*ne_out).
 */
static void
sliding_log(int64 lim, int64 w, const int64 *log, int n_log, int64 now, int64 cost, bool take, result *r,
			bool *rewrite, int *keep_from, int64 *append, int64 *ne_out)
{
	int64		ne = now;
	int			lo = 0,
				hi = n_log;
	int			i0;
	int64		cnt;
	int64		newest;

	if (n_log > 0)
		ne = max64(now, log[n_log - 1]);
	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (log[mid] > ne - w)
			hi = mid;
		else
			lo = mid + 1;
	}
	i0 = lo;
	cnt = n_log - i0;
	newest = cnt > 0 ? log[n_log - 1] : ne;
	if (cost == 0 || cnt + cost <= lim)
	{
		r->allowed = true;
		if (cost > 0)
		{
			r->next_after = log_next(log, i0, n_log, ne, cnt + cost, lim) + w - now;
			if (take)
			{
				r->algorithm = 3;
				r->t = 0;
				r->x = 0;
				r->y = 0;
				r->l = lim;
				r->w = w;
				r->r = 0;
				*rewrite = true;
				*keep_from = i0;
				*append = cost;
				*ne_out = ne;
			}
			cnt += cost;
			newest = ne;
		}
	}
	else if (cost > lim)
		r->retry_after = -1;
	else
		r->retry_after = log[i0 + (cnt + cost - lim) - 1] + w - now;
	r->remaining = max64(0, lim - cnt);
	if (cnt > 0)
	{
		r->reset_after = newest + w - now;
		if (r->next_after == 0)	/* not an admission: the log is as it was */
			r->next_after = log_next(log, i0, n_log, ne, cnt, lim) + w - now;
	}
}

/*
 * rl._sliding_log_carried: a log carried over as units entries at a. When
 * a take admits, the new log is *live copies of a then cost copies of *ne_out.
 */
static void
sliding_log_carried(int64 lim, int64 w, int64 a, int64 units, int64 now, int64 cost, bool take, result *r,
					bool *rewrite, int64 *live_out, int64 *ne_out)
{
	int64		ne = max64(now, a);
	int64		cnt = units;
	int64		live;
	int64		newest;
	int64		j;

	if (a <= ne - w)
		cnt = 0;
	live = cnt;
	newest = cnt > 0 ? a : ne;
	if (cost == 0 || cnt + cost <= lim)
	{
		r->allowed = true;
		if (cost > 0)
		{
			j = max64(0, cnt + cost - lim);
			r->next_after = (j < live ? a : ne) + w - now;
			if (take)
			{
				r->algorithm = 3;
				r->t = 0;
				r->x = 0;
				r->y = 0;
				r->l = lim;
				r->w = w;
				r->r = 0;
				*rewrite = true;
				*live_out = live;
				*ne_out = ne;
			}
			cnt += cost;
			newest = ne;
		}
	}
	else if (cost > lim)
		r->retry_after = -1;
	else
		r->retry_after = a + w - now;
	r->remaining = max64(0, lim - cnt);
	if (cnt > 0)
	{
		r->reset_after = newest + w - now;
		if (r->next_after == 0)
		{
			j = max64(0, cnt - lim);
			r->next_after = (j < live ? a : ne) + w - now;
		}
	}
}

/*
 * rl._sliding_log_step: a log carried over and not yet written (x set), or
 * the log; *log is the new log when a take admits.
 */
static void
rl_sliding_log_step(int64 lim, int64 w, int64 rate, const words *s, bool exact, int64 now, int64 cost, bool take,
					result *r, Datum *log)
{
	if (s->alg == RL_SLIDING_LOG && s->x != 0)	/* carried over, not yet written */
	{
		bool		rewrite = false;
		int64		live = 0,
					ne = 0;

		sliding_log_carried(lim, w, s->t, s->x, now, cost, take, r, &rewrite, &live, &ne);
		if (rewrite)
		{
			int			n = (int) (live + cost);
			int64	   *e = palloc(sizeof(int64) * n);

			for (int i = 0; i < n; i++)
				e[i] = i < live ? s->t : ne;
			*log = int8_array(e, n);
		}
	}
	else
	{
		bool		rewrite = false;
		int			keep_from = 0;
		int64		append = 0,
					ne = 0;
		int			nl = s->alg == RL_SLIDING_LOG ? s->nlog : 0;

		sliding_log(lim, w, s->log, nl, now, cost, take, r, &rewrite, &keep_from, &append, &ne);
		if (rewrite)
		{
			int			n = nl - keep_from + (int) append;
			int64	   *e = palloc(sizeof(int64) * n);

			for (int i = keep_from; i < nl; i++)
				e[i - keep_from] = s->log[i];
			for (int i = nl - keep_from; i < n; i++)
				e[i] = ne;
			*log = int8_array(e, n);
		}
	}
}

/* rl._settle_log: the new log in palloc'd memory. */
static bool
settle_log(int64 lim, int64 w, const words *s, int64 now, int64 delta, words *n)
{
	const int64 *log = s->alg == RL_SLIDING_LOG ? s->log : NULL;
	int			nlog = s->alg == RL_SLIDING_LOG ? s->nlog : 0;
	int64		ne = now;
	int			i0 = 0;
	int64		cnt,
				carried = 0,
				keep,
				old;
	int64	   *e;

	if (nlog > 0)
		ne = max64(now, log[nlog - 1]);
	while (i0 < nlog && log[i0] <= ne - w)
		i0++;
	cnt = nlog - i0;
	if (s->alg == RL_SLIDING_LOG && s->x != 0)
	{
		ne = max64(now, s->t);
		if (s->t > ne - w)
			carried = s->x;
		cnt = carried;
	}
	keep = cnt + delta;
	if (delta > 0)
		keep = max64(cnt, min64(keep, lim));
	keep = max64(0, keep);
	if (keep == 0)
		return true;
	old = min64(keep, cnt);
	e = palloc(sizeof(int64) * keep);
	for (int64 i = 0; i < old; i++)
		e[i] = carried > 0 ? s->t : log[i0 + i];
	for (int64 i = old; i < keep; i++)
		e[i] = ne;
	n->alg = 3;
	n->log = e;
	n->nlog = (int) keep;
	return true;
}

static bool
rl_sliding_log_settle(int64 lim, int64 w, int64 rate, const words *s, bool exact, int64 now, int64 delta, bool caps,
					  words *n)
{
	return settle_log(lim, w, s, now, delta, n);
}

/*
 * rl._sliding_log_anchor, rl._sliding_log_usage: the newest entry and the
 * entries within the window before it; none for an empty log.
 */
static int64
rl_sliding_log_usage(const words *s, int64 s_w, int64 s_r, int64 *anchor)
{
	int64		units = 0;

	*anchor = 0;
	if (s->nlog == 0)
		return 0;
	*anchor = s->log[s->nlog - 1];
	for (int i = 0; i < s->nlog; i++)
		if (s->log[i] > *anchor - s_w)
			units++;
	return units;
}

/* rl._sliding_log_carry: the entries exist only as (a, units). */
static void
rl_sliding_log_carry(int64 a, int64 used, int64 lim, int64 w, int64 rate, words *t)
{
	t->alg = RL_SLIDING_LOG;
	t->t = a;
	t->x = used;
}
