package clients

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// step is one thing a client does, with the reply it must get: one command
// (Cmd) or a transaction through the client's own MULTI/EXEC API (Tx, whose
// reply is EXEC's array). The JSON form is what clients/node/run.mjs and
// clients/python/run.py read.
type step struct {
	Cmd  []string   `json:"cmd,omitempty"`
	Tx   [][]string `json:"tx,omitempty"`
	what string
	want any // a matcher: int64, span, errLike, proto, or []any of them
}

// The replies, as every runner hands them over: int64, string, nil, []any,
// map[string]any, or errReply for an error reply.
type errReply string

// span matches an integer in [lo, hi]: a figure that shrinks with the time
// the test takes (reset_after_ms refills by the elapsed milliseconds).
type span struct{ lo, hi int64 }

func (s span) String() string { return fmt.Sprintf("%d..%d", s.lo, s.hi) }

// errLike matches an error reply containing any of these words (each client
// words the same error reply its own way: "ERR x", "x", "... ResponseError: x").
type errLike []string

func (e errLike) String() string { return fmt.Sprintf("error containing %q", []string(e)) }

// proto matches a HELLO reply (a map, or a flat list of names and values)
// whose proto field is this version: the protocol the client picked.
type proto int64

func (p proto) String() string { return fmt.Sprintf("HELLO reply with proto %d", int64(p)) }

// slack is how much elapsed time the millisecond figures tolerate: at rate
// 0.001 a bucket refills one token in 1000 s, so only reset_after_ms moves
// (by the elapsed milliseconds) while the test runs.
const slack = 120_000

func about(ms int64) span { return span{ms - slack, ms} }

// scenario is what every client does against bucketd, in two parts run one
// after the other: the commands of the README and docs/commands.md, then
// transactions that must spend each token exactly once (TB.PEEK with cost 0
// reads the bucket after each). p prefixes every key; protocol is the RESP
// version the client picks by default.
type scenario struct {
	commands, transactions []step
}

func newScenario(p string, protocol int64) scenario {
	k := func(name string) string { return p + ":" + name }
	acq := func(key, capacity string, more ...string) []string {
		return append([]string{"TB.ACQUIRE", key, capacity, "0.001"}, more...)
	}
	peek0 := func(key, capacity string) []string { return []string{"TB.PEEK", key, capacity, "0.001", "0"} }
	var sc scenario
	sc.commands = []step{
		{what: "HELLO", Cmd: []string{"HELLO"}, want: proto(protocol)},
		{what: "acquire 1 of 3", Cmd: acq(k("a"), "3"), want: int64(1)},
		{what: "acquire 2 of 3", Cmd: acq(k("a"), "3"), want: int64(1)},
		{what: "acquire 3 of 3", Cmd: acq(k("a"), "3"), want: int64(1)},
		{what: "acquire 4 of 3", Cmd: acq(k("a"), "3"), want: int64(0)},
		{what: "WITHINFO", Cmd: acq(k("w"), "10", "3", "WITHINFO"), want: []any{int64(1), int64(7), int64(0), about(3_000_000)}},
		{what: "TB.PEEK", Cmd: []string{"TB.PEEK", k("w"), "10", "0.001"}, want: []any{int64(1), int64(6), int64(0), about(4_000_000)}},
		{what: "TB.RESET", Cmd: []string{"TB.RESET", k("w"), k("a"), k("none")}, want: int64(2)},
		{what: "TB.PEEK after reset", Cmd: []string{"TB.PEEK", k("w"), "10", "0.001"}, want: []any{int64(1), int64(9), int64(0), int64(1_000_000)}},
		{what: "CL.THROTTLE", Cmd: []string{"CL.THROTTLE", k("c"), "4", "1", "3600"}, want: []any{int64(0), int64(5), int64(4), int64(-1), int64(3600)}},
		{what: "CL.THROTTLE again", Cmd: []string{"CL.THROTTLE", k("c"), "4", "1", "3600"}, want: []any{int64(0), int64(5), int64(3), int64(-1), span{7200 - slack/1000, 7200}}},
	}
	sc.transactions = []step{
		// A transaction over several keys (as a rule on more than one
		// shard): 4 of t1's 10 tokens, 2 of t2's 5, a denied cost above
		// capacity, a CL.THROTTLE, and a TB.PEEK that sees the takes
		// before it.
		{what: "transaction", Tx: [][]string{
			acq(k("t1"), "10"),
			acq(k("t1"), "10"),
			acq(k("t2"), "5", "2", "WITHINFO"),
			acq(k("t1"), "10", "2"),
			acq(k("t3"), "1", "2"),
			{"CL.THROTTLE", k("tc"), "4", "1", "3600"},
			peek0(k("t1"), "10"),
		}, want: []any{
			int64(1),
			int64(1),
			[]any{int64(1), int64(3), int64(0), about(2_000_000)},
			int64(1),
			int64(0),
			[]any{int64(0), int64(5), int64(4), int64(-1), int64(3600)},
			[]any{int64(1), int64(6), int64(0), about(4_000_000)},
		}},
		{what: "t1 after the transaction: 4 tokens spent, once", Cmd: peek0(k("t1"), "10"), want: []any{int64(1), int64(6), int64(0), about(4_000_000)}},
		{what: "t2 after the transaction: 2 tokens spent, once", Cmd: peek0(k("t2"), "5"), want: []any{int64(1), int64(3), int64(0), about(2_000_000)}},
		{what: "tc after the transaction: 1 spent, once", Cmd: []string{"CL.THROTTLE", k("tc"), "4", "1", "3600", "0"}, want: []any{int64(0), int64(5), int64(4), int64(-1), span{3600 - slack/1000, 3600}}},

		// An invalid value is an error inside EXEC's array; the other
		// commands run.
		{what: "transaction with an invalid capacity", Tx: [][]string{
			acq(k("e"), "10"),
			acq(k("e"), "abc"),
			acq(k("e"), "10"),
		}, want: []any{int64(1), errLike{"invalid capacity"}, int64(1)}},
		{what: "e after it: 2 tokens spent", Cmd: peek0(k("e"), "10"), want: []any{int64(1), int64(8), int64(0), about(2_000_000)}},

		// An unknown command while queuing aborts the whole transaction:
		// nothing runs, so a client that retries spends nothing twice.
		{what: "transaction with an unknown command", Tx: [][]string{
			acq(k("x"), "10"),
			{"NO.SUCH.COMMAND", k("x")},
		}, want: errLike{"EXECABORT", "unknown command"}},
		{what: "x after it: nothing spent", Cmd: peek0(k("x"), "10"), want: []any{int64(1), int64(10), int64(0), int64(0)}},
	}
	return sc
}

// steps is the whole scenario, in the order it runs.
func (sc scenario) steps() []step {
	return append(append([]step(nil), sc.commands...), sc.transactions...)
}

// check compares the results of steps() with what each step wants, in two
// subtests: commands, and transactions (which need MULTI/EXEC).
func (sc scenario) check(t *testing.T, client string, results []any) {
	t.Helper()
	if len(results) != len(sc.commands)+len(sc.transactions) {
		t.Fatalf("%s: %d results for %d steps: %v", client, len(results), len(sc.commands)+len(sc.transactions), results)
	}
	n := len(sc.commands)
	t.Run("commands", func(t *testing.T) { check(t, client, sc.commands, results[:n]) })
	t.Run("transactions", func(t *testing.T) { check(t, client, sc.transactions, results[n:]) })
}

// runner is a client under test, connected to bucketd.
type runner interface {
	cmd(ctx context.Context, args []string) any
	tx(ctx context.Context, cmds [][]string) any
}

// runSteps runs the steps one after another with a Go client.
func runSteps(ctx context.Context, r runner, steps []step) []any {
	out := make([]any, len(steps))
	for i, s := range steps {
		if s.Tx != nil {
			out[i] = r.tx(ctx, s.Tx)
		} else {
			out[i] = r.cmd(ctx, s.Cmd)
		}
	}
	return out
}

// check compares each result with its step's want and reports every
// mismatch.
func check(t *testing.T, client string, steps []step, results []any) {
	t.Helper()
	for i, s := range steps {
		if problem := match(results[i], s.want); problem != "" {
			sent := fmt.Sprint(s.Cmd)
			if s.Tx != nil {
				sent = fmt.Sprint("MULTI ", s.Tx, " EXEC")
			}
			t.Errorf("%s: step %d (%s): %s\n  sent %s\n  got  %v\n  want %v", client, i, s.what, problem, sent, show(results[i]), s.want)
		}
	}
}

// match says what is wrong with got, or "" if it is what want describes.
func match(got, want any) string {
	switch w := want.(type) {
	case int64:
		if g, ok := got.(int64); !ok || g != w {
			return fmt.Sprintf("want %d", w)
		}
	case span:
		if g, ok := got.(int64); !ok || g < w.lo || g > w.hi {
			return fmt.Sprintf("want an integer in %v", w)
		}
	case errLike:
		g, ok := got.(errReply)
		if !ok {
			return "want an error reply"
		}
		for _, word := range w {
			if strings.Contains(string(g), word) {
				return ""
			}
		}
		return fmt.Sprintf("want %v", w)
	case proto:
		if p, ok := helloField(got, "proto").(int64); !ok || p != int64(w) {
			return fmt.Sprintf("want %v", w)
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("want an array of %d", len(w))
		}
		for i := range w {
			if problem := match(g[i], w[i]); problem != "" {
				return fmt.Sprintf("element %d: %s", i, problem)
			}
		}
	default:
		panic(fmt.Sprintf("no matcher for %T", want))
	}
	return ""
}

// helloField reads a field of a HELLO reply: a map (RESP3 as most clients
// hand it over) or a flat list of names and values (RESP2, and ioredis).
func helloField(reply any, name string) any {
	switch r := reply.(type) {
	case map[string]any:
		return r[name]
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			if r[i] == name {
				return r[i+1]
			}
		}
	}
	return nil
}

// show formats a result for a failure message.
func show(v any) string {
	if e, ok := v.(errReply); ok {
		return fmt.Sprintf("error %q", string(e))
	}
	return fmt.Sprintf("%v", v)
}

// fromJSON turns a runner script's JSON result into the form check takes:
// numbers become int64, {"error": msg} an errReply.
func fromJSON(v any) any {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		return x.String()
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = fromJSON(x[i])
		}
		return out
	case map[string]any:
		if msg, ok := x["error"].(string); ok && len(x) == 1 {
			return errReply(msg)
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = fromJSON(e)
		}
		return out
	}
	return v
}
