package redisscript

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/redistest"
)

func TestParseDecision(t *testing.T) {
	good := []struct {
		in   any
		want bucket.Decision
	}{
		{[]any{int64(1), int64(9), int64(0), int64(1000)}, bucket.Decision{Allowed: true, Remaining: 9, ResetAfterMs: 1000}},
		{[]any{int64(0), int64(2), int64(-1), "9223372036854775807"},
			bucket.Decision{Remaining: 2, RetryAfterMs: -1, ResetAfterMs: math.MaxInt64}},
		{[]any{0, 0, "9223372036854775807", 5}, bucket.Decision{RetryAfterMs: math.MaxInt64, ResetAfterMs: 5}},
	}
	for _, tc := range good {
		if got, err := ParseDecision(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseDecision(%v) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []any{
		nil, int64(1), "1", []any{int64(1)}, []any{int64(1), int64(1), int64(1), int64(1), int64(1)},
		[]any{int64(2), int64(0), int64(0), int64(0)}, []any{int64(1), "x", int64(0), int64(0)},
		[]any{int64(1), 1.5, int64(0), int64(0)}, []any{int64(1), "9223372036854775808", int64(0), int64(0)},
	} {
		if _, err := ParseDecision(in); !errors.Is(err, ErrBadReply) {
			t.Errorf("ParseDecision(%#v) error %v, want ErrBadReply", in, err)
		}
	}
}

// replyErr is an error reply as go-redis hands it over.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Class
	}{
		{nil, None},
		{redis.ErrNoScript, NoScript},
		{replyErr("NOSCRIPT No matching script. Please use EVAL."), NoScript},
		{replyErr("WRONGTYPE Operation against a key holding the wrong kind of value"), WrongType},
		{fmt.Errorf("replica: %w", replyErr("WRONGTYPE …")), WrongType},
		{replyErr("ERR invalid rate: must be a finite number > 0"), Invalid},
		{replyErr("ERR invalid batch: 2 keys need 12 arguments, six per key; got 6"), Invalid},
		{replyErr("OOM command not allowed when used memory > 'maxmemory'."), OOM},
		{replyErr("OOM command not allowed when used memory > 'maxmemory'. script: 6db28f19dc6e66e93db47090d5cd616d34cfd042, on @user_script:180."), OOM},
		{fmt.Errorf("replica: %w", replyErr("ERR Error running script (call to f_6db28f19dc6e66e93db47090d5cd616d34cfd042): @user_script:180: -OOM command not allowed when used memory > 'maxmemory'. ")), OOM},
		{replyErr("ERR Error running script: @user_script:1: user_script:1: attempt to index a nil value"), Reply},
		{replyErr("READONLY You can't write against a read only replica."), Reply},
		{replyErr("ERR unknown command 'CLIENT'"), Reply},
		{replyErr("MOVED 3999 127.0.0.1:6381"), Redirect},
		{replyErr("ASK 3999 127.0.0.1:6381"), Redirect},
		{replyErr("ASKING is not a reply"), Reply},
		{context.DeadlineExceeded, Transport},
		{errors.New("ERR invalid rate: not from Redis"), Transport},
	} {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %d, want %d", tc.err, got, tc.want)
		}
		if got, want := IsReply(tc.err), tc.want != None && tc.want != Transport; got != want {
			t.Errorf("IsReply(%v) = %v, want %v", tc.err, got, want)
		}
	}
}

// TestReply: a call alone gets its command's reply; a call in a batch its
// element, an error element for itself only; a batch reply that is not an
// array of enough elements is ErrBadReply; a command's error is every
// call's.
func TestReply(t *testing.T) {
	var b Batch
	b.Reset("")
	l := bucket.Limit{Capacity: 1, Rate: 1}
	for _, op := range []Op{Acquire, Peek, Acquire, Reset, Put, Put} {
		b.AddString("k", Call{Op: op, Limit: l})
	}
	cmds := b.Build(context.Background(), BatchKeys) // [3 calls] [DEL] [2 calls]
	wrong := replyErr("WRONGTYPE …")
	cmds[0].SetVal([]any{"a", wrong, "c"})
	cmds[1].SetVal(int64(1))
	cmds[2].SetVal([]any{int64(1)})
	for i, want := range []struct {
		v   any
		err error
	}{{"a", nil}, {nil, wrong}, {"c", nil}, {int64(1), nil}, {int64(1), nil}, {nil, ErrBadReply}} {
		v, err := b.Reply(i)
		if v != want.v || !errors.Is(err, want.err) {
			t.Errorf("Reply(%d) = %v, %v; want %v, %v", i, v, err, want.v, want.err)
		}
	}
	cmds[0].SetErr(context.DeadlineExceeded)
	if _, err := b.Reply(1); err != context.DeadlineExceeded {
		t.Errorf("Reply(1) of a failed command: %v", err)
	}
}

// TestSendReloadsOnNoScript: against a real Redis without the script,
// Send answers every call, sending the script (EVAL) once and EVALSHA for
// the rest; with the script loaded it sends no EVAL. A key of another type
// fails its own call only.
func TestSendReloadsOnNoScript(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(&redis.Options{MaxRetries: -1, ContextTimeoutEnabled: true})
	for _, k := range []string{"tb:str64", "tb:str1"} {
		if err := rdb.Set(ctx, k, "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	l := bucket.Limit{Capacity: 10, Rate: 0.001}
	var b Batch
	for round, want := range []struct {
		evals     int
		remaining int64
	}{{1, 7}, {0, 4}} {
		for _, per := range []int{BatchKeys, 1} {
			if want.evals > 0 {
				if err := rdb.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			b.Reset("tb:")
			var keys []string
			for _, key := range []string{"a", "str", "b", "c", "c", "str"} {
				keys = append(keys, fmt.Sprint(key, per), fmt.Sprint(key, per))
			}
			for i, key := range keys {
				c := Call{Op: Acquire, Limit: l, Cost: 1.5, At: RedisTime}
				if i >= 8 {
					c.Op = Peek // of the key "c" after 2 acquires, and of the string
				}
				b.AddString(key, c)
			}
			b.Build(ctx, per)
			if evals := b.Send(ctx, rdb); evals != want.evals {
				t.Fatalf("round %d, per %d: %d EVAL, want %d", round, per, evals, want.evals)
			}
			for i, key := range keys {
				v, err := b.Reply(i)
				if strings.HasPrefix(key, "str") {
					if Classify(err) != WrongType {
						t.Fatalf("round %d, per %d, call %d on %s: %v, %v; want WRONGTYPE", round, per, i, key, v, err)
					}
					continue
				}
				remaining := want.remaining + int64(1-i%2) // after the first or the second acquire
				if i >= 8 {
					remaining = want.remaining - 2 // a peek of cost 1.5 after both
				}
				d, err := ParseDecision(v)
				if err != nil || !d.Allowed || d.Remaining != remaining {
					t.Fatalf("round %d, per %d, call %d: %+v, %v", round, per, i, d, err)
				}
			}
		}
		if err := Load(ctx, rdb); err != nil {
			t.Fatalf("Load: %v", err)
		}
	}
}

// TestReadingRepliesAllocatesNothing: store mode reads every operation's
// reply this way, so a healthy Redis's answers cost no allocation here.
func TestReadingRepliesAllocatesNothing(t *testing.T) {
	var b Batch
	b.Reset("tb:")
	l := bucket.Limit{Capacity: 10, Rate: 1}
	b.AddString("a", Call{Op: Acquire, Limit: l, Cost: 1, At: RedisTime})
	b.AddString("b", Call{Op: Peek, Limit: l, Cost: 1, At: RedisTime})
	cmds := b.Build(context.Background(), BatchKeys)
	reply := []any{int64(1), int64(9), int64(0), int64(1000)}
	cmds[0].SetVal([]any{reply, reply})
	allocs := testing.AllocsPerRun(100, func() {
		for i := range 2 {
			v, err := b.Reply(i)
			if Classify(err) != None {
				t.Fatal(err)
			}
			if d, err := ParseDecision(v); err != nil || d.Remaining != 9 {
				t.Fatal(d, err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per reading of two replies, want 0", allocs)
	}
}

// TestSendGroups: an all-or-nothing group is one script command with all
// its keys, on its own (per 1, as on a cluster) or with the calls around
// it (BatchKeys); its replies are one per key, and a Redis without the
// script gets it by EVAL as for any command.
func TestSendGroups(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(&redis.Options{MaxRetries: -1, ContextTimeoutEnabled: true})
	l, one := bucket.Limit{Capacity: 10, Rate: 0.001}, bucket.Limit{Capacity: 1, Rate: 0.001}
	var b Batch
	for _, per := range []int{BatchKeys, 1} {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		b.Reset(fmt.Sprint("tb:", per, ":"))
		b.AddString("a", Call{Op: Acquire, Limit: l, Cost: 1, At: RedisTime})
		for range 2 { // the second group is denied: "one" is empty
			b.AddString("a", Call{Op: AcquireAll, Limit: l, Cost: 1, At: RedisTime, Group: 3})
			b.AddString("b", Call{Op: AcquireAll, Limit: l, Cost: 1, At: RedisTime})
			b.AddString("one", Call{Op: AcquireAll, Limit: one, Cost: 1, At: RedisTime})
		}
		b.AddString("a", Call{Op: Peek, Limit: l, Cost: 1, At: RedisTime})
		cmds := b.Build(ctx, per)
		if want := map[int]int{BatchKeys: 1, 1: 4}[per]; len(cmds) != want {
			t.Fatalf("per %d: %d commands, want %d", per, len(cmds), want)
		}
		if evals := b.Send(ctx, rdb); evals != 1 {
			t.Fatalf("per %d: %d EVAL, want 1", per, evals)
		}
		for i, want := range []struct {
			allowed   bool
			remaining int64
		}{{true, 9}, {true, 8}, {true, 9}, {true, 0}, {true, 8}, {true, 9}, {false, 0}, {true, 7}} {
			v, err := b.Reply(i)
			d, perr := ParseDecision(v)
			if err != nil || perr != nil || d.Allowed != want.allowed || d.Remaining != want.remaining {
				t.Fatalf("per %d, call %d: %+v (%v, %v), want allowed %v with %d left", per, i, d, err, perr, want.allowed, want.remaining)
			}
		}
	}
}
