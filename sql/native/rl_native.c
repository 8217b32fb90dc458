/*
 * rl_native: rl._eval in C, the optional native fast path of the SQL port.
 *
 * rl._eval(algorithm, lim, window_us, rate, state_algorithm, state_t,
 * state_x, state_y, state_log, now_us, cost, take) is the algorithm step of
 * every decision function in schema rl: a pure function of one limit, one
 * stored state and the request, returning rl._eval_result. Migration 0008
 * and later define it in PL/pgSQL, the port that runs everywhere (managed
 * services included). PL/pgSQL sets up every expression of a function once
 * per transaction, and a decision is a transaction of its own, so that port
 * costs about 30 µs of CPU a call; this one costs about one.
 *
 * It is a line-by-line port of the PL/pgSQL rl._eval and the functions it
 * calls (rl._limit_error, rl._call_error, rl._state_error, rl._log_error,
 * rl._fixed_window, rl._sliding_window, rl._sliding_retry, rl._sliding_log,
 * rl._bucket, rl._gcra), themselves a port of core/decide.go, with the same
 * results for every input, NULLs and errors included: on an error only err
 * is set, as there. It fills rl._eval_result by its attributes' names, so
 * that one build serves schema rl before migration 16 (no next_after) and
 * after it. The conformance vectors and the differential test
 * against the Go core hold it to that (sql/migrations, TestNative).
 * Integers only; every bound that keeps the arithmetic within 64 bits is
 * checked before any arithmetic, as in the core.
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

PG_MODULE_MAGIC;

/* The core's bounds (core/core.go), as rl._max_* return them. */
#define MAX_LIMIT		((int64) 1 << 40)
#define MAX_LOG_LIMIT	((int64) 4096)
#define MAX_WINDOW		INT64CONST(1000000000000000)
#define MAX_UNITS		((int64) 1 << 61)
#define MAX_COST		((int64) 1 << 40)
#define MAX_TIME		INT64CONST(253402300799999999)
#define MAX_STATE		((int64) 1 << 62)

/* The fields of rl._eval_result; next_after since migration 16. */
enum
{
	F_ERR, F_ALLOWED, F_LIM, F_REMAINING, F_RESET_AFTER, F_RETRY_AFTER, F_DELAY,
	F_ALGORITHM, F_T, F_X, F_Y, F_LOG, F_NEXT_AFTER, N_FIELDS
};

static const char *const field_names[N_FIELDS] = {
	"err", "allowed", "lim", "remaining", "reset_after", "retry_after", "delay",
	"algorithm", "t", "x", "y", "log", "next_after"
};

/*
 * The result type as this call site has it: its descriptor, and the field
 * of each attribute (-1: a dropped attribute, NULL).
 */
typedef struct
{
	TupleDesc	desc;
	int			field[FLEXIBLE_ARRAY_MEMBER];
} result_type;

/* One decision: rl._eval_result without the log. */
typedef struct
{
	bool		allowed;
	int64		remaining, reset_after, retry_after, delay, next_after;
	int32		algorithm;
	int64		t, x, y;
} result;

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
	if (alg < 1 || alg > 6)
		return 1;
	if (lim < 1 || lim > MAX_LIMIT || (alg == 3 && lim > MAX_LOG_LIMIT))
		return 2;
	if (win < 1 || win > MAX_WINDOW)
		return 3;
	if ((alg <= 3 && rate != 0) || (alg > 3 && (rate < 0 || rate > MAX_LIMIT)))
		return 4;
	if (alg != 1 && alg != 3 && lim > MAX_UNITS / max64(win, 1))
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

/* rl._state_error */
static int
state_error(int32 s_alg, int64 s_t, int64 s_x, int64 s_y, int nlog, int logerr)
{
	if (s_t < 0 || s_t > MAX_STATE || s_x < 0 || s_x > MAX_STATE || s_y < 0 || s_y > MAX_STATE)
		return 8;
	switch (s_alg)
	{
		case 0:
			return (s_t != 0 || s_x != 0 || s_y != 0 || nlog != 0) ? 8 : 0;
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

	if (s_alg == 1 && s_t >= start)
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
sliding_window(int64 lim, int64 w, int32 s_alg, int64 s_t, int64 s_x, int64 s_y, int64 now, int64 cost,
			   bool take, result *r)
{
	int64		start = now - now % w;
	int64		curr = 0;
	int64		prev = 0;
	int64		e;
	int64		room;

	if (s_alg == 2)
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
	curr = min64(curr, lim);
	prev = min64(prev, lim);
	e = max64(now, start) - start;
	room = (lim - curr) * w - prev * (w - e);
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

/* rl._bucket: token bucket (4) and leaky bucket (5). */
static void
bucket(int32 alg, int64 lim, int64 w, int64 rate, int32 s_alg, int64 s_t, int64 s_x, int64 now, int64 cost,
	   bool take, result *r)
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
		lvl = min64(s_x, capacity);
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
	if (cost == 0)
		r->allowed = true;
	else if (cost <= lim && lvl + cost * w <= capacity)
		r->allowed = true;
	if (r->allowed)
	{
		if (alg == 5 && lvl > 0)
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
			}
		}
	}
	else if (cost > lim)
		r->retry_after = -1;
	else
		r->retry_after = ceil_div(lvl + cost * w - capacity, rate) + ne - now;
	r->remaining = (capacity - lvl) / w;
	if (lvl > 0)
	{
		r->reset_after = ceil_div(lvl, rate) + ne - now;
		r->next_after = ceil_div(lvl - capacity + (r->remaining + 1) * w, rate) + ne - now;
	}
}

/* rl._gcra */
static void
gcra(int64 lim, int64 w, int64 rate, int32 s_alg, int64 s_t, int64 s_x, int64 s_y, int64 now, int64 cost,
	 bool take, result *r)
{
	int64		capacity = lim * w;
	int64		lvl = 0;
	bool		is_full = false;
	int64		dt;

	if (rate == 0)
		rate = lim;
	if (s_alg == 6)
	{
		if (s_y > 0)
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
 * result_type_of prepares the result type of rl_eval's call site: every
 * field of rl._eval_result but next_after must be there, by name.
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

PG_FUNCTION_INFO_V1(rl_eval);

/*
 * rl_eval(p_alg integer, p_lim bigint, p_win bigint, p_rate bigint,
 *         s_alg integer, s_t bigint, s_x bigint, s_y bigint, s_log bigint[],
 *         p_now bigint, p_cost bigint, p_take boolean) RETURNS rl._eval_result
 */
Datum
rl_eval(PG_FUNCTION_ARGS)
{
	result_type *rt = (result_type *) fcinfo->flinfo->fn_extra;
	Datum		values[N_FIELDS];
	bool		nulls[N_FIELDS];
	int32		p_alg = 0,
				s_alg = 0;
	int64		p_lim = 0,
				p_win = 0,
				p_rate = -1,
				s_t = 0,
				s_x = 0,
				s_y = 0,
				p_now = -1,
				p_cost = -1;
	bool		take;
	ArrayType  *log_arr = NULL;
	Datum		log_datum;
	int64	   *log = NULL;
	int			n_log = 0;
	int			ndims = 0;
	bool		lognull = false;
	int			err;
	result		r;

	if (rt == NULL)
	{
		rt = result_type_of(fcinfo);
		fcinfo->flinfo->fn_extra = rt;
	}

	/* Arguments, each NULL replaced as rl._eval replaces it. */
	if (!PG_ARGISNULL(0))
		p_alg = PG_GETARG_INT32(0);
	if (!PG_ARGISNULL(1))
		p_lim = PG_GETARG_INT64(1);
	if (!PG_ARGISNULL(2))
		p_win = PG_GETARG_INT64(2);
	if (!PG_ARGISNULL(3))
		p_rate = PG_GETARG_INT64(3);
	if (!PG_ARGISNULL(4))
		s_alg = PG_GETARG_INT32(4);
	if (!PG_ARGISNULL(5))
		s_t = PG_GETARG_INT64(5);
	if (!PG_ARGISNULL(6))
		s_x = PG_GETARG_INT64(6);
	if (!PG_ARGISNULL(7))
		s_y = PG_GETARG_INT64(7);
	if (!PG_ARGISNULL(9))
		p_now = PG_GETARG_INT64(9);
	if (!PG_ARGISNULL(10))
		p_cost = PG_GETARG_INT64(10);
	take = !PG_ARGISNULL(11) && PG_GETARG_BOOL(11);

	if (PG_ARGISNULL(8))
	{
		log_datum = PointerGetDatum(construct_empty_array(INT8OID));
		log_arr = DatumGetArrayTypeP(log_datum);
	}
	else
	{
		log_arr = PG_GETARG_ARRAYTYPE_P(8);
		log_datum = PointerGetDatum(log_arr);
	}
	ndims = ARR_NDIM(log_arr);
	n_log = ArrayGetNItems(ndims, ARR_DIMS(log_arr));
	lognull = ARR_HASNULL(log_arr);

	memset(nulls, true, sizeof(nulls));
	nulls[F_ERR] = false;

	/* l.check(), checkCall, checkState, in the core's order. */
	err = limit_error(p_alg, p_lim, p_win, p_rate);
	if (err == 0)
		err = call_error(p_now, p_cost);
	if (err == 0)
	{
		int			logerr = 0;

		if (s_alg == 3 && n_log > 0)
		{
			if (n_log > MAX_LOG_LIMIT || ndims != 1 || lognull)
				logerr = 8;
			else
			{
				if (ARR_ELEMTYPE(log_arr) != INT8OID)
					elog(ERROR, "rl_native: the log must be bigint[]");
				log = (int64 *) ARR_DATA_PTR(log_arr);
				logerr = log_error(log, n_log, ndims, lognull);
			}
		}
		err = state_error(s_alg, s_t, s_x, s_y, n_log, logerr);
	}
	values[F_ERR] = Int32GetDatum(err);
	if (err != 0)
		PG_RETURN_DATUM(result_datum(rt, values, nulls));

	/* n = *s: a call that admits nothing returns the state unchanged. */
	memset(&r, 0, sizeof(r));
	r.algorithm = s_alg;
	r.t = s_t;
	r.x = s_x;
	r.y = s_y;
	if (s_alg == 3 && n_log > 0 && ARR_LBOUND(log_arr)[0] != 1)
	{
		/* an array starting at another index than 1 */
		log = (int64 *) ARR_DATA_PTR(log_arr);
		log_datum = int8_array(log, n_log);
	}
	values[F_LOG] = log_datum;

	switch (p_alg)
	{
		case 1:
			fixed_window(p_lim, p_win, s_alg, s_t, s_x, p_now, p_cost, take, &r);
			break;
		case 2:
			sliding_window(p_lim, p_win, s_alg, s_t, s_x, s_y, p_now, p_cost, take, &r);
			break;
		case 3:
			{
				bool		rewrite = false;
				int			keep_from = 0;
				int64		append = 0,
							ne = 0;
				int			nl = s_alg == 3 ? n_log : 0;
				const int64 *l = nl > 0 ? (const int64 *) ARR_DATA_PTR(log_arr) : NULL;

				sliding_log(p_lim, p_win, l, nl, p_now, p_cost, take, &r, &rewrite, &keep_from, &append, &ne);
				if (rewrite)
				{
					int			n = nl - keep_from + (int) append;
					int64	   *e = palloc(sizeof(int64) * n);

					for (int i = keep_from; i < nl; i++)
						e[i - keep_from] = l[i];
					for (int i = nl - keep_from; i < n; i++)
						e[i] = ne;
					values[F_LOG] = int8_array(e, n);
				}
				break;
			}
		case 6:
			gcra(p_lim, p_win, p_rate, s_alg, s_t, s_x, s_y, p_now, p_cost, take, &r);
			break;
		default:
			bucket(p_alg, p_lim, p_win, p_rate, s_alg, s_t, s_x, p_now, p_cost, take, &r);
			break;
	}
	/* The other algorithms write r.log := '{}' exactly when a take admits. */
	if (p_alg != 3 && take && p_cost > 0 && r.allowed)
		values[F_LOG] = PointerGetDatum(construct_empty_array(INT8OID));

	memset(nulls, false, sizeof(nulls));
	values[F_ALLOWED] = BoolGetDatum(r.allowed);
	values[F_LIM] = Int64GetDatum(p_lim);
	values[F_REMAINING] = Int64GetDatum(r.remaining);
	values[F_RESET_AFTER] = Int64GetDatum(r.reset_after);
	values[F_RETRY_AFTER] = Int64GetDatum(r.retry_after);
	values[F_DELAY] = Int64GetDatum(r.delay);
	values[F_ALGORITHM] = Int32GetDatum(r.algorithm);
	values[F_T] = Int64GetDatum(r.t);
	values[F_X] = Int64GetDatum(r.x);
	values[F_Y] = Int64GetDatum(r.y);
	values[F_NEXT_AFTER] = Int64GetDatum(r.next_after);
	PG_RETURN_DATUM(result_datum(rt, values, nulls));
}
