package replica_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/replica"
	"github.com/bucketd/bucketd/internal/shard"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/redis/go-redis/v9"
)

type fixture struct {
	group  *shard.Group
	rep    *replica.Replicator
	client *redis.Client
}

func newFixture(t *testing.T, srv *redistest.Server, capacity int) *fixture {
	t.Helper()
	group := shard.New(shard.Config{Shards: 4, TrackChanges: capacity})
	t.Cleanup(group.Close)
	client := srv.Client(&redis.Options{MaxRetries: -1, ContextTimeoutEnabled: true})
	rep, err := replica.New(replica.Config{Client: client, Group: group, Prefix: "tb:", Capacity: capacity, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{group: group, rep: rep, client: client}
}

// memoryState dumps every live bucket of the group, through TrackAll and
// Collect.
func (f *fixture) memoryState(t *testing.T) map[string]bucket.State {
	t.Helper()
	if err := f.group.TrackAll(); err != nil {
		t.Fatal(err)
	}
	out := map[string]bucket.State{}
	for i := range f.group.Len() {
		for {
			ch, err := f.group.Collect(i, nil, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if len(ch) == 0 {
				break
			}
			now := time.Now().UnixMicro()
			for _, c := range ch {
				// A bucket that refilled but was not swept yet is, for
				// Redis, an expired key: compare only the ones not full.
				if !c.Deleted && !c.State.IsFull(c.Limit, now) {
					out[c.Key] = c.State
				}
			}
		}
	}
	return out
}

// redisState reads every bucket under tb: back.
func (f *fixture) redisState(t *testing.T) map[string]bucket.State {
	t.Helper()
	ctx := context.Background()
	keys, err := f.client.Keys(ctx, "tb:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bucket.State{}
	for _, k := range keys {
		h, err := f.client.HGetAll(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		tokens, err1 := strconv.ParseFloat(h["tokens"], 64)
		ts, err2 := strconv.ParseInt(h["ts"], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: unreadable hash %v", k, h)
		}
		pttl := f.client.PTTL(ctx, k).Val()
		if pttl <= 0 {
			t.Fatalf("%s: no expiry (%v)", k, pttl)
		}
		if pttl < 50*time.Millisecond {
			continue // about to expire: memory may already have swept it as full
		}
		out[k[len("tb:"):]] = bucket.State{Tokens: tokens, Last: ts}
	}
	return out
}

func compare(t *testing.T, mem, red map[string]bucket.State) {
	t.Helper()
	mismatches := 0
	for k, m := range mem {
		if r, ok := red[k]; !ok || r != m {
			mismatches++
			if mismatches < 5 {
				t.Errorf("%q: memory %+v, redis %+v (present %v)", k, m, r, ok)
			}
		}
	}
	for k := range red {
		if _, ok := mem[k]; !ok {
			mismatches++
			if mismatches < 5 {
				t.Errorf("%q: in Redis, not in memory", k)
			}
		}
	}
	t.Logf("%d buckets in memory, %d in Redis, %d mismatches", len(mem), len(red), mismatches)
}

// drive runs n random operations on a small key space: acquires of random
// costs and limits, peeks, resets.
func drive(t *testing.T, g *shard.Group, rng *rand.Rand, n int) {
	t.Helper()
	c := g.NewCaller()
	for i := range n {
		key := []byte(fmt.Sprint("k", rng.IntN(300)))
		lim := bucket.Limit{Capacity: float64(1 + rng.IntN(20)), Rate: []float64{0.001, 0.5, 3}[rng.IntN(3)]}
		switch r := rng.IntN(10); {
		case r < 7:
			c.Add(decide.Request{Kind: decide.Acquire, Key: key, Limit: lim, Cost: float64(rng.IntN(4))})
		case r < 9:
			c.Add(decide.Request{Kind: decide.Peek, Key: key, Limit: lim, Cost: 1})
		default:
			c.Add(decide.Request{Kind: decide.Reset, Key: key})
		}
		if i%16 == 15 {
			if _, err := c.Run(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := c.Run(); err != nil {
		t.Fatal(err)
	}
}

func TestReplicatedStateEqualsMemory(t *testing.T) {
	srv := redistest.Start(t)
	f := newFixture(t, srv, 1<<16)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	for range 5 {
		drive(t, f.group, rng, 4000)
		if err := f.rep.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	compare(t, f.memoryState(t), f.redisState(t))
	if st := f.rep.Stats(); st.Applied == 0 || st.RedisErrors != 0 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestKeyOfAnotherTypeDoesNotStallReplication: a key under the prefix that
// holds a string makes Redis refuse that one bucket (WRONGTYPE); it is
// counted as an error and the other buckets of the same batches are
// written, once, without the batch being retried forever.
func TestKeyOfAnotherTypeDoesNotStallReplication(t *testing.T) {
	srv := redistest.Start(t)
	f := newFixture(t, srv, 1<<16)
	ctx := context.Background()
	if err := f.client.Set(ctx, "tb:k7", "not a bucket", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c := f.group.NewCaller()
	lim := bucket.Limit{Capacity: 10, Rate: 0.001}
	for i := range 200 {
		c.Add(decide.Request{Kind: decide.Acquire, Key: []byte(fmt.Sprint("k", i)), Limit: lim, Cost: 3})
	}
	if _, err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if err := f.rep.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v; a refused bucket must not fail the batch", err)
	}
	if st := f.rep.Stats(); st.RedisErrors != 1 || st.Applied != 199 {
		t.Fatalf("stats %+v, want 1 Redis error (the refused bucket) and 199 applied", st)
	}
	if got, _ := f.client.Get(ctx, "tb:k7").Result(); got != "not a bucket" {
		t.Fatalf("tb:k7 = %q, want the string left alone", got)
	}
	f.client.Del(ctx, "tb:k7")
	mem := f.memoryState(t)
	delete(mem, "k7")
	compare(t, mem, f.redisState(t))
}

func TestRestartLoadsDrainedKeys(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	first := newFixture(t, srv, 1024)
	c := first.group.NewCaller()
	c.Add(decide.Request{Kind: decide.Acquire, Key: []byte("drained"), Limit: bucket.Limit{Capacity: 5, Rate: 0.01}, Cost: 5})
	if _, err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if err := first.rep.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A new process: new clock, new shards, state from Redis.
	second := newFixture(t, srv, 1024)
	n, err := second.rep.Load(ctx)
	if err != nil || n != 1 {
		t.Fatalf("loaded %d, %v", n, err)
	}
	c2 := second.group.NewCaller()
	c2.Add(decide.Request{Kind: decide.Acquire, Key: []byte("drained"), Limit: bucket.Limit{Capacity: 5, Rate: 0.01}, Cost: 1})
	res, err := c2.Run()
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Decision.Allowed {
		t.Fatalf("a restarted bucketd handed a drained key a fresh burst: %+v", res[0].Decision)
	}
}

// TestRedisPausedNeitherBlocksNorLoses: with Redis stopped (SIGSTOP),
// decisions go on at full speed; after it resumes, the copy converges, even
// though the tracking capacity overflowed meanwhile (full resync).
func TestRedisPausedNeitherBlocksNorLoses(t *testing.T) {
	testkit.SkipShort(t, "Redis failure: Redis paused for 1.5 s under load")
	srv := redistest.Start(t)
	f := newFixture(t, srv, 64) // small: the outage overflows it
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.rep.Run(ctx) }()
	defer func() { cancel(); <-done }()

	rng := rand.New(rand.NewPCG(3, 4))
	// Before the pause, changes (resets included) are written as they come,
	// in small steps that never overflow the tracking capacity; the overflow
	// happens during the pause, with resets of keys written before it. (A
	// reset key left in Redis was once seen here: a put of a pipeline
	// abandoned on the timeout ran after the key's deletion;
	// TestLateWriteOfAnAbandonedPipelineIsUndone pins that case down.)
	for range 100 {
		drive(t, f.group, rng, 10)
		if err := f.rep.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	srv.Pause()
	var slowest atomic.Int64
	start := time.Now()
	c := f.group.NewCaller()
	decisions := 0
	for i := 0; time.Since(start) < 1500*time.Millisecond; i++ { // longer than the 500ms write timeout
		decisions++
		t0 := time.Now()
		if i%7 == 0 {
			c.Add(decide.Request{Kind: decide.Reset, Key: []byte(fmt.Sprint("k", i%300))})
		} else {
			c.Add(decide.Request{Kind: decide.Acquire, Key: []byte(fmt.Sprint("p", i%500)), Limit: bucket.Limit{Capacity: 10, Rate: 1}, Cost: 1})
		}
		if _, err := c.Run(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0).Nanoseconds(); d > slowest.Load() {
			slowest.Store(d)
		}
	}
	t.Logf("%d decisions in %v with Redis paused; slowest %v", decisions, time.Since(start), time.Duration(slowest.Load()))
	if time.Duration(slowest.Load()) > 400*time.Millisecond { // under the 500 ms write timeout: a decision that waited for Redis would show
		t.Fatalf("a decision took %v while Redis was paused", time.Duration(slowest.Load()))
	}
	srv.Resume()
	caughtUp := testkit.Poll(20*time.Second, func() bool {
		st := f.rep.Stats()
		return st.QueueDepth == 0 && st.Resyncs > 0 && f.rep.Flush(context.Background()) == nil
	})
	if !caughtUp {
		t.Fatalf("replication did not catch up: %+v", f.rep.Stats())
	}
	cancel()
	<-done
	if err := f.rep.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := f.rep.Stats()
	t.Logf("after the pause: %+v", st)
	if st.Dropped == 0 {
		t.Fatalf("expected the tracking capacity to overflow during the pause: %+v", st)
	}
	compare(t, f.memoryState(t), f.redisState(t))
}

// TestRedisRestartWithoutDataIsRefilled: a Redis that restarts empty gets
// the whole state again, even for keys that do not change afterwards.
func TestRedisRestartWithoutDataIsRefilled(t *testing.T) {
	srv := redistest.Start(t)
	group := shard.New(shard.Config{Shards: 2, TrackChanges: 1024})
	t.Cleanup(group.Close)
	rep, err := replica.New(replica.Config{Client: srv.Client(&redis.Options{MaxRetries: -1}), Group: group,
		RestartCheck: 50 * time.Millisecond, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := group.NewCaller()
	c.Add(decide.Request{Kind: decide.Acquire, Key: []byte("quiet"), Limit: bucket.Limit{Capacity: 5, Rate: 0.001}, Cost: 5})
	if _, err := c.Run(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := rep.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Restart() // no persistence: empty
	client := srv.Client()
	back := testkit.Poll(10*time.Second, func() bool {
		rep.Flush(ctx) //nolint:errcheck // errors while Redis restarts are expected
		return client.Exists(ctx, "tb:quiet").Val() == 1
	})
	if !back {
		t.Fatalf("the key never came back after Redis restarted: %+v", rep.Stats())
	}
}

// lateWriteSetup drives the race of TestLateWrite…: a put whose pipeline
// timed out is held by the proxy for 1.5 s while the key is reset and its
// deletion written on a new connection. It returns the fixture, with the
// deletion written, and the ID Redis gave the connection of the abandoned
// pipeline (0 where CLIENT is forbidden); the held put reaches Redis about
// a second later, unless that connection is killed.
func lateWriteSetup(t *testing.T, srv *redistest.Server, fence *replica.Fence) (*fixture, int64) {
	t.Helper()
	proxy := redistest.StartProxy(t, srv.Addr)
	group := shard.New(shard.Config{Shards: 1, TrackChanges: 1024})
	t.Cleanup(group.Close)
	ids := make(chan int64, 64) // of the client's connections, in the order they opened
	opts := &redis.Options{Addr: proxy.Addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			if fence != nil {
				if err := fence.OnConnect(ctx, cn); err != nil {
					return err
				}
			}
			if id, err := cn.ClientID(ctx).Result(); err == nil {
				select {
				case ids <- id:
				default: // the first connections are the ones that matter
				}
			}
			return nil
		}}
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	rep, err := replica.New(replica.Config{Client: client, Group: group, Prefix: "tb:",
		Capacity: 1024, Timeout: 200 * time.Millisecond, Fence: fence})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{group: group, rep: rep, client: srv.Client()}
	ctx := context.Background()
	c := group.NewCaller()
	run := func(op decide.Request) {
		t.Helper()
		c.Add(op)
		if _, err := c.Run(); err != nil {
			t.Fatal(err)
		}
	}
	lim := bucket.Limit{Capacity: 10, Rate: 0.001}
	run(decide.Request{Kind: decide.Acquire, Key: []byte("k"), Limit: lim, Cost: 3})
	if err := rep.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.SetDelay(1500 * time.Millisecond)
	run(decide.Request{Kind: decide.Acquire, Key: []byte("k"), Limit: lim, Cost: 3})
	if err := rep.Flush(ctx); err == nil {
		t.Fatal("a write held 1.5 s by the proxy succeeded within the 200 ms timeout")
	}
	proxy.SetDelay(0)
	run(decide.Request{Kind: decide.Reset, Key: []byte("k")})
	if err := rep.Flush(ctx); err != nil { // the retried put, then the deletion
		t.Fatal(err)
	}
	if n, _ := f.client.Exists(ctx, "tb:k").Result(); n != 0 {
		t.Fatal("tb:k still in Redis right after its deletion was written")
	}
	select {
	case id := <-ids:
		return f, id // the first connection carried the put that timed out
	default:
		return f, 0
	}
}

// connected reports whether Redis has a client with the given ID.
func connected(t *testing.T, c *redis.Client, id int64) bool {
	t.Helper()
	line, err := c.Do(context.Background(), "CLIENT", "LIST", "ID", id).Text()
	if err != nil {
		t.Fatalf("CLIENT LIST ID %d: %v", id, err)
	}
	return line != ""
}

// TestLateWriteOfAnAbandonedPipelineIsUndone: without a working Fence (none
// configured, or a Redis that forbids CLIENT, which the Fence must take in
// its stride: every Flush of lateWriteSetup succeeds) the held put brings
// tb:k back, as the guard cannot stop it (a deleted key has no ts), and the
// reconciles that follow a failed write remove it again.
func TestLateWriteOfAnAbandonedPipelineIsUndone(t *testing.T) {
	testkit.SkipShort(t, "fault injection: a write held 1.5 s by a proxy")
	for _, tc := range []struct {
		name  string
		args  []string
		fence *replica.Fence
	}{
		{"no fence", nil, nil},
		{"CLIENT renamed away", []string{"--rename-command", "CLIENT", ""}, &replica.Fence{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.args...)
			f, abandoned := lateWriteSetup(t, srv, tc.fence)
			ctx := context.Background()
			if abandoned != 0 && !connected(t, f.client, abandoned) {
				t.Fatal("the connection of the abandoned pipeline is gone already: the race this test is about cannot happen")
			}
			testkit.Eventually(t, 5*time.Second, "the abandoned put to reach Redis (the race this test is about)", func() bool {
				return f.client.Exists(ctx, "tb:k").Val() != 0
			})
			if err := f.rep.Flush(ctx); err != nil { // the second reconcile after the failure
				t.Fatal(err)
			}
			if n, _ := f.client.Exists(ctx, "tb:k").Result(); n != 0 {
				t.Fatal("the late put of an abandoned pipeline brought tb:k back and replication left it there")
			}
			compare(t, f.memoryState(t), f.redisState(t))
		})
	}
}

// TestFenceStopsALateWrite: with the Fence, the connection of the failed
// pipeline is killed before the deletion is written (without a Fence it is
// still open then: see TestLateWriteOfAnAbandonedPipelineIsUndone), so the
// held put never runs: tb:k stays absent the whole time, with no reconcile
// needed.
func TestFenceStopsALateWrite(t *testing.T) {
	testkit.SkipShort(t, "fault injection: a write held 1.5 s by a proxy")
	srv := redistest.Start(t)
	f, abandoned := lateWriteSetup(t, srv, &replica.Fence{})
	ctx := context.Background()
	if abandoned == 0 || connected(t, f.client, abandoned) {
		t.Fatalf("the connection of the abandoned pipeline (id %d) is still open: the fence did not kill it", abandoned)
	}
	// Real time is the point: the proxy holds the abandoned put for 1.5 s;
	// watch past that moment that it never lands.
	if testkit.Poll(2500*time.Millisecond, func() bool { return f.client.Exists(ctx, "tb:k").Val() != 0 }) {
		t.Fatal("the held put of the killed connection ran: tb:k came back")
	}
	compare(t, f.memoryState(t), f.redisState(t))
}

// TestLoadClampsALastCallAfterTheLoadInstant: a bucket the Redis copy
// holds with a last call later than the load instant (written by a host
// whose clock was ahead, or loaded after this clock stepped back) is
// loaded with its last call at the load instant, so it refills as the
// answers say, as a snapshot's bucket is; a key longer than
// --max-key-bytes, and tokens beyond what any capacity allows, are not
// loaded, as no command could have left them.
func TestLoadClampsALastCallAfterTheLoadInstant(t *testing.T) {
	srv := redistest.Start(t)
	clk := testkit.NewClock()
	group := shard.New(shard.Config{Shards: 2, TrackChanges: 1024, Clock: clk.Now, Base: clk.Base()})
	t.Cleanup(group.Close)
	unixNow := func() time.Time { return time.UnixMicro(clk.Base().UnixMicros(clk.Now())) }
	rep, err := replica.New(replica.Config{Client: srv.Client(&redis.Options{MaxRetries: -1}), Group: group,
		Now: unixNow, MaxKeyBytes: 8})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	red := srv.Client()
	now := unixNow().UnixMicro()
	for key, ts := range map[string]int64{"tb:ahead": now + 30_000_000, "tb:too-long-key": now, "tb:huge": now} {
		tokens := "0"
		if key == "tb:huge" {
			tokens = "1e300"
		}
		if err := red.HSet(ctx, key, "tokens", tokens, "ts", ts).Err(); err != nil {
			t.Fatal(err)
		}
		if err := red.PExpire(ctx, key, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := rep.Load(ctx); err != nil || n != 1 {
		t.Fatalf("Load: %d, %v; want 1 (ahead)", n, err)
	}
	if st := group.Stats(); st.Buckets != 1 {
		t.Fatalf("%d buckets loaded, want 1", st.Buckets)
	}
	c := group.NewCaller()
	for wait := range 8 {
		c.Add(decide.Request{Kind: decide.Peek, Key: []byte("ahead"), Limit: bucket.Limit{Capacity: 10, Rate: 1}, Cost: 1})
		res, err := c.Run()
		if err != nil {
			t.Fatal(err)
		}
		d := res[0].Decision
		if d.Allowed {
			if wait != 1 {
				t.Fatalf("allowed after %d waits, want after the first", wait)
			}
			return
		}
		if wait == 7 {
			t.Fatalf("still %+v after 7 waits of retry_after_ms + 0.5 s: the bucket never refills while its last call is in the future", d)
		}
		if wait == 0 && (d.RetryAfterMs != 1000 || d.ResetAfterMs != 10000) {
			t.Fatalf("right after the load: %+v, want retry 1000 ms, reset 10000 ms", d)
		}
		clk.Advance(time.Duration(d.RetryAfterMs)*time.Millisecond + 500*time.Millisecond)
	}
}
