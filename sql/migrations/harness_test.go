package migrations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/rlcore/rl/tests/vectors"
)

// harnessSQL creates rltest.run_case in the test database: it runs a whole
// vector cases (tests/vectors/README.md, "Running a case") through the pure
// functions rl.decide (one limit) and rl.decide_all (several), in one round
// trip, catching each step's error. Per step it returns, compactly,
//
//	{"idx": i, "dec": [[allowed, limit, remaining, reset_after, retry_after, delay], ...], "st": ...}
//	{"err": "RL006", "detail": "...", "msg": "...", "st": ...}  on an error
//
// where st, the states after the step as [algorithm, t, x, y, log...], is
// left out when they did not change since the last step that had it.
const harnessSQL = `
CREATE SCHEMA rltest;

CREATE FUNCTION rltest.st(j jsonb) RETURNS rl.state_words LANGUAGE sql IMMUTABLE
RETURN ROW((j->>'algorithm')::integer, (j->>'t')::bigint, (j->>'x')::bigint, (j->>'y')::bigint,
           ARRAY(SELECT e::bigint FROM jsonb_array_elements_text(
               CASE jsonb_typeof(j->'log') WHEN 'array' THEN j->'log' ELSE '[]' END) AS e))::rl.state_words;

CREATE FUNCTION rltest.lims(j jsonb) RETURNS rl.limit_spec[] LANGUAGE sql IMMUTABLE
RETURN ARRAY(SELECT ROW((e->>'algorithm')::integer, (e->>'limit')::bigint, (e->>'window')::bigint,
                        (e->>'rate')::bigint)::rl.limit_spec
               FROM jsonb_array_elements(j) WITH ORDINALITY AS x(e, i) ORDER BY i);

CREATE FUNCTION rltest.sj(s rl.state_words[]) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
    e rl.state_words;
    a jsonb[] := '{}';
BEGIN
    FOREACH e IN ARRAY s LOOP
        a := a || (jsonb_build_array(e.algorithm, e.t, e.x, e.y) || coalesce(to_jsonb(e.log), '[]'));
    END LOOP;
    RETURN to_jsonb(a);
END
$fn$;

CREATE FUNCTION rltest.dj(d rl.decision_state) RETURNS jsonb LANGUAGE sql IMMUTABLE
RETURN jsonb_build_array(d.allowed::integer, d.lim, d.remaining, d.reset_after_us, d.retry_after_us, d.delay_us);

CREATE FUNCTION rltest.run_case(c jsonb) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    fresh  rl.state_words := ROW(0, 0, 0, 0, '{}');
    lims   rl.limit_spec[] := rltest.lims(c->'limits');
    n      integer := cardinality(lims);
    states rl.state_words[] := array_fill(fresh, ARRAY[n]);
    next   rl.state_words[];
    prev   rl.state_words[];
    step   jsonb;
    res    jsonb;
    ds     jsonb;
    out    text[] := '{}';
    d      rl.decision_state;
    l      rl.limit_spec;
    s      rl.state_words;
    idx    integer;
    j      integer;
    e_state text;
    e_detail text;
    e_msg  text;
BEGIN
    IF jsonb_typeof(c->'states') = 'array' THEN
        FOR j IN 0 .. jsonb_array_length(c->'states') - 1 LOOP
            states[j + 1] := rltest.st(c->'states'->j);
        END LOOP;
    END IF;
    FOR step IN SELECT e FROM jsonb_array_elements(c->'steps') WITH ORDINALITY AS x(e, i) ORDER BY i LOOP
        IF jsonb_typeof(step->'limits') = 'array' THEN
            lims := rltest.lims(step->'limits');
            n := cardinality(lims);
        END IF;
        IF jsonb_typeof(step->'set_states') = 'array' THEN
            FOR j IN 0 .. jsonb_array_length(step->'set_states') - 1 LOOP
                states[j + 1] := rltest.st(step->'set_states'->j);
            END LOOP;
        END IF;
        res := '{}';
        IF step->>'op' = 'reset' THEN
            states := array_fill(fresh, ARRAY[cardinality(states)]);
        ELSE
            BEGIN
                IF n = 1 THEN
                    l := lims[1];
                    s := states[1];
                    d := rl.decide(l.algorithm, l.lim, l.window_us, l.rate, s.algorithm, s.t, s.x, s.y, s.log,
                                   (step->>'now')::bigint, (step->>'cost')::bigint, step->>'op');
                    ds := jsonb_build_array(rltest.dj(d));
                    idx := d.idx;
                    IF step->>'op' = 'take' THEN
                        states[1] := ROW(d.algorithm, d.t, d.x, d.y, d.log);
                    END IF;
                ELSE
                    ds := '[]';
                    next := states;
                    FOR d IN SELECT * FROM rl.decide_all(lims, states, (step->>'now')::bigint,
                                                         (step->>'cost')::bigint, step->>'op') LOOP
                        ds := ds || jsonb_build_array(rltest.dj(d));
                        idx := d.idx;
                        next[d.ord + 1] := ROW(d.algorithm, d.t, d.x, d.y, d.log);
                    END LOOP;
                    IF step->>'op' = 'take' THEN
                        states := next;
                    END IF;
                END IF;
                res := jsonb_build_object('idx', idx, 'dec', ds);
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_detail = PG_EXCEPTION_DETAIL,
                                        e_msg = MESSAGE_TEXT;
                res := jsonb_build_object('err', e_state, 'detail', e_detail, 'msg', e_msg);
            END;
        END IF;
        IF states IS DISTINCT FROM prev THEN
            res := res || jsonb_build_object('st', rltest.sj(states));
            prev := states;
        END IF;
        out := out || res::text;
    END LOOP;
    RETURN '[' || array_to_string(out, ',') || ']';
END
$fn$;

`

// stepResult is one step's outcome.
type stepResult struct {
	SQLState  string
	Detail    string
	Message   string
	Index     int
	Decisions []vectors.Decision
	States    []vectors.State
}

// wireResult is stepResult as rltest.run_case encodes it.
type wireResult struct {
	Err    string    `json:"err"`
	Detail string    `json:"detail"`
	Msg    string    `json:"msg"`
	Idx    int       `json:"idx"`
	Dec    [][]int64 `json:"dec"`
	St     [][]int64 `json:"st"`
}

// decode converts one case's wire results, carrying states forward.
func decode(ws []wireResult) []stepResult {
	out := make([]stepResult, len(ws))
	var states []vectors.State
	for i, w := range ws {
		r := stepResult{SQLState: w.Err, Detail: w.Detail, Message: w.Msg, Index: w.Idx}
		for _, d := range w.Dec {
			r.Decisions = append(r.Decisions, vectors.Decision{Allowed: d[0] == 1, Limit: d[1], Remaining: d[2],
				ResetAfter: d[3], RetryAfter: d[4], Delay: d[5]})
		}
		if w.St != nil {
			states = nil
			for _, s := range w.St {
				states = append(states, vectors.State{Algorithm: int32(s[0]), T: s[1], X: s[2], Y: s[3], Log: s[4:]})
			}
		}
		r.States = states
		out[i] = r
	}
	return out
}

// input is a case without its expectations, as sent to the harness.
type input struct {
	Limits []vectors.Limit `json:"limits"`
	States []vectors.State `json:"states,omitempty"`
	Steps  []inputStep     `json:"steps"`
}

type inputStep struct {
	Now       int64           `json:"now"`
	Op        string          `json:"op"`
	Cost      int64           `json:"cost"`
	Limits    []vectors.Limit `json:"limits,omitempty"`
	SetStates []vectors.State `json:"set_states,omitempty"`
}

func toInput(c vectors.Case) input {
	in := input{Limits: c.Limits, States: c.States}
	for _, s := range c.Steps {
		in.Steps = append(in.Steps, inputStep{Now: s.Now, Op: s.Op, Cost: s.Cost, Limits: s.Limits, SetStates: s.SetStates})
	}
	return in
}

// runPure runs cases through rltest.run_case in one round trip.
func runPure(ctx context.Context, cases []vectors.Case) ([][]stepResult, error) {
	in := make([]input, len(cases))
	for i, c := range cases {
		in[i] = toInput(c)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT rltest.run_case(c) FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS x(c, i)
		ORDER BY i`, string(b))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var res [][]stepResult
	for rows.Next() {
		var out []byte
		if err := rows.Scan(&out); err != nil {
			return nil, err
		}
		var ws []wireResult
		if err := json.Unmarshal(out, &ws); err != nil {
			return nil, err
		}
		res = append(res, decode(ws))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(res) != len(cases) {
		return nil, fmt.Errorf("harness returned %d cases, want %d", len(res), len(cases))
	}
	return res, nil
}

var indexDetail = regexp.MustCompile(`^limit index (\d+)`)

// errorIndex returns the limit index an RL0NN error names in its DETAIL, 0
// when it names none (single-limit calls).
func errorIndex(detail string) int {
	m := indexDetail.FindStringSubmatch(detail)
	if m == nil {
		return 0
	}
	i, _ := strconv.Atoi(m[1])
	return i
}

// checkStep compares one step's outcome with its expectation and returns a
// description of the first difference, or "".
func checkStep(st vectors.Step, got stepResult) string {
	want := st.Expect
	if want.ErrorCode != 0 {
		code := fmt.Sprintf("RL%03d", want.ErrorCode)
		if got.SQLState != code {
			return fmt.Sprintf("got sqlstate %q (%s), want %s (%s)", got.SQLState, got.Message, code, want.Error)
		}
		if i := errorIndex(got.Detail); i != want.Index {
			return fmt.Sprintf("error index %d (detail %q), want %d", i, got.Detail, want.Index)
		}
	} else {
		if got.SQLState != "" {
			return fmt.Sprintf("unexpected error %s: %s (%s)", got.SQLState, got.Message, got.Detail)
		}
		if st.Op != "reset" {
			if got.Index != want.Index {
				return fmt.Sprintf("index %d, want %d", got.Index, want.Index)
			}
			if !slices.Equal(got.Decisions, want.Decisions) {
				return fmt.Sprintf("decisions\n got %+v\nwant %+v", got.Decisions, want.Decisions)
			}
		}
	}
	if len(got.States) < len(want.States) {
		return fmt.Sprintf("%d states, want %d", len(got.States), len(want.States))
	}
	for j, w := range want.States {
		if !stateEqual(got.States[j], w) {
			return fmt.Sprintf("state %d\n got %+v\nwant %+v", j, got.States[j], w)
		}
	}
	return ""
}

func stateEqual(a, b vectors.State) bool {
	return a.Algorithm == b.Algorithm && a.T == b.T && a.X == b.X && a.Y == b.Y && slices.Equal(a.Log, b.Log) ||
		a.Algorithm == b.Algorithm && a.T == b.T && a.X == b.X && a.Y == b.Y && len(a.Log) == 0 && len(b.Log) == 0
}

// checkCase reports the first failing step of c, with the whole case as JSON
// so a failure can be replayed.
func checkCase(t *testing.T, label string, c vectors.Case, got []stepResult) bool {
	t.Helper()
	if len(got) != len(c.Steps) {
		t.Errorf("%s: %d step results, want %d", label, len(got), len(c.Steps))
		return false
	}
	for i, st := range c.Steps {
		if msg := checkStep(st, got[i]); msg != "" {
			b, _ := json.Marshal(toInput(c))
			t.Errorf("%s step %d (op %s now %d cost %d): %s\ncase: %s", label, i, st.Op, st.Now, st.Cost, msg, b)
			return false
		}
	}
	return true
}
