package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/testkit"
)

// Tests without Redis.

func TestNewRefusesClientsThatMayReplay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		want   string
	}{
		{"nil", nil, "Config.Client is required"},
		{"default retries", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), "MaxRetries: -1"},
		{"no context timeouts", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}), "ContextTimeoutEnabled: true"},
		{"cluster with retries", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: 2, ContextTimeoutEnabled: true}), "MaxRetries: -1"},
		{"cluster without context timeouts", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), "ContextTimeoutEnabled: true"},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), "*redis.Client or a *redis.ClusterClient"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.client != nil {
				defer tc.client.Close()
			}
			s, err := New(Config{Client: tc.client})
			if err == nil {
				s.Close()
				t.Fatal("New accepted the client")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
	o, err := ClientOptions("redis://:secret@127.0.0.1:1/3")
	if err != nil {
		t.Fatalf("ClientOptions: %v", err)
	}
	if o.Password != "secret" || o.DB != 3 {
		t.Fatalf("ClientOptions lost the URL's password or db: %+v", o)
	}
	for _, c := range []redis.UniversalClient{
		redis.NewClient(o),
		redis.NewClusterClient(ClusterClientOptions([]string{"127.0.0.1:1"})),
	} {
		s, err := New(Config{Client: c})
		if err != nil {
			t.Fatalf("New with the package's options (%T): %v", c, err)
		}
		s.Close()
		c.Close()
	}
	if _, err := ClientOptions("http://x"); err == nil {
		t.Fatal("ClientOptions accepted http://")
	}
}

func TestPolicyDecisions(t *testing.T) {
	if d := FailOpenDecision(); d != (bucket.Decision{Allowed: true}) {
		t.Fatalf("FailOpenDecision = %+v", d)
	}
	for _, tc := range []struct {
		timeout time.Duration
		want    int64
	}{
		{50 * time.Millisecond, 50},
		{1500 * time.Microsecond, 2},
		{time.Microsecond, 1},
		{time.Second, 1000},
	} {
		if d := FailClosedDecision(tc.timeout); d != (bucket.Decision{RetryAfterMs: tc.want}) {
			t.Errorf("FailClosedDecision(%v) = %+v, want retry %d", tc.timeout, d, tc.want)
		}
	}
}

// Tests against one real redis-server.

// TestSingleStore: a burst on capacity 10 gives 10 allowed then denied, each
// answer and each stored state exactly the Go math at the time the script
// used (the stored ts); peeks change nothing; resets count like DEL; keys
// are HASHes {tokens, ts} under the prefix with a PTTL.
func TestSingleStore(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(storeOptions())
	s := startStore(t, rdb, Config{Prefix: "tb:", Timeout: exactTimeout})
	loadScript(t, s)

	l := bucket.Limit{Capacity: 10, Rate: 0.001}
	const key, stored = "user:1", "tb:user:1"
	var state bucket.State
	exists := false
	for i := range 13 {
		r := run1(t, s, acquireOp(key, l, 1))
		if r.Err != nil {
			t.Fatalf("acquire %d: %+v", i, r)
		}
		got, ok := redistest.StoredBucket(t, rdb, stored)
		if !ok {
			t.Fatalf("acquire %d: no key %s", i, stored)
		}
		// got.Last is the now the script read from Redis TIME.
		var want bucket.Decision
		state, want = bucket.Acquire(state, exists, l, 1, got.Last)
		exists = true
		if r.Decision != want {
			t.Fatalf("acquire %d: %+v, Go math at ts %d says %+v", i, r.Decision, got.Last, want)
		}
		if got != state {
			t.Fatalf("acquire %d: stored %+v, Go math says %+v", i, got, state)
		}
		if allowed := i < 10; r.Decision.Allowed != allowed {
			t.Fatalf("acquire %d: allowed %v, want %v", i, r.Decision.Allowed, allowed)
		}
	}

	// The stored form.
	if typ, err := rdb.Type(ctx, stored).Result(); err != nil || typ != "hash" {
		t.Fatalf("TYPE %s = %q, %v; want hash", stored, typ, err)
	}
	if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Fatalf("the key without the prefix exists (%d, %v)", n, err)
	}
	// The time to refill, as the script computes its PEXPIRE (no clamp
	// applies at this limit), as of an instant read before PTTL: the PTTL
	// read after it can only be smaller (plus the script's rounding up),
	// however long the reads take on a busy machine.
	now := redisMicros(t, rdb)
	pttl, err := rdb.PTTL(ctx, stored).Result()
	if err != nil {
		t.Fatalf("PTTL: %v", err)
	}
	ttl := int64(math.Ceil((l.Capacity-state.Tokens)/l.Rate*1000 + float64(state.Last-now)/1000))
	if ms := pttl.Milliseconds(); ms <= 0 || ms > ttl+1 || ms < ttl-1000 {
		t.Fatalf("PTTL %d ms, want about %d (time to refill)", ms, ttl)
	}

	// Peeks answer what an acquire would, and change nothing.
	before := redisMicros(t, rdb)
	p := runOps(t, s, peekOp(key, l, 1), peekOp(key, l, 0.5), peekOp(key, l, 11))
	after := redisMicros(t, rdb)
	for i, cost := range []float64{1, 0.5, 11} {
		lo, hi := bucket.Peek(state, true, l, cost, before), bucket.Peek(state, true, l, cost, after)
		d := p[i].Decision
		if d.Allowed != lo.Allowed || d.Remaining != lo.Remaining ||
			d.RetryAfterMs > lo.RetryAfterMs || d.RetryAfterMs < hi.RetryAfterMs ||
			d.ResetAfterMs > lo.ResetAfterMs || d.ResetAfterMs < hi.ResetAfterMs {
			t.Fatalf("peek cost %v: %+v, Go math says %+v .. %+v", cost, d, lo, hi)
		}
	}
	if p[2].Decision.RetryAfterMs != -1 {
		t.Fatalf("peek with cost > capacity: retry %d, want -1", p[2].Decision.RetryAfterMs)
	}
	if got, _ := redistest.StoredBucket(t, rdb, stored); got != state {
		t.Fatalf("a peek changed the state: %+v, want %+v", got, state)
	}
	if n, _ := rdb.Exists(ctx, "tb:never").Result(); n != 0 {
		t.Fatal("precondition: tb:never exists")
	}
	if d := run1(t, s, peekOp("never", l, 1)).Decision; d != (bucket.Decision{Allowed: true, Remaining: 9, ResetAfterMs: 1_000_000}) {
		t.Fatalf("peek of a new key: %+v", d)
	}
	if n, _ := rdb.Exists(ctx, "tb:never").Result(); n != 0 {
		t.Fatal("a peek created a key")
	}

	// Resets count like DEL: a key named twice counts once, a missing key
	// not at all.
	rs := runOps(t, s, resetOp(key), resetOp(key), resetOp("missing"))
	if !rs[0].Removed || rs[1].Removed || rs[2].Removed {
		t.Fatalf("reset results %+v, want removed, not, not", rs)
	}
	if n, _ := rdb.Exists(ctx, stored).Result(); n != 0 {
		t.Fatal("the key survived TB.RESET")
	}
	if d := run1(t, s, acquireOp(key, l, 1)).Decision; !d.Allowed || d.Remaining != 9 {
		t.Fatalf("acquire after reset: %+v, want a full bucket", d)
	}

	// CL.THROTTLE is answered without Redis; WRONGTYPE reaches the client.
	if err := rdb.Set(ctx, "tb:str", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rs = runOps(t, s, decide.Request{Kind: decide.Throttle, Key: []byte("x")}, acquireOp("str", l, 1))
	if rs[0].Err != decide.ErrUnsupported || rs[1].Err != decide.ErrWrongType {
		t.Fatalf("throttle, wrong type: %+v", rs)
	}
	// In one batch command, the wrong type answers for its own operations
	// only.
	rs = runOps(t, s, acquireOp("a", l, 1), acquireOp("str", l, 1), peekOp("str", l, 1), acquireOp("a", l, 2))
	if rs[0].Decision.Remaining != 9 || rs[1].Err != decide.ErrWrongType || rs[2].Err != decide.ErrWrongType || rs[3].Decision.Remaining != 7 {
		t.Fatalf("batch around a wrong type: %+v", rs)
	}
	if n, _ := rdb.Exists(ctx, "tb:a").Result(); n != 1 {
		t.Fatal("the batch's acquires were not stored")
	}
	rdb.Del(ctx, "tb:a")

	st := s.Stats()
	if st.Allowed != 13 || st.Denied != 3 || st.Peeks != 4 || st.Resets != 1 {
		t.Fatalf("stats %+v, want 13 allowed, 3 denied, 4 peeks, 1 reset", st)
	}
	if s.Errors() != 0 || s.Degraded() != 0 {
		t.Fatalf("errors %d, degraded %d; want none", s.Errors(), s.Degraded())
	}
	// DBSIZE: tb:user:1 and tb:str.
	testkit.Eventually(t, 5*time.Second, "Stats().Buckets == 2", func() bool { return s.Stats().Buckets == 2 })
	if st := s.Stats(); st.Shards != 0 || st.TableBytes != 0 {
		t.Fatalf("stats %+v, want no shards and no tables", st)
	}
}

// TestCallerManyOps: one Run with more operations than MaxBatch, on many
// keys, answers all of them in order.
func TestCallerManyOps(t *testing.T) {
	srv := redistest.Start(t)
	s := startStore(t, srv.Client(storeOptions()), Config{Prefix: "tb:", MaxBatch: 16, Timeout: exactTimeout})
	loadScript(t, s)
	c := s.NewCaller()
	l := bucket.Limit{Capacity: 3, Rate: 0.001}
	for round := range 3 {
		for i := range 100 {
			c.Add(acquireOp(fmt.Sprintf("k%d", i%50), l, 1))
		}
		rs, err := c.Run()
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rs {
			// Each key is hit twice per round: 2*round+i/50 earlier hits.
			hits := 2*round + i/50
			if want := hits < 3; r.Decision.Allowed != want {
				t.Fatalf("round %d op %d: %+v, want allowed %v", round, i, r.Decision, want)
			}
		}
	}
	if rs, err := c.Run(); err != nil || len(rs) != 0 {
		t.Fatalf("empty Run: %v, %v", rs, err)
	}
}

// TestNoScriptReloadsOnce: after SCRIPT FLUSH the first call gets NOSCRIPT,
// the store sends the script once (EVAL), and the decision is right; the
// calls after use EVALSHA again.
func TestNoScriptReloadsOnce(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(storeOptions())
	s := startStore(t, rdb, Config{Prefix: "tb:", Timeout: exactTimeout})
	l := bucket.Limit{Capacity: 5, Rate: 0.001}
	if d := run1(t, s, acquireOp("a", l, 1)).Decision; !d.Allowed || d.Remaining != 4 {
		t.Fatalf("first acquire (script not loaded): %+v", d)
	}
	if s.ScriptLoads() != 1 {
		t.Fatalf("%d script loads, want 1", s.ScriptLoads())
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// Several ops in one pipeline: one EVAL, then EVALSHA behind it.
	rs := runOps(t, s, acquireOp("a", l, 1), acquireOp("a", l, 1), acquireOp("b", l, 2), peekOp("a", l, 1))
	want := []bucket.Decision{{Allowed: true, Remaining: 3}, {Allowed: true, Remaining: 2}, {Allowed: true, Remaining: 3}, {Allowed: true, Remaining: 1}}
	for i, r := range rs {
		if r.Decision.Allowed != want[i].Allowed || r.Decision.Remaining != want[i].Remaining {
			t.Fatalf("op %d after SCRIPT FLUSH: %+v, want %+v", i, r.Decision, want[i])
		}
	}
	if s.ScriptLoads() != 2 {
		t.Fatalf("%d script loads, want 2 (one per flush)", s.ScriptLoads())
	}
	for range 5 {
		run1(t, s, peekOp("a", l, 1))
	}
	if s.ScriptLoads() != 2 || s.Errors() != 0 {
		t.Fatalf("script loads %d, errors %d; want 2, 0", s.ScriptLoads(), s.Errors())
	}
}

// burst fires n acquires of cost 1 at key through each store, from
// goroutines goroutines per store (each with its own Caller, as connections
// have), all released at once, and returns how many were allowed.
func burst(t *testing.T, stores []*Store, goroutines, n int, key string, l bucket.Limit) int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed, failed := 0, 0
	start := make(chan struct{})
	for _, s := range stores {
		for g := range goroutines {
			count := n / goroutines
			if g < n%goroutines {
				count++
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := s.NewCaller()
				<-start
				for range count {
					c.Add(acquireOp(key, l, 1))
					rs, err := c.Run()
					mu.Lock()
					switch {
					case err != nil || rs[0].Err != nil:
						failed++
					case rs[0].Decision.Allowed:
						allowed++
					}
					mu.Unlock()
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if failed > 0 {
		t.Fatalf("%d acquires failed", failed)
	}
	return allowed
}

// TestTwoStoresShareLimits: two Stores ("two bucketd instances") on one
// Redis, 25 goroutines each, 2 x capacity acquires at one key: exactly
// capacity are allowed.
func TestTwoStoresShareLimits(t *testing.T) {
	srv := redistest.Start(t)
	var stores []*Store
	for range 2 {
		s := startStore(t, srv.Client(storeOptions()), Config{Prefix: "tb:", Timeout: exactTimeout})
		loadScript(t, s)
		stores = append(stores, s)
	}
	const capacity = 100
	l := bucket.Limit{Capacity: capacity, Rate: 0.001} // < 1 token of refill during the burst
	if got := burst(t, stores, 25, capacity, "shared", l); got != capacity {
		t.Fatalf("%d of %d acquires allowed, want exactly %d", got, 2*capacity, capacity)
	}
	var sum decide.Stats
	for _, s := range stores {
		st := s.Stats()
		sum.Allowed += st.Allowed
		sum.Denied += st.Denied
		if st.Allowed == 0 || s.Errors() != 0 || s.Degraded() != 0 {
			t.Fatalf("store stats %+v, errors %d, degraded %d: both should have decided, without errors", st, s.Errors(), s.Degraded())
		}
	}
	if sum.Allowed != capacity || sum.Denied != capacity {
		t.Fatalf("allowed %d, denied %d over both stores; want %d each", sum.Allowed, sum.Denied, capacity)
	}
}

// TestClusterSharesLimits: the same against a three-master Redis Cluster,
// on a plain key and on a key with a {hash tag}; keys with one tag land on
// the master that owns the tag's slot. The script is not loaded
// beforehand: each master answers NOSCRIPT once and gets it by EVAL.
func TestClusterSharesLimits(t *testing.T) {
	t.Parallel() // a Redis Cluster of its own, which takes 2 s to form
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	var stores []*Store
	for range 2 {
		stores = append(stores, startStore(t, cl.Client(clusterOptions()), Config{Prefix: "tb:", Timeout: exactTimeout}))
	}
	const capacity = 60
	l := bucket.Limit{Capacity: capacity, Rate: 0.001}
	for _, key := range []string{"shared", "{user1}:a"} {
		if got := burst(t, stores, 25, capacity, key, l); got != capacity {
			t.Fatalf("key %s: %d of %d acquires allowed, want exactly %d", key, got, 2*capacity, capacity)
		}
	}
	if d := run1(t, stores[0], acquireOp("{user1}:b", l, 1)).Decision; !d.Allowed || d.Remaining != capacity-1 {
		t.Fatalf("another key with the tag: %+v", d)
	}
	loads := int64(0)
	for _, s := range stores {
		loads += s.ScriptLoads()
		if s.Errors() != 0 || s.Degraded() != 0 {
			t.Fatalf("errors %d, degraded %d; want none", s.Errors(), s.Degraded())
		}
	}
	// The masters had no script: whichever store came first loaded it.
	if loads == 0 {
		t.Fatal("no script loads, but the masters started without the script")
	}

	// Where the keys are: tb:{user1}:a and tb:{user1}:b on user1's master.
	cc := cl.Client()
	owner, err := cc.MasterForKey(ctx, "user1")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tb:{user1}:a", "tb:{user1}:b"} {
		if n, err := owner.Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Fatalf("%s is not on the master of slot(user1) %s: %d, %v", k, owner.Options().Addr, n, err)
		}
		if slot, err := cc.ClusterKeySlot(ctx, k).Result(); err != nil || slot != int64(redisSlot("user1")) {
			t.Fatalf("CLUSTER KEYSLOT %s = %d, %v", k, slot, err)
		}
	}

	// NOSCRIPT on one node only: flush that master's script cache.
	s := stores[0]
	loads = s.ScriptLoads()
	if err := owner.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if d := run1(t, s, acquireOp("{user1}:b", l, 1)).Decision; !d.Allowed || d.Remaining != capacity-2 {
		t.Fatalf("acquire after SCRIPT FLUSH on its master: %+v", d)
	}
	if got := s.ScriptLoads() - loads; got != 1 {
		t.Fatalf("%d script loads after flushing one master, want 1", got)
	}
	if d := run1(t, s, acquireOp("shared", l, 1)).Decision; d.Allowed {
		t.Fatalf("drained key on another master: %+v", d)
	}

	// DBSIZE summed over the masters: shared, {user1}:a, {user1}:b.
	testkit.Eventually(t, 5*time.Second, "Stats().Buckets == 3", func() bool { return s.Stats().Buckets == 3 })
}

// redisSlot is the store's keySlot of a key given as a string.
func redisSlot(key string) int { return int(keySlot([]byte(key))) }

// Failures: every answer within the timeout, with the configured policy.

// failureBound is how long any answer may take: the timeout plus a margin
// for scheduling under -race.
func failureBound(timeout time.Duration) time.Duration { return 3 * timeout }

// timing is what timedAcquires measured: the slowest answer, and the worst
// stall of the machine meanwhile, measured as how late a 1 ms sleep in
// another goroutine woke up (near 0 on an idle machine; on a machine
// saturated by other work it can reach hundreds of milliseconds, which no
// code can answer faster than).
type timing struct {
	slowest, stall time.Duration
}

// timedAcquires runs n acquires of key through s from goroutines
// goroutines and returns the timing and every result.
func timedAcquires(t *testing.T, s *Store, goroutines, n int, key string) (timing, []decide.Answer) {
	t.Helper()
	stop, stall := make(chan struct{}), make(chan time.Duration)
	go func() {
		var worst time.Duration
		for {
			select {
			case <-stop:
				stall <- worst
				return
			default:
			}
			start := time.Now()
			time.Sleep(time.Millisecond) // measuring the scheduler, not waiting for something
			worst = max(worst, time.Since(start)-time.Millisecond)
		}
	}()
	l := bucket.Limit{Capacity: 10, Rate: 1}
	var mu sync.Mutex
	var tm timing
	var results []decide.Answer
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := s.NewCaller()
			for range n {
				c.Add(acquireOp(key, l, 1))
				start := time.Now()
				rs, err := c.Run()
				took := time.Since(start)
				mu.Lock()
				if err != nil {
					t.Errorf("Run: %v", err)
				} else {
					results = append(results, rs[0])
				}
				tm.slowest = max(tm.slowest, took)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stop)
	tm.stall = <-stall
	return tm, results
}

// checkDegraded checks that every result is the policy's answer and every
// answer came within the bound, plus twice the machine's worst stall (an
// answer needs two goroutines to wake up in time: the one that answers and
// the caller). On an idle machine the stall is about 0.
func checkDegraded(t *testing.T, what string, s *Store, tm timing, rs []decide.Answer, want bucket.Decision) {
	t.Helper()
	for _, r := range rs {
		if r.Decision != want || r.Err != nil {
			t.Fatalf("%s: %+v, want %+v", what, r, want)
		}
	}
	bound := failureBound(s.cfg.Timeout)
	t.Logf("%s: %d answers, slowest %v (timeout %v, bound %v; the machine stalled up to %v meanwhile)",
		what, len(rs), tm.slowest.Round(time.Microsecond), s.cfg.Timeout, bound, tm.stall.Round(time.Microsecond))
	if tm.slowest > bound+2*tm.stall {
		t.Fatalf("%s: an answer took %v, more than %v plus twice the machine's stall of %v", what, tm.slowest, bound, tm.stall)
	}
}

func TestRedisUnreachable(t *testing.T) {
	addr := freeAddr(t) // nothing listens there
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("failOpen=%v", failOpen), func(t *testing.T) {
			o := storeOptions()
			o.Addr = addr
			rdb := redis.NewClient(o)
			defer rdb.Close()
			s := startStore(t, rdb, Config{Prefix: "tb:", FailOpen: failOpen})
			want := FailClosedDecision(s.cfg.Timeout)
			if failOpen {
				want = FailOpenDecision()
			}
			tm, rs := timedAcquires(t, s, 10, 20, "k")
			checkDegraded(t, "unreachable", s, tm, rs, want)
			if s.Degraded() != int64(len(rs)) || s.Errors() < int64(len(rs)) {
				t.Fatalf("degraded %d, errors %d; want %d and at least that", s.Degraded(), s.Errors(), len(rs))
			}
			start := time.Now()
			r := run1(t, s, resetOp("k"))
			if r.Err != decide.ErrNotApplied || time.Since(start) > failureBound(s.cfg.Timeout) {
				t.Fatalf("reset: %+v after %v, want %v within the bound", r, time.Since(start), decide.ErrNotApplied)
			}
			if st := s.Stats(); (failOpen && st.Allowed != int64(len(rs))) || (!failOpen && st.Denied != int64(len(rs))) {
				t.Fatalf("stats %+v: the policy's answers should be counted as given", st)
			}
		})
	}
}

func TestRedisPausedAndResumed(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(storeOptions())
	s := startStore(t, rdb, Config{Prefix: "tb:"})
	loadScript(t, s)
	l := bucket.Limit{Capacity: 10, Rate: 1}
	if d := run1(t, s, acquireOp("before", l, 1)).Decision; !d.Allowed {
		t.Fatalf("before the pause: %+v", d)
	}

	srv.Pause()
	tm, rs := timedAcquires(t, s, 20, 5, "k")
	checkDegraded(t, "paused", s, tm, rs, FailClosedDecision(s.cfg.Timeout))
	if s.Degraded() != int64(len(rs)) || s.Errors() < int64(len(rs)) {
		t.Fatalf("degraded %d, errors %d; want %d and at least that", s.Degraded(), s.Errors(), len(rs))
	}
	srv.Resume()

	// The commands sent during the pause may still run now (Redis reads
	// them on resume); none is sent twice. A fresh key per attempt shows
	// Redis decides again.
	d := firstRedisAnswer(t, s, l)
	if !d.Allowed || d.Remaining != 9 {
		t.Fatalf("first answer after resume: %+v, want allowed with 9 left", d)
	}
}

// firstRedisAnswer acquires on a fresh key per attempt until Redis answers
// (the policy did not) and returns that answer. Each attempt has its own
// key because an attempt the policy answered may still have run on Redis.
func firstRedisAnswer(t *testing.T, s *Store, l bucket.Limit) bucket.Decision {
	t.Helper()
	var d bucket.Decision
	attempt := 0
	testkit.Eventually(t, 10*time.Second, "an answer from Redis", func() bool {
		attempt++
		degraded := s.Degraded()
		d = run1(t, s, acquireOp(fmt.Sprintf("after:%d", attempt), l, 1)).Decision
		return s.Degraded() == degraded
	})
	return d
}

func TestRedisKilledAndRestarted(t *testing.T) {
	testkit.SkipShort(t, "Redis failure: kill -9 and a restart")
	srv := redistest.Start(t)
	rdb := srv.Client(storeOptions())
	s := startStore(t, rdb, Config{Prefix: "tb:", FailOpen: true})
	loadScript(t, s)
	l := bucket.Limit{Capacity: 10, Rate: 0.001}
	for range 3 {
		run1(t, s, acquireOp("k", l, 1))
	}

	srv.Kill()
	tm, rs := timedAcquires(t, s, 20, 5, "k")
	checkDegraded(t, "killed", s, tm, rs, FailOpenDecision())
	if s.Degraded() != int64(len(rs)) || s.Errors() < int64(len(rs)) {
		t.Fatalf("degraded %d, errors %d; want %d and at least that", s.Degraded(), s.Errors(), len(rs))
	}

	srv.Restart() // same port, empty data, empty script cache
	loads := s.ScriptLoads()
	if d := firstRedisAnswer(t, s, l); !d.Allowed || d.Remaining != 9 {
		t.Fatalf("first answer after restart: %+v, want allowed with 9 left", d)
	}
	// The data is gone with the restart: "k" is a full bucket again.
	rdb.Del(context.Background(), "tb:k") // in case an attempt reached Redis late
	for i := range 3 {
		if d := run1(t, s, acquireOp("k", l, 1)).Decision; !d.Allowed || d.Remaining != int64(9-i) {
			t.Fatalf("acquire %d after restart: %+v", i, d)
		}
	}
	if got := s.ScriptLoads() - loads; got != 1 {
		t.Fatalf("%d script loads after the restart, want 1", got)
	}
}

// TestTimerAnswersWhenClientBlocks: even a client that ignores the context
// (here one built without ContextTimeoutEnabled, which New refuses, and a
// long ReadTimeout) cannot delay an answer past the deadline: the timer
// answers, and the late reply changes nothing.
func TestTimerAnswersWhenClientBlocks(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(&redis.Options{MaxRetries: -1, ReadTimeout: 10 * time.Second})
	s := newStore(Config{Client: rdb, Prefix: "tb:", Pipelines: 2, Timeout: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}, nil)
	t.Cleanup(s.Close)
	loadScript(t, s)
	srv.Pause()
	tm, rs := timedAcquires(t, s, 20, 3, "k")
	checkDegraded(t, "paused, client ignoring the context", s, tm, rs, FailClosedDecision(s.cfg.Timeout))
	srv.Resume()
	if d := firstRedisAnswer(t, s, bucket.Limit{Capacity: 1, Rate: 1}); !d.Allowed {
		t.Fatalf("first answer after resume: %+v", d)
	}
}

// TestCloseAnswersAndStops: Run after Close fails with ErrClosed.
func TestCloseAnswersAndStops(t *testing.T) {
	srv := redistest.Start(t)
	s := startStore(t, srv.Client(storeOptions()), Config{Timeout: exactTimeout})
	c := s.NewCaller()
	c.Add(acquireOp("k", bucket.Limit{Capacity: 1, Rate: 1}, 1))
	if _, err := c.Run(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close() // twice is fine
	c.Add(acquireOp("k", bucket.Limit{Capacity: 1, Rate: 1}, 1))
	if _, err := c.Run(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close: %v, want ErrClosed", err)
	}
}
