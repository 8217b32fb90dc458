/*
 * rl_native.h: what rl_native.c and the algorithms' files (alg/<name>.c)
 * share: the core's bounds, a decision, a state's words and the integer
 * helpers. rl_native is one translation unit: rl_native.c includes this,
 * then the generated rl_algorithms.h, which includes every alg/<name>.c.
 */
#ifndef RL_NATIVE_H
#define RL_NATIVE_H

#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/lsyscache.h"

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

#endif
