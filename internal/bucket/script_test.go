package bucket_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/redisscript"
	"github.com/bucketd/bucketd/internal/redistest"
)

// Tests without Redis.

func TestScriptSHA1(t *testing.T) {
	sum := sha1.Sum([]byte(bucket.Script))
	if got := hex.EncodeToString(sum[:]); got != bucket.ScriptSHA1 {
		t.Fatalf("ScriptSHA1 = %s, want %s", bucket.ScriptSHA1, got)
	}
	if !strings.Contains(bucket.Script, "KEYS[1]") {
		t.Fatal("Script does not look like the embedded tokenbucket.lua")
	}
}

// argv returns the ARGV of one call as bucketd's Redis client
// (internal/redisscript) encodes it, for the tests that send calls by hand
// next to other commands, under EVALSHA_RO or malformed.
func argv(c redisscript.Call) []any {
	var b redisscript.Batch
	b.Reset("")
	b.AddString("k", c)
	args := b.Build(context.Background(), 1)[0].Args()[4:] // after EVALSHA sha 1 k
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = *a.(*string)
	}
	return out
}

func acquireArgs(l bucket.Limit, cost float64, now int64) []any {
	return argv(redisscript.Call{Op: redisscript.Acquire, Limit: l, Cost: cost, At: now})
}

func peekArgs(l bucket.Limit, cost float64, now int64) []any {
	return argv(redisscript.Call{Op: redisscript.Peek, Limit: l, Cost: cost, At: now})
}

func putArgs(l bucket.Limit, s bucket.State) []any {
	return argv(redisscript.Call{Op: redisscript.Put, Limit: l, State: s})
}

func delArgs(ts int64) []any {
	return argv(redisscript.Call{Op: redisscript.Del, At: ts})
}

// The bounds of the PEXPIRE the script sets (its ttl_ms).
const (
	// minTTLMillis: Redis expires a key only once its millisecond clock is
	// past the deadline, so never early, except that PEXPIRE 1 deletes the
	// key at once when the millisecond ticks inside the command.
	minTTLMillis int64 = 2
	// maxTTLMillis: 10 years (of 365 days), so that a tiny rate does not
	// ask Redis for an expiry it rejects.
	maxTTLMillis int64 = 10 * 365 * 24 * 60 * 60 * 1000
)

// ttlMillis is the PEXPIRE the differential tests expect of a write that
// stores s at now under l: the time until s is refilled, rounded up, in
// [minTTLMillis, maxTTLMillis], with the script's float64 operations in
// the script's order.
func ttlMillis(l bucket.Limit, s bucket.State, now int64) int64 {
	ms := float64((l.Capacity-s.Tokens)/l.Rate*1000) + float64(s.Last-now)/1000
	if !(ms < float64(maxTTLMillis)) {
		return maxTTLMillis
	}
	ms = math.Ceil(ms)
	if ms < float64(minTTLMillis) {
		return minTTLMillis
	}
	return int64(ms)
}

// TestTTLMillis pins the expectation down on worked figures.
func TestTTLMillis(t *testing.T) {
	l := bucket.Limit{Capacity: 10, Rate: 4}
	for _, tc := range []struct {
		l    bucket.Limit
		s    bucket.State
		now  int64
		want int64
	}{
		{l, bucket.State{Tokens: 2, Last: 100}, 100, 2000},
		{l, bucket.State{Tokens: 2, Last: 100_100}, 100, 2100},                        // stamped in the future: later
		{l, bucket.State{Tokens: 10 - 1e-12, Last: 0}, 0, minTTLMillis},               // a hair short of full: at least 2
		{l, bucket.State{Tokens: 10 - 0.002, Last: 0}, 0, minTTLMillis},               // 0.5 ms
		{l, bucket.State{Tokens: 1, Last: 0}, 0, 2250},                                // 9/4 s
		{bucket.Limit{Capacity: 1e15, Rate: 1e-300}, bucket.State{}, 0, maxTTLMillis}, // capped, not overflowing
		{bucket.Limit{Capacity: 1, Rate: 1e15}, bucket.State{}, 0, 2},
		{l, bucket.State{Tokens: 10 - 0.0121, Last: 0}, 0, 4}, // 3.025 ms
	} {
		if got := ttlMillis(tc.l, tc.s, tc.now); got != tc.want {
			t.Errorf("ttlMillis(%+v, %+v, %d) = %d, want %d", tc.l, tc.s, tc.now, got, tc.want)
		}
	}
}

// Tests against a real redis-server.

// pttlSlackMs bounds how far PTTL may be below the TTL when it is read in a
// separate command after the script: Redis's clock moves on between the
// two, by far less than this even on a loaded machine.
const pttlSlackMs = 50

// scriptServer starts redis-server and loads the script.
func scriptServer(t *testing.T) *redis.Client {
	t.Helper()
	rdb := redistest.Start(t).Client()
	if sha, err := rdb.ScriptLoad(context.Background(), bucket.Script).Result(); err != nil || sha != bucket.ScriptSHA1 {
		t.Fatalf("SCRIPT LOAD = %q, %v; want %s", sha, err, bucket.ScriptSHA1)
	}
	return rdb
}

func evalsha(t *testing.T, rdb *redis.Client, key string, args []any) any {
	t.Helper()
	v, err := rdb.EvalSha(context.Background(), bucket.ScriptSHA1, []string{key}, args...).Result()
	if err != nil {
		t.Fatalf("EVALSHA %s %v: %v", key, args, err)
	}
	return v
}

// TestScriptPutDelGuards: an older state never overwrites a newer one, and
// a del older than the stored state deletes nothing.
func TestScriptPutDelGuards(t *testing.T) {
	rdb := scriptServer(t)
	l := bucket.Limit{Capacity: 10, Rate: 1}
	const k = "guard"
	steps := []struct {
		name    string
		args    []any
		applied int64
		want    bucket.State // Tokens < 0: no key
	}{
		{"put into nothing", putArgs(l, bucket.State{Tokens: 3, Last: 1000}), 1, bucket.State{Tokens: 3, Last: 1000}},
		{"older put is skipped", putArgs(l, bucket.State{Tokens: 7, Last: 999}), 0, bucket.State{Tokens: 3, Last: 1000}},
		{"put with the same ts wins", putArgs(l, bucket.State{Tokens: 4.25, Last: 1000}), 1, bucket.State{Tokens: 4.25, Last: 1000}},
		{"newer put wins", putArgs(l, bucket.State{Tokens: 0.1, Last: 2000}), 1, bucket.State{Tokens: 0.1, Last: 2000}},
		{"older full put deletes nothing", putArgs(l, bucket.State{Tokens: 10, Last: 1999}), 0, bucket.State{Tokens: 0.1, Last: 2000}},
		{"older del is skipped", delArgs(1999), 0, bucket.State{Tokens: 0.1, Last: 2000}},
		{"del with the same ts deletes", delArgs(2000), 1, bucket.State{Tokens: -1}},
		{"del of nothing", delArgs(1), 1, bucket.State{Tokens: -1}},
		{"put again", putArgs(l, bucket.State{Tokens: 5, Last: 3000}), 1, bucket.State{Tokens: 5, Last: 3000}},
		{"newer full put deletes", putArgs(l, bucket.State{Tokens: 10, Last: 3001}), 1, bucket.State{Tokens: -1}},
		{"put more than capacity is full", putArgs(l, bucket.State{Tokens: 11, Last: 4000}), 1, bucket.State{Tokens: -1}},
	}
	for _, st := range steps {
		if got := evalsha(t, rdb, k, st.args); got != st.applied {
			t.Fatalf("%s: reply %v, want %d", st.name, got, st.applied)
		}
		s, ok := redistest.StoredBucket(t, rdb, k)
		if st.want.Tokens < 0 {
			if ok {
				t.Fatalf("%s: key holds %+v, want none", st.name, s)
			}
			continue
		}
		if !ok || s != st.want {
			t.Fatalf("%s: stored %+v (exists %v), want %+v", st.name, s, ok, st.want)
		}
	}
	// The guard also protects against acquires replayed late: a state
	// written by an acquire at ts 5000 is not overwritten by a put at 4999.
	evalsha(t, rdb, k, acquireArgs(l, 4, 5000))
	if got := evalsha(t, rdb, k, putArgs(l, bucket.State{Tokens: 1, Last: 4999})); got != int64(0) {
		t.Fatalf("put older than an acquire: reply %v, want 0", got)
	}
	if s, _ := redistest.StoredBucket(t, rdb, k); s != (bucket.State{Tokens: 6, Last: 5000}) {
		t.Fatalf("after the skipped put: %+v, want 6 tokens at 5000", s)
	}
}

// TestScriptSaturatedReply: a field at 2^63-1 reaches Go exactly, as the
// string "9223372036854775807", and equals the Go math.
func TestScriptSaturatedReply(t *testing.T) {
	rdb := scriptServer(t)
	l := bucket.Limit{Capacity: 1e15, Rate: 1e-300}
	const now = 1_700_000_000_000_000
	s, want := bucket.Acquire(bucket.State{}, false, l, 1, now)
	v := evalsha(t, rdb, "sat", acquireArgs(l, 1, now))
	if fmt.Sprint(v) != "[1 999999999999999 0 9223372036854775807]" || v.([]any)[3] != "9223372036854775807" {
		t.Fatalf("reply %#v, want [1 999999999999999 0 \"9223372036854775807\"]", v)
	}
	if got, err := redisscript.ParseDecision(v); err != nil || got != want || got.ResetAfterMs != math.MaxInt64 {
		t.Fatalf("ParseDecision = %+v, %v; Go says %+v", got, err, want)
	}
	// Denied: retry_after_ms saturates too.
	_, want = bucket.Acquire(s, true, l, 1e15, now)
	got, err := redisscript.ParseDecision(evalsha(t, rdb, "sat", acquireArgs(l, 1e15, now)))
	if err != nil || got != want || got.RetryAfterMs != math.MaxInt64 {
		t.Fatalf("denied: %+v, %v; Go says %+v", got, err, want)
	}
	// The expiry is capped instead of overflowing.
	if ms, err := rdb.PTTL(context.Background(), "sat").Result(); err != nil || ms.Milliseconds() < maxTTLMillis-pttlSlackMs {
		t.Fatalf("PTTL = %v, %v; want about %d ms", ms, err, maxTTLMillis)
	}
}

// TestScriptRedisTime: without ARGV[5] the script reads Redis TIME and
// stores it as ts; the math is the same as Go's at that time.
func TestScriptRedisTime(t *testing.T) {
	ctx := context.Background()
	rdb := scriptServer(t)
	l := bucket.Limit{Capacity: 10, Rate: 0.5}
	before, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	got, err := redisscript.ParseDecision(evalsha(t, rdb, "clock", acquireArgs(l, 3, redisscript.RedisTime)))
	if want := (bucket.Decision{Allowed: true, Remaining: 7, ResetAfterMs: 6000}); err != nil || got != want {
		t.Fatalf("first acquire: %+v, %v; want %+v", got, err, want)
	}
	after, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	s1, ok := redistest.StoredBucket(t, rdb, "clock")
	if !ok || s1.Tokens != 7 || s1.Last < before.UnixMicro() || s1.Last > after.UnixMicro() {
		t.Fatalf("stored %+v (exists %v), want 7 tokens at a ts in [%d, %d]", s1, ok, before.UnixMicro(), after.UnixMicro())
	}
	// A second call refills by whatever Redis time passed: Go, given the
	// ts the script stored, computes the very same tokens.
	got, err = redisscript.ParseDecision(evalsha(t, rdb, "clock", acquireArgs(l, 1, redisscript.RedisTime)))
	if err != nil {
		t.Fatal(err)
	}
	s2, ok := redistest.StoredBucket(t, rdb, "clock")
	if !ok || s2.Last < s1.Last {
		t.Fatalf("second acquire stored %+v (exists %v) after %+v", s2, ok, s1)
	}
	wantState, want := bucket.Acquire(s1, true, l, 1, s2.Last)
	if got != want || s2 != wantState {
		t.Fatalf("second acquire: reply %+v state %+v; Go at ts %d: %+v %+v", got, s2, s2.Last, want, wantState)
	}
	// Peek with Redis TIME writes nothing.
	if _, err := redisscript.ParseDecision(evalsha(t, rdb, "clock", peekArgs(l, 1, redisscript.RedisTime))); err != nil {
		t.Fatal(err)
	}
	if s3, _ := redistest.StoredBucket(t, rdb, "clock"); s3 != s2 {
		t.Fatalf("peek changed the state %+v -> %+v", s2, s3)
	}
}

// TestScriptStoredFormat: tokens are written with %.17g, whatever the Redis
// version would do with a bare Lua number, and ts as a plain integer.
func TestScriptStoredFormat(t *testing.T) {
	rdb := scriptServer(t)
	l := bucket.Limit{Capacity: 1, Rate: 1}
	evalsha(t, rdb, "fmt", putArgs(l, bucket.State{Tokens: 0.1, Last: 1_700_000_000_000_000}))
	h, err := rdb.HGetAll(context.Background(), "fmt").Result()
	if err != nil || h["tokens"] != "0.10000000000000001" || h["ts"] != "1700000000000000" {
		t.Fatalf("stored %v, %v; want tokens 0.10000000000000001 and ts 1700000000000000", h, err)
	}
}

// TestScriptCeilMillisEdges runs waits close to whole milliseconds, where
// ceilMillis snaps or rounds up, through Go and the script: an empty bucket
// asked for cost a answers retry_after_ms = ceilMillis(a, rate) exactly.
func TestScriptCeilMillisEdges(t *testing.T) {
	rdb := scriptServer(t)
	const ts = 1_000_000
	n := 0
	for _, rate := range []float64{1, 0.5, 3, 1e-3, 1e9, 1e-9} {
		l := bucket.Limit{Capacity: 1e15, Rate: rate}
		for _, k := range []float64{1, 3900, 1e4, 1e6, 1e9, 1e10, 1e12} {
			for _, d := range []float64{0, 1e-12, 5e-10, 1e-9, 1e-7, 9e-7, 1e-6, 1.1e-6, 2e-6, 1e-5, 1e-4, 0.4999999, 0.5, 0.5000001} {
				for _, ms := range []float64{k + d, k - d} {
					cost := ms / 1000 * rate // tokens that take about ms to refill
					if !(cost > 0 && cost <= 1e15) {
						continue
					}
					key := "edge:" + strconv.Itoa(n)
					n++
					empty := bucket.State{Tokens: 0, Last: ts}
					evalsha(t, rdb, key, putArgs(l, empty))
					want := bucket.Peek(empty, true, l, cost, ts)
					got, err := redisscript.ParseDecision(evalsha(t, rdb, key, peekArgs(l, cost, ts)))
					if err != nil || got != want {
						t.Errorf("rate %v cost %v (about %v ms): script %+v, %v; Go %+v", rate, cost, ms, got, err, want)
					}
				}
			}
		}
	}
	t.Logf("%d cases", n)
}

// TestScriptBadInput: every bad argument is an error reply naming it, and
// changes nothing.
func TestScriptBadInput(t *testing.T) {
	ctx := context.Background()
	rdb := scriptServer(t)
	l := bucket.Limit{Capacity: 10, Rate: 1}
	evalsha(t, rdb, "bad", acquireArgs(l, 4, 1000))
	before, _ := redistest.StoredBucket(t, rdb, "bad")
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"nan", "1", "1", "acquire", "1000"}, "invalid capacity"},
		{[]any{"inf", "1", "1", "acquire", "1000"}, "invalid capacity"},
		{[]any{"0", "1", "1", "acquire", "1000"}, "invalid capacity"},
		{[]any{"1e16", "1", "1", "acquire", "1000"}, "invalid capacity"},
		{[]any{"ten", "1", "1", "acquire", "1000"}, "invalid capacity"},
		{[]any{}, "invalid capacity"},
		{[]any{"10", "-1", "1", "acquire", "1000"}, "invalid rate"},
		{[]any{"10", "", "1", "acquire", "1000"}, "invalid rate"},
		{[]any{"10", "1", "-1", "acquire", "1000"}, "invalid cost"},
		{[]any{"10", "1", "nan", "peek", "1000"}, "invalid cost"},
		{[]any{"10", "1", "1e16", "acquire", "1000"}, "invalid cost"},
		{[]any{"10", "1", "1", "acquire", "1.5"}, "invalid now"},
		{[]any{"10", "1", "1", "acquire", "-1"}, "invalid now"},
		{[]any{"10", "1", "1", "acquire", "9007199254740992"}, "invalid now"},
		{[]any{"10", "1", "1", "take", "1000"}, "invalid op"},
		{[]any{"10", "1", "", "put", "", "1"}, "invalid ts"},
		{[]any{"10", "1", "", "put", "2000", "-1"}, "invalid tokens"},
		{[]any{"10", "1", "", "put", "2000", "inf"}, "invalid tokens"},
		{[]any{"10", "1", "", "put", "2000"}, "invalid tokens"},
		{[]any{"", "", "", "del", "x"}, "invalid ts"},
	} {
		err := rdb.EvalSha(ctx, bucket.ScriptSHA1, []string{"bad"}, tc.args...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "ERR "+tc.want) {
			t.Errorf("ARGV %q: error %v, want ERR %s...", tc.args, err, tc.want)
		}
	}
	if after, ok := redistest.StoredBucket(t, rdb, "bad"); !ok || after != before {
		t.Fatalf("bad input changed the state %+v -> %+v", before, after)
	}
	// Defaults: cost 1 and op acquire.
	got, err := redisscript.ParseDecision(evalsha(t, rdb, "defaults", []any{"10", "1"}))
	if err != nil || got != (bucket.Decision{Allowed: true, Remaining: 9, ResetAfterMs: 1000}) {
		t.Fatalf("ARGV 10 1: %+v, %v", got, err)
	}
}

// TestScriptRunOnCluster: the script touches only KEYS[1], so it runs on a
// Redis Cluster through go-redis' Script.Run (EVALSHA, falling back to EVAL
// on a node that has not loaded it), and answers as Go does.
func TestScriptRunOnCluster(t *testing.T) {
	t.Parallel() // a Redis Cluster of its own, which takes 2 s to form
	ctx := context.Background()
	cc := redistest.StartCluster(t, 3).Client()
	script := redis.NewScript(bucket.Script)
	if script.Hash() != bucket.ScriptSHA1 {
		t.Fatalf("go-redis hashes the script to %s, bucket says %s", script.Hash(), bucket.ScriptSHA1)
	}
	l := bucket.Limit{Capacity: 5, Rate: 2}
	model := map[string]bucket.State{}
	now := int64(1_700_000_000_000_000)
	for i := range 60 {
		key := "cluster:" + strconv.Itoa(i%20)
		now += 100_000
		st, ok := model[key]
		next, want := bucket.Acquire(st, ok, l, 2, now)
		if next.Tokens >= l.Capacity {
			delete(model, key)
		} else {
			model[key] = next
		}
		v, err := script.Run(ctx, cc, []string{key}, acquireArgs(l, 2, now)...).Result()
		if err != nil {
			t.Fatalf("Run on %s: %v", key, err)
		}
		if got, err := redisscript.ParseDecision(v); err != nil || got != want {
			t.Fatalf("call %d on %s: %+v, %v; Go %+v", i, key, got, err, want)
		}
	}
}

// TestScriptPeekIsReadOnly: peeks (and cost 0) call no write command, so
// they run under EVALSHA_RO (on a replica, say); an acquire does not.
func TestScriptPeekIsReadOnly(t *testing.T) {
	ctx := context.Background()
	rdb := scriptServer(t)
	l := bucket.Limit{Capacity: 10, Rate: 1}
	evalsha(t, rdb, "ro", acquireArgs(l, 4, 1000))
	s, _ := redistest.StoredBucket(t, rdb, "ro")
	for _, tc := range []struct {
		args []any
		cost float64
	}{
		{peekArgs(l, 3, 2000), 3},
		{acquireArgs(l, 0, 2000), 0},
	} {
		v, err := rdb.EvalShaRO(ctx, bucket.ScriptSHA1, []string{"ro"}, tc.args...).Result()
		if err != nil {
			t.Fatalf("EVALSHA_RO %v: %v", tc.args, err)
		}
		if got, err := redisscript.ParseDecision(v); err != nil || got != bucket.Peek(s, true, l, tc.cost, 2000) {
			t.Fatalf("EVALSHA_RO %v: %+v, %v; Go %+v", tc.args, got, err, bucket.Peek(s, true, l, tc.cost, 2000))
		}
	}
	if err := rdb.EvalShaRO(ctx, bucket.ScriptSHA1, []string{"ro"}, peekArgs(l, 1, redisscript.RedisTime)...).Err(); err != nil {
		t.Fatalf("EVALSHA_RO peek with Redis TIME: %v", err)
	}
	if err := rdb.EvalShaRO(ctx, bucket.ScriptSHA1, []string{"ro"}, acquireArgs(l, 1, 3000)...).Err(); err == nil {
		t.Fatal("an acquire ran under EVALSHA_RO")
	}
	if after, _ := redistest.StoredBucket(t, rdb, "ro"); after != s {
		t.Fatalf("state changed %+v -> %+v", s, after)
	}
}
