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
 * rl._params_valid, rl._log_error, rl._carry, and each algorithm's
 * functions, sql/src/functions/alg_<name>.sql, whose port is
 * alg/<name>.c), themselves a port of core/decide.go, core/carry.go and
 * core/settle.go, with the same results for every input, NULLs and errors
 * included: on an error only err is set, as there. The core's 128-bit
 * products and quotients are 128-bit here (uint128); where the core's int64
 * arithmetic wraps (a state in debt read exactly), this wraps the same way,
 * in uint64. The generated rl_algorithms.h includes the algorithms' files
 * and dispatches to them.
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
#include "rl_native.h"
#include "rl_algorithms.h"

PG_MODULE_MAGIC;

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

/* rl._state_error: the words of a state are its algorithm's (rl_alg_state_error). */
static int
state_error(const words *s, int logerr, int64 s_l, int64 s_w, int64 s_r)
{
	if (s->t < 0 || s->t > MAX_STATE || s->x < 0 || s->x > MAX_STATE || s->y < 0 || s->y > MAX_STATE)
		return 8;
	if ((s_l != 0 || s_w != 0 || s_r != 0) && !params_valid(s->alg, s_l, s_w, s_r))
		return 8;
	if (s->alg == 0)
		return (s->t != 0 || s->x != 0 || s->y != 0 || s_l != 0 || s_w != 0 || s_r != 0 || s->nlog != 0) ? 8 : 0;
	return rl_alg_state_error(s, logerr);
}

/*
 * rl._carry: the state a limit (p_*) holds with the usage of a state
 * recorded under other parameters or by another algorithm (s, whose s_w
 * and s_r are set), read at the state's anchor: each algorithm gives its
 * anchor and usage (rl_alg_usage) and the state it holds with a usage
 * (rl_alg_carry). A sliding log is carried as (t = anchor, x = entries)
 * with no log.
 */
static void
carry(int32 p_alg, int64 p_lim, int64 p_win, int64 p_rate, const words *s, int64 s_w, int64 s_r, words *t)
{
	int64		rate = p_rate == 0 ? p_lim : p_rate;
	int64		a = 0;
	int64		used = rl_alg_usage(s, s_w, s_r, &a);

	memset(t, 0, sizeof(*t));
	if (!rl_alg_windowed(s->alg))	/* a level in 1/s_w of a unit */
	{
		uint64		old = (uint64) used;

		if (!rl_alg_windowed(p_alg))
		{
			/* ceil(old * p_win / s_w), saturating, as the core's Div64 */
			uint128		prod = (uint128) old * (uint64) p_win;
			uint128		q = prod / (uint64) s_w;

			if ((q >> 64) != 0)
				used = MAX_STATE;
			else
			{
				uint64		q64 = (uint64) q;

				if (prod % (uint64) s_w != 0)
					q64++;
				used = q64 > (uint64) MAX_STATE ? MAX_STATE : (int64) q64;
			}
		}
		else
			used = (int64) (old / (uint64) s_w + (old % (uint64) s_w != 0 ? 1 : 0));
	}
	else if (!rl_alg_windowed(p_alg))
		used = min64(used, p_lim) * p_win;
	used = min64(used, rl_alg_windowed(p_alg) ? p_lim : p_lim * p_win);
	if (used == 0)
		return;
	rl_alg_carry(p_alg, a, used, p_lim, p_win, rate, t);
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
	err = state_error(&c->s, logerr, c->s_l, c->s_w, c->s_r);
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
	newlog = (Datum) 0;
	rl_alg_step(c->p_alg, c->p_lim, c->p_win, c->p_rate, &s, exact, c->p_now, c->p_cost, take, &r, &newlog);
	/*
	 * A take that admits writes the new log, or r.log := '{}' for an
	 * algorithm without one.
	 */
	if (newlog != (Datum) 0)
		values[F_LOG] = newlog;
	else if (take && c->p_cost > 0 && r.allowed)
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
	ok = rl_alg_settle(c.p_alg, c.p_lim, c.p_win, c.p_rate, &s, exact, c.p_now, delta, rt->caps, &n);
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
