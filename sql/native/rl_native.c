/*
 * rl_native: rl._eval and rl._settle in C, the optional native fast path of
 * the SQL port.
 *
 * rl._eval(algorithm, lim, window_us, rate, state_algorithm, state_t,
 * state_x, state_y, state_log, state_l, state_w, state_r, now_us, cost,
 * take) is the algorithm step of every decision function in schema rl: a
 * pure function of one limit, one stored state (with the parameters that
 * wrote it, migration 17) and the request, returning rl._eval_result.
 * rl._settle(..., now_us, delta) is the settle step (core.Settle).
 * Migration 0008 and later define them in PL/pgSQL, the port that runs
 * everywhere (managed services included). PL/pgSQL sets up every
 * expression of a function once per transaction, and a decision is a
 * transaction of its own, so that port costs about 30 µs of CPU a call;
 * this one costs about one.
 *
 * It is a line-by-line port of the PL/pgSQL rl._eval and rl._settle and the
 * functions they call (rl._limit_error, rl._call_error, rl._state_error,
 * rl._params_valid, rl._log_error, rl._carry, rl._fixed_window,
 * rl._sliding_window, rl._sliding_retry, rl._sliding_log,
 * rl._sliding_log_carried, rl._bucket, rl._bucket_debt, rl._gcra and the
 * rl._settle_* functions), themselves a port of core/decide.go,
 * core/carry.go and core/settle.go, with the same results for every input,
 * NULLs and errors included: on an error only err is set, as there. The
 * core's 128-bit products and quotients are 128-bit here (uint128); where
 * the core's int64 arithmetic wraps (a state in debt read exactly), this
 * wraps the same way, in uint64.
 *
 * One build serves every schema rl since migration 8: rl_eval reads the
 * state's l, w, r when called with 15 arguments (migration 17) and takes
 * them as 0, a state written before they were kept, with 12 (before it),
 * which decides exactly as the PL/pgSQL rl._eval of those migrations; it
 * fills rl._eval_result by its attributes' names, so next_after (migration
 * 16), l, w, r (17) and settle_caps (19) are filled where the type has them.
 * settle_caps also selects the settle's semantics: where the type has it
 * (migration 19), a debt too large for a state is capped, as core.Settle
 * caps it; where not (17, 18), it is refused (err 6, ErrCost), as those
 * migrations' PL/pgSQL refuses it. A build from before 19 does not know the
 * attribute and refuses the type, so it cannot decide for a schema at 19.
 * The conformance vectors and the differential test against the Go core
 * hold it to that (sql/migrations, TestNative).
 *
 * sql/native/README.md: building, installing, enabling.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/lsyscache.h"

#include "rl_algorithms.h"

PG_MODULE_MAGIC;

/* The core's bounds (core/core.go), as rl._max_* return them. */
#define MAX_LIMIT		((int64) 1 << 40)
#define MAX_LOG_LIMIT	((int64) 4096)
#define MAX_WINDOW		INT64CONST(1000000000000000)
#define MAX_UNITS		((int64) 1 << 61)
#define MAX_COST		((int64) 1 << 40)
#define MAX_TIME		INT64CONST(253402300799999999)
#define MAX_STATE		((int64) 1 << 62)

#ifndef HAVE_INT128
#error "rl_native needs a 128-bit integer type (the core's bits.Mul64 and bits.Div64)"
#endif

/*
 * The fields of rl._eval_result; next_after since migration 16, l, w, r
 * since 17, settle_caps since 19 (true in every result that is not an
 * error: the step caps a settle's debt). The fields from F_NEXT_AFTER on
 * are optional.
 */
enum
{
	F_ERR, F_ALLOWED, F_LIM, F_REMAINING, F_RESET_AFTER, F_RETRY_AFTER, F_DELAY,
	F_ALGORITHM, F_T, F_X, F_Y, F_LOG, F_NEXT_AFTER, F_L, F_W, F_R, F_SETTLE_CAPS, N_FIELDS
};

static const char *const field_names[N_FIELDS] = {
	"err", "allowed", "lim", "remaining", "reset_after", "retry_after", "delay",
	"algorithm", "t", "x", "y", "log", "next_after", "l", "w", "r", "settle_caps"
};

/*
 * The result type as this call site has it: its descriptor, whether it has
 * settle_caps (a schema at migration 19 or later: a settle's debt too
 * large for a state is capped, not refused), and the field of each
 * attribute (-1: a dropped attribute, NULL).
 */
typedef struct
{
	TupleDesc	desc;
	bool		caps;
	int			field[FLEXIBLE_ARRAY_MEMBER];
} result_type;

/* One decision: rl._eval_result without the log. */
typedef struct
{
	bool		allowed;
	int64		remaining, reset_after, retry_after, delay, next_after;
	int32		algorithm;
	int64		t, x, y;
	int64		l, w, r;
} result;

/*
 * A state to decide on: a stored one (its log the input array's elements)
 * or one rl._carry / a settle built (its log in palloc'd memory).
 */
typedef struct
{
	int32		alg;
	int64		t, x, y;
	const int64 *log;
	int			nlog;
} words;

/* wrap64 is a + b - c as Go's int64 arithmetic leaves it (modulo 2^64). */
static inline int64
wrap64(int64 a, int64 b, int64 c)
{
	return (int64) ((uint64) a + (uint64) b - (uint64) c);
}

static inline int64
ceil_div(int64 a, int64 b)
{
	return a / b + (a % b != 0 ? 1 : 0);
}

static inline int64
ceil_div_signed(int64 a, int64 b)
{
	return a >= 0 ? a / b + (a % b != 0 ? 1 : 0) : -((-a) / b);
}

static inline int64
max64(int64 a, int64 b)
{
	return a > b ? a : b;
}

static inline int64
min64(int64 a, int64 b)
{
	return a < b ? a : b;
}

/* rl._limit_error */
static int
limit_error(int32 alg, int64 lim, int64 win, int64 rate)
{
	if (!rl_alg_valid(alg))
		return 1;
	if (lim < 1 || lim > MAX_LIMIT || (alg == RL_SLIDING_LOG && lim > MAX_LOG_LIMIT))
		return 2;
	if (win < 1 || win > MAX_WINDOW)
		return 3;
	if ((rl_alg_windowed(alg) && rate != 0) || (!rl_alg_windowed(alg) && (rate < 0 || rate > MAX_LIMIT)))
		return 4;
	if (rl_alg_units_bounded(alg) && lim > MAX_UNITS / max64(win, 1))
		return 5;
	return 0;
}

/* rl._call_error */
static int
call_error(int64 now, int64 cost)
{
	if (now < 0 || now > MAX_TIME)
		return 7;
	if (cost < 0 || cost > MAX_COST)
		return 6;
	return 0;
}

/* rl._log_error over the elements of a log (n elements, ndims dimensions). */
static int
log_error(const int64 *e, int n, int ndims, bool hasnull)
{
	int64		prev = 0;

	if (n == 0)
		return 0;
	if (n > MAX_LOG_LIMIT || ndims != 1 || hasnull)
		return 8;
	for (int i = 0; i < n; i++)
	{
		if (e[i] < prev || e[i] > MAX_STATE)
			return 8;
		prev = e[i];
	}
	return 0;
}

/* rl._params_valid */
static bool
params_valid(int32 alg, int64 l, int64 w, int64 r)
{
	return (rl_alg_windowed(alg) || r >= 1) && limit_error(alg, l, w, r) == 0;
}

/* rl._state_error */
static int
state_error(int32 s_alg, int64 s_t, int64 s_x, int64 s_y, int nlog, int logerr, int64 s_l, int64 s_w, int64 s_r)
{
	if (s_t < 0 || s_t > MAX_STATE || s_x < 0 || s_x > MAX_STATE || s_y < 0 || s_y > MAX_STATE)
		return 8;
	if ((s_l != 0 || s_w != 0 || s_r != 0) && !params_valid(s_alg, s_l, s_w, s_r))
		return 8;
	switch (s_alg)
	{
		case 0:
			return (s_t != 0 || s_x != 0 || s_y != 0 || s_l != 0 || s_w != 0 || s_r != 0 || nlog != 0) ? 8 : 0;
		case 1:
		case 4:
		case 5:
			return s_y != 0 ? 8 : 0;
		case 6:
			return (s_x > MAX_LIMIT || s_y > s_t) ? 8 : 0;
		case 2:
			return 0;
		case 3:
			return (s_t != 0 || s_x != 0 || s_y != 0) ? 8 : logerr;
		default:
			return 8;
	}
}

/* rl._fixed_window */
static void
fixed_window(int64 lim, int64 w, int32 s_alg, int64 s_t, int64 s_x, int64 now, int64 cost, bool take,
			 result *r)
{
	int64		start = now - now % w;
	int64		cnt = 0;
	int64		e;

	if (s_alg == RL_FIXED_WINDOW && s_t >= start)
	{
		start = s_t - s_t % w;
		cnt = s_x;
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
				r->algorithm = 1;
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

/*
 * rl._carry: the state a limit (p_*) holds with the usage of a state
 * recorded under other parameters or by another algorithm (s, whose s_w
 * and s_r are set), read at the state's anchor. A sliding log is carried
 * as (t = anchor, x = entries) with no log.
 */
static void
carry(int32 p_alg, int64 p_lim, int64 p_win, int64 p_rate, const words *s, int64 s_w, int64 s_r, words *t)
{
	int64		rate = p_rate == 0 ? p_lim : p_rate;
	int64		a = 0,
				units = 0,
				lvl = 0;

	memset(t, 0, sizeof(*t));
	switch (s->alg)
	{
		case 1:
			a = s->t;
			units = s->x;
			break;
		case 2:
			{
				uint64		v = (uint64) s->x + (uint64) s->y;

				a = s->t;
				units = v > (uint64) MAX_STATE ? MAX_STATE : (int64) v;
				break;
			}
		case 3:
			if (s->nlog == 0)
				return;
			a = s->log[s->nlog - 1];
			for (int i = 0; i < s->nlog; i++)
				if (s->log[i] > a - s_w)
					units++;
			break;
		default:				/* 4, 5, 6: a level in 1/s_w of a unit */
			{
				uint64		old;

				if (s->alg == RL_GCRA)
				{
					uint128		v = (uint128) (uint64) (s->t - s->y) * (uint64) s_r + (uint64) s->x;

					a = s->y;
					old = v > (uint128) MAX_STATE ? (uint64) MAX_STATE : (uint64) v;
				}
				else
				{
					a = s->t;
					old = (uint64) s->x;
				}
				if (!rl_alg_windowed(p_alg))
				{
					/* ceil(old * p_win / s_w), saturating, as the core's Div64 */
					uint128		prod = (uint128) old * (uint64) p_win;
					uint128		q = prod / (uint64) s_w;

					if ((q >> 64) != 0)
						lvl = MAX_STATE;
					else
					{
						uint64		q64 = (uint64) q;

						if (prod % (uint64) s_w != 0)
							q64++;
						lvl = q64 > (uint64) MAX_STATE ? MAX_STATE : (int64) q64;
					}
				}
				else
					units = (int64) (old / (uint64) s_w + (old % (uint64) s_w != 0 ? 1 : 0));
				break;
			}
	}
	if (!rl_alg_windowed(p_alg))
	{
		int64		capacity = p_lim * p_win;

		if (rl_alg_windowed(s->alg))
			lvl = min64(units, p_lim) * p_win;
		lvl = min64(lvl, capacity);
		if (lvl == 0)
			return;
		t->alg = p_alg;
		if (p_alg == RL_GCRA)
		{
			t->t = a + lvl / rate;
			t->x = lvl % rate;
			t->y = a;
		}
		else
		{
			t->t = a;
			t->x = lvl;
		}
		return;
	}
	units = min64(units, p_lim);
	if (units == 0)
		return;
	t->alg = p_alg;
	t->x = units;
	t->t = p_alg == RL_SLIDING_LOG ? a : a - a % p_win;
}

/* srate: the rate a state of the limit records (0 for the window algorithms). */
static inline int64
srate(int32 p_alg, int64 p_lim, int64 p_rate)
{
	return rl_alg_windowed(p_alg) ? 0 : (p_rate == 0 ? p_lim : p_rate);
}

/*
 * core read: whether s (recorded as s_l, s_w, s_r) is read exactly under
 * the limit; a state to be carried over is replaced by its carried form.
 */
static bool
read_state(int32 p_alg, int64 p_lim, int64 p_win, int64 p_rate, words *s, int64 s_l, int64 s_w, int64 s_r)
{
	bool		exact = s->alg == p_alg && s_w == p_win && s_l == p_lim && s_r == srate(p_alg, p_lim, p_rate);

	if (!exact && s_w != 0 && (s->alg != p_alg || !rl_alg_windowed(s->alg)))
	{
		words		c;

		carry(p_alg, p_lim, p_win, p_rate, s, s_w, s_r, &c);
		*s = c;
		return true;
	}
	return exact;
}

static Datum
int8_array(const int64 *e, int n)
{
	Datum	   *d;

	if (n == 0)
		return PointerGetDatum(construct_empty_array(INT8OID));
	d = palloc(sizeof(Datum) * n);
	for (int i = 0; i < n; i++)
		d[i] = Int64GetDatum(e[i]);
	return PointerGetDatum(construct_array(d, n, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * decide is rl._eval's decision on s (already read): r is filled, and *log
 * is the new log when a take admits on a sliding log (NULL otherwise).
 */
static void
decide(int32 p_alg, int64 p_lim, int64 p_win, int64 p_rate, const words *s, bool exact, int64 now, int64 cost,
	   bool take, result *r, Datum *log)
{
	*log = (Datum) 0;
	switch (p_alg)
	{
		case 1:
			fixed_window(p_lim, p_win, s->alg, s->t, s->x, now, cost, take, r);
			break;
		case 2:
			sliding_window(p_lim, p_win, s->alg, s->t, s->x, s->y, exact, now, cost, take, r);
			break;
		case 3:
			if (s->alg == RL_SLIDING_LOG && s->x != 0)	/* carried over, not yet written */
			{
				bool		rewrite = false;
				int64		live = 0,
							ne = 0;

				sliding_log_carried(p_lim, p_win, s->t, s->x, now, cost, take, r, &rewrite, &live, &ne);
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

				sliding_log(p_lim, p_win, s->log, nl, now, cost, take, r, &rewrite, &keep_from, &append, &ne);
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
			break;
		case 6:
			gcra(p_lim, p_win, p_rate, s->alg, s->t, s->x, s->y, exact, now, cost, take, r);
			break;
		default:
			bucket(p_alg, p_lim, p_win, p_rate, s->alg, s->t, s->x, exact, now, cost, take, r);
			break;
	}
}

/*
 * rl._settle_fixed: a count above MAX_STATE capped there (caps, migration
 * 19), or refused: false, ErrCost (17, 18).
 */
static bool
settle_fixed(int64 w, const words *s, int64 now, int64 delta, bool caps, words *n)
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
		n->alg = 1;
		n->t = start;
		n->x = cnt;
	}
	return true;
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

/*
 * result_type_of prepares the result type of rl_eval's call site: every
 * field of rl._eval_result but next_after, l, w and r must be there, by
 * name.
 */
static result_type *
result_type_of(FunctionCallInfo fcinfo)
{
	TupleDesc	d;
	result_type *rt;
	MemoryContext old;
	bool		seen[N_FIELDS] = {false};

	if (get_call_result_type(fcinfo, NULL, &d) != TYPEFUNC_COMPOSITE)
		ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
						errmsg("rl_native: rl_eval must return rl._eval_result")));
	old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
	rt = palloc(offsetof(result_type, field) + sizeof(int) * Max(d->natts, 1));
	rt->desc = BlessTupleDesc(CreateTupleDescCopy(d));
	MemoryContextSwitchTo(old);
	for (int i = 0; i < d->natts; i++)
	{
		Form_pg_attribute a = TupleDescAttr(d, i);

		rt->field[i] = -1;
		if (a->attisdropped)
			continue;
		for (int f = 0; f < N_FIELDS; f++)
			if (strcmp(NameStr(a->attname), field_names[f]) == 0)
				rt->field[i] = f;
		if (rt->field[i] < 0 || seen[rt->field[i]])
			ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
							errmsg("rl_native: rl_eval must return rl._eval_result, not a type with %s",
								   NameStr(a->attname))));
		seen[rt->field[i]] = true;
	}
	for (int f = 0; f < F_NEXT_AFTER; f++)
		if (!seen[f])
			ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
							errmsg("rl_native: rl_eval must return rl._eval_result, which has %s", field_names[f])));
	rt->caps = seen[F_SETTLE_CAPS];
	return rt;
}

/* result_datum forms the result from the fields' values. */
static Datum
result_datum(result_type *rt, Datum *values, bool *nulls)
{
	int			n = rt->desc->natts;
	Datum	   *v = palloc(sizeof(Datum) * Max(n, 1));
	bool	   *isnull = palloc(sizeof(bool) * Max(n, 1));

	for (int i = 0; i < n; i++)
	{
		int			f = rt->field[i];

		v[i] = f < 0 ? (Datum) 0 : values[f];
		isnull[i] = f < 0 ? true : nulls[f];
	}
	return HeapTupleGetDatum(heap_form_tuple(rt->desc, v, isnull));
}

/*
 * The arguments of rl_eval and rl_settle: the limit, the state (its log
 * checked and, for a sliding log, its elements), the call. Each NULL is
 * replaced as the PL/pgSQL functions replace it.
 */
typedef struct
{
	int32		p_alg;
	int64		p_lim,
				p_win,
				p_rate,
				p_now,
				p_cost;
	words		s;
	int64		s_l,
				s_w,
				s_r;
	ArrayType  *log_arr;
	Datum		log_datum;
	int			ndims;
	bool		lognull;
} call;

/*
 * read_args reads the arguments: the limit at 0-3, the state's words at
 * 4-8, then, with recorded parameters (withp), l, w, r at 9-11; then now
 * and cost (or delta, NULL replaced by null_cost).
 */
static void
read_args(FunctionCallInfo fcinfo, bool withp, int64 null_cost, call *c)
{
	int			at = withp ? 12 : 9;

	memset(c, 0, sizeof(*c));
	c->p_rate = -1;
	c->p_now = -1;
	c->p_cost = null_cost;
	if (!PG_ARGISNULL(0))
		c->p_alg = PG_GETARG_INT32(0);
	if (!PG_ARGISNULL(1))
		c->p_lim = PG_GETARG_INT64(1);
	if (!PG_ARGISNULL(2))
		c->p_win = PG_GETARG_INT64(2);
	if (!PG_ARGISNULL(3))
		c->p_rate = PG_GETARG_INT64(3);
	if (!PG_ARGISNULL(4))
		c->s.alg = PG_GETARG_INT32(4);
	if (!PG_ARGISNULL(5))
		c->s.t = PG_GETARG_INT64(5);
	if (!PG_ARGISNULL(6))
		c->s.x = PG_GETARG_INT64(6);
	if (!PG_ARGISNULL(7))
		c->s.y = PG_GETARG_INT64(7);
	if (withp)
	{
		if (!PG_ARGISNULL(9))
			c->s_l = PG_GETARG_INT64(9);
		if (!PG_ARGISNULL(10))
			c->s_w = PG_GETARG_INT64(10);
		if (!PG_ARGISNULL(11))
			c->s_r = PG_GETARG_INT64(11);
	}
	if (!PG_ARGISNULL(at))
		c->p_now = PG_GETARG_INT64(at);
	if (!PG_ARGISNULL(at + 1))
		c->p_cost = PG_GETARG_INT64(at + 1);
	if (PG_ARGISNULL(8))
	{
		c->log_datum = PointerGetDatum(construct_empty_array(INT8OID));
		c->log_arr = DatumGetArrayTypeP(c->log_datum);
	}
	else
	{
		c->log_arr = PG_GETARG_ARRAYTYPE_P(8);
		c->log_datum = PointerGetDatum(c->log_arr);
	}
	c->ndims = ARR_NDIM(c->log_arr);
	c->s.nlog = ArrayGetNItems(c->ndims, ARR_DIMS(c->log_arr));
	c->lognull = ARR_HASNULL(c->log_arr);
}

/*
 * state_check is rl._state_error on the call's state; for a valid sliding
 * log, it points s.log at the elements and, if the array starts at another
 * index than 1, makes log_datum one that starts at 1.
 */
static int
state_check(call *c)
{
	int			logerr = 0;
	int			err;

	if (c->s.alg == RL_SLIDING_LOG && c->s.nlog > 0)
	{
		if (c->s.nlog > MAX_LOG_LIMIT || c->ndims != 1 || c->lognull)
			logerr = 8;
		else
		{
			if (ARR_ELEMTYPE(c->log_arr) != INT8OID)
				elog(ERROR, "rl_native: the log must be bigint[]");
			c->s.log = (int64 *) ARR_DATA_PTR(c->log_arr);
			logerr = log_error(c->s.log, c->s.nlog, c->ndims, c->lognull);
		}
	}
	err = state_error(c->s.alg, c->s.t, c->s.x, c->s.y, c->s.nlog, logerr, c->s_l, c->s_w, c->s_r);
	if (err == 0 && c->s.alg == RL_SLIDING_LOG && c->s.nlog > 0 && ARR_LBOUND(c->log_arr)[0] != 1)
		c->log_datum = int8_array(c->s.log, c->s.nlog);	/* an array starting at another index than 1 */
	if (c->s.alg != RL_SLIDING_LOG)
		c->s.nlog = 0;
	return err;
}

/* eval_datum decides and forms rl._eval_result: rl._eval after its checks. */
static Datum
eval_datum(result_type *rt, call *c, bool take)
{
	Datum		values[N_FIELDS];
	bool		nulls[N_FIELDS];
	words		s = c->s;
	bool		exact;
	Datum		newlog;
	result		r;

	/* n = *s: a call that admits nothing returns the state unchanged. */
	memset(&r, 0, sizeof(r));
	r.algorithm = c->s.alg;
	r.t = c->s.t;
	r.x = c->s.x;
	r.y = c->s.y;
	r.l = c->s_l;
	r.w = c->s_w;
	r.r = c->s_r;
	values[F_LOG] = c->log_datum;

	exact = read_state(c->p_alg, c->p_lim, c->p_win, c->p_rate, &s, c->s_l, c->s_w, c->s_r);
	decide(c->p_alg, c->p_lim, c->p_win, c->p_rate, &s, exact, c->p_now, c->p_cost, take, &r, &newlog);
	if (newlog != (Datum) 0)
		values[F_LOG] = newlog;
	/* The other algorithms write r.log := '{}' exactly when a take admits. */
	if (c->p_alg != RL_SLIDING_LOG && take && c->p_cost > 0 && r.allowed)
		values[F_LOG] = PointerGetDatum(construct_empty_array(INT8OID));

	memset(nulls, false, sizeof(nulls));
	values[F_ERR] = Int32GetDatum(0);
	values[F_ALLOWED] = BoolGetDatum(r.allowed);
	values[F_LIM] = Int64GetDatum(c->p_lim);
	values[F_REMAINING] = Int64GetDatum(r.remaining);
	values[F_RESET_AFTER] = Int64GetDatum(r.reset_after);
	values[F_RETRY_AFTER] = Int64GetDatum(r.retry_after);
	values[F_DELAY] = Int64GetDatum(r.delay);
	values[F_ALGORITHM] = Int32GetDatum(r.algorithm);
	values[F_T] = Int64GetDatum(r.t);
	values[F_X] = Int64GetDatum(r.x);
	values[F_Y] = Int64GetDatum(r.y);
	values[F_NEXT_AFTER] = Int64GetDatum(r.next_after);
	values[F_L] = Int64GetDatum(r.l);
	values[F_W] = Int64GetDatum(r.w);
	values[F_R] = Int64GetDatum(r.r);
	values[F_SETTLE_CAPS] = BoolGetDatum(true);
	return result_datum(rt, values, nulls);
}

/* error_datum forms the rl._eval_result of an error: only err is set. */
static Datum
error_datum(result_type *rt, int err)
{
	Datum		values[N_FIELDS];
	bool		nulls[N_FIELDS];

	memset(values, 0, sizeof(values));
	memset(nulls, true, sizeof(nulls));
	nulls[F_ERR] = false;
	values[F_ERR] = Int32GetDatum(err);
	return result_datum(rt, values, nulls);
}

static result_type *
call_result_type(FunctionCallInfo fcinfo)
{
	result_type *rt = (result_type *) fcinfo->flinfo->fn_extra;

	if (rt == NULL)
	{
		rt = result_type_of(fcinfo);
		fcinfo->flinfo->fn_extra = rt;
	}
	return rt;
}

PG_FUNCTION_INFO_V1(rl_eval);

/*
 * rl_eval(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint,
 *         s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[],
 *         s_l bigint, s_w bigint, s_r bigint,
 *         p_now bigint, p_cost bigint, p_take boolean) RETURNS rl._eval_result
 *
 * or, for a schema rl before migration 17, without s_l, s_w, s_r (12
 * arguments): a state with no recorded parameters.
 */
Datum
rl_eval(PG_FUNCTION_ARGS)
{
	result_type *rt = call_result_type(fcinfo);
	bool		withp = PG_NARGS() == 15;
	int			at = withp ? 14 : 11;
	bool		take;
	call		c;
	int			err;

	if (PG_NARGS() != 15 && PG_NARGS() != 12)
		elog(ERROR, "rl_native: rl_eval takes 15 arguments (12 before migration 17), not %d", PG_NARGS());
	read_args(fcinfo, withp, -1, &c);
	take = !PG_ARGISNULL(at) && PG_GETARG_BOOL(at);

	/* l.check(), checkCall, checkState, in the core's order. */
	err = limit_error(c.p_alg, c.p_lim, c.p_win, c.p_rate);
	if (err == 0)
		err = call_error(c.p_now, c.p_cost);
	if (err == 0)
		err = state_check(&c);
	if (err != 0)
		PG_RETURN_DATUM(error_datum(rt, err));
	PG_RETURN_DATUM(eval_datum(rt, &c, take));
}

PG_FUNCTION_INFO_V1(rl_settle);

/*
 * rl_settle(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint,
 *           s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[],
 *           s_l bigint, s_w bigint, s_r bigint,
 *           p_now bigint, p_delta bigint) RETURNS rl._eval_result
 *
 * rl._settle (migration 17): the state after the delta, carried over first,
 * and the decision of a call of cost 0 on it. A debt too large for a state
 * is capped where the result type has settle_caps (migration 19), refused
 * (err 6) where not.
 */
Datum
rl_settle(PG_FUNCTION_ARGS)
{
	result_type *rt = call_result_type(fcinfo);
	call		c;
	int			err;
	int64		delta;
	words		s,
				n;
	bool		exact,
				ok;

	if (PG_NARGS() != 14)
		elog(ERROR, "rl_native: rl_settle takes 14 arguments, not %d", PG_NARGS());
	read_args(fcinfo, true, MAX_COST + 1, &c);
	delta = c.p_cost;

	/* The limit, now, the delta, then the state, in the core's order. */
	err = limit_error(c.p_alg, c.p_lim, c.p_win, c.p_rate);
	if (err == 0)
		err = call_error(c.p_now, 0);
	if (err == 0 && (delta < -MAX_COST || delta > MAX_COST))
		err = 6;
	if (err == 0)
		err = state_check(&c);
	if (err != 0)
		PG_RETURN_DATUM(error_datum(rt, err));
	c.p_cost = 0;
	if (delta == 0)				/* nothing to correct: the state stays as it is */
		PG_RETURN_DATUM(eval_datum(rt, &c, false));

	s = c.s;
	exact = read_state(c.p_alg, c.p_lim, c.p_win, c.p_rate, &s, c.s_l, c.s_w, c.s_r);
	memset(&n, 0, sizeof(n));
	switch (c.p_alg)
	{
		case 1:
			ok = settle_fixed(c.p_win, &s, c.p_now, delta, rt->caps, &n);
			break;
		case 2:
			ok = settle_sliding(c.p_lim, c.p_win, &s, exact, c.p_now, delta, rt->caps, &n);
			break;
		case 3:
			ok = settle_log(c.p_lim, c.p_win, &s, c.p_now, delta, &n);
			break;
		default:
			ok = settle_level(c.p_alg, c.p_lim, c.p_win, c.p_rate, &s, exact, c.p_now, delta, rt->caps, &n);
			break;
	}
	if (!ok)
		PG_RETURN_DATUM(error_datum(rt, 6));
	/* The decision of a call of cost 0 on the new state, exact. */
	c.s = n;
	c.s_l = c.s_w = c.s_r = 0;
	if (n.alg != 0)
	{
		c.s_l = c.p_lim;
		c.s_w = c.p_win;
		c.s_r = srate(c.p_alg, c.p_lim, c.p_rate);
	}
	c.log_datum = int8_array(n.log, n.nlog);
	PG_RETURN_DATUM(eval_datum(rt, &c, false));
}
