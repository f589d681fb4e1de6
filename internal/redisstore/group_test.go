package redisstore

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/redisscript"
	"github.com/bucketd/bucketd/internal/redistest"
)

// All-or-nothing groups (TB.MACQUIRE) in store mode.

// runGroup runs reqs as one group in a new Caller of s, with the single
// operations before and after it, and returns copies of all the answers
// in that order.
func runGroup(t testing.TB, s *Store, before []decide.Request, reqs []decide.Request, after ...decide.Request) []decide.Answer {
	t.Helper()
	c := s.NewCaller().(*Caller)
	for _, r := range before {
		c.Add(r)
	}
	c.AddAll(reqs)
	for _, r := range after {
		c.Add(r)
	}
	rs, err := c.Run()
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return append([]decide.Answer(nil), rs...)
}

// stored returns the state of key on rdb, or false when there is none.
func stored(t *testing.T, rdb redis.Cmdable, key string) (bucket.State, bool) {
	t.Helper()
	h, err := rdb.HGetAll(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("HGETALL %s: %v", key, err)
	}
	if len(h) == 0 {
		return bucket.State{}, false
	}
	st, err := redistest.ParseBucket(h)
	if err != nil {
		t.Fatalf("%s holds %v: %v", key, h, err)
	}
	return st, true
}

// TestGroupStandalone: on a standalone Redis a group is one script call
// that takes from every bucket or from none; a denied group writes
// nothing (not even the refill a denied TB.ACQUIRE stores); each answer is
// its bucket's, exactly the Go rule at the instant Redis used; a group
// travels with a connection's other operations, in order; a key of
// another type fails the group; cost 0 creates nothing; a group counts as
// one decision.
func TestGroupStandalone(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(storeOptions())
	s := startStore(t, rdb, Config{Prefix: "tb:", Timeout: exactTimeout})
	loadScript(t, s)
	big, small := bucket.Limit{Capacity: 10, Rate: 0.001}, bucket.Limit{Capacity: 5, Rate: 0.001}

	run1(t, s, acquireOp("b", small, 4)) // b holds 1
	b0, _ := stored(t, rdb, "tb:b")
	rs := runGroup(t, s, nil, []decide.Request{acquireOp("a", big, 2), acquireOp("b", small, 2)})
	if d := rs[0].Decision; !d.Allowed || d.Remaining != 10 || d.RetryAfterMs != 0 {
		t.Fatalf("a alone held the tokens and keeps them: %+v", d)
	}
	if d := rs[1].Decision; d.Allowed || d.Remaining != 1 || d.RetryAfterMs <= 0 {
		t.Fatalf("b alone did not: %+v", d)
	}
	if _, ok := stored(t, rdb, "tb:a"); ok {
		t.Fatal("a denied group created a")
	}
	if b, _ := stored(t, rdb, "tb:b"); b != b0 {
		t.Fatalf("a denied group wrote b: %+v, was %+v", b, b0)
	}

	// Allowed, between two single operations of the same connection: the
	// acquire on b before the group is seen by it, the peek after it sees
	// the group's take. Exactly the Go rule at the script's ts.
	rs = runGroup(t, s, []decide.Request{acquireOp("c", big, 1)},
		[]decide.Request{acquireOp("a", big, 1), acquireOp("b", small, 1), acquireOp("c", big, 1)},
		peekOp("a", big, 0))
	a, _ := stored(t, rdb, "tb:a")
	b, _ := stored(t, rdb, "tb:b")
	_, wantA := bucket.Acquire(bucket.State{}, false, big, 1, a.Last)
	_, wantB := bucket.Acquire(b0, true, small, 1, b.Last)
	if rs[1].Decision != wantA || rs[2].Decision != wantB {
		t.Fatalf("allowed group: a %+v, b %+v; the Go rule at the script's ts says %+v, %+v", rs[1].Decision, rs[2].Decision, wantA, wantB)
	}
	if rs[3].Decision.Remaining != 8 || rs[4].Decision.Remaining != 9 || a.Last != b.Last {
		t.Fatalf("c after two takes %+v, a after the group %+v; ts of a %d and b %d must be one instant",
			rs[3].Decision, rs[4].Decision, a.Last, b.Last)
	}

	// b is empty: a group with it is denied, and a, c keep their tokens.
	rs = runGroup(t, s, nil, []decide.Request{acquireOp("a", big, 1), acquireOp("c", big, 1), acquireOp("b", small, 1)})
	if !rs[0].Decision.Allowed || rs[0].Decision.Remaining != 9 || rs[1].Decision.Remaining != 8 || rs[2].Decision.Allowed {
		t.Fatalf("group with an empty bucket: %+v", rs)
	}

	// A key of another type fails the group; nothing is created.
	if err := rdb.Set(ctx, "tb:str", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rs = runGroup(t, s, nil, []decide.Request{acquireOp("new", big, 1), acquireOp("str", big, 1)})
	if !rs[0].Decision.Allowed || rs[0].Decision.Remaining != 10 || rs[1].Err != decide.ErrWrongType {
		t.Fatalf("group with a string key: %+v", rs)
	}
	// Cost 0 looks at every bucket and creates nothing.
	rs = runGroup(t, s, nil, []decide.Request{acquireOp("new", big, 0), acquireOp("a", big, 0)})
	if !rs[0].Decision.Allowed || rs[0].Decision.Remaining != 10 || rs[1].Decision.Remaining != 9 {
		t.Fatalf("group of cost 0: %+v", rs)
	}
	if n, _ := rdb.Exists(ctx, "tb:new").Result(); n != 0 {
		t.Fatal("a failed group or a group of cost 0 created a key")
	}

	// One acquire of b; groups: 2 denied, 1 allowed, the wrong type counted
	// as denied (as the shards count it), cost 0 allowed; the acquires on c.
	st := s.Stats()
	if st.Allowed != 4 || st.Denied != 3 || st.Peeks != 1 {
		t.Fatalf("stats %+v: want 4 allowed, 3 denied, 1 peek (a group is one decision)", st)
	}
	if s.Errors() != 0 || s.Degraded() != 0 {
		t.Fatalf("errors %d, degraded %d; want none", s.Errors(), s.Degraded())
	}
}

// scriptCalls returns how many script commands the masters have been sent
// (INFO commandstats: EVALSHA and EVAL, run or rejected).
func scriptCalls(t *testing.T, cl *redistest.Cluster) int64 {
	t.Helper()
	n := int64(0)
	for _, node := range cl.Nodes {
		info, err := nodeClient(t, node.Addr).Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatalf("INFO commandstats on %s: %v", node.Addr, err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
				continue
			}
			for _, f := range strings.Split(line[strings.IndexByte(line, ':')+1:], ",") {
				k, v, _ := strings.Cut(f, "=")
				if k == "calls" || k == "rejected_calls" {
					c, _ := strconv.ParseInt(v, 10, 64)
					n += c
				}
			}
		}
	}
	return n
}

// TestGroupCluster: on a three-master Redis Cluster a group whose keys
// (with the prefix) hash to different slots answers CROSSSLOT for every
// key without sending anything; keys sharing a {hash tag} are one script
// call on the master of the tag's slot, all or nothing; the store's slot
// is Redis's for tricky keys.
func TestGroupCluster(t *testing.T) {
	t.Parallel() // a Redis Cluster of its own, which takes 2 s to form
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(clusterOptions())
	s := startStore(t, cc, Config{Prefix: "tb:", Timeout: exactTimeout})
	loadScript(t, s)

	for _, key := range []string{"", "a", "tb:user:1", "{", "}", "{}", "{}a", "a{b}c", "{a}{b}", "a{{b}}", "}{a}", "{a", "tb:{user1}:x", "\x00{\xff}"} {
		want, err := cc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot([]byte(key)); int64(got) != want {
			t.Fatalf("keySlot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}

	org, user := bucket.Limit{Capacity: 3, Rate: 1e-6}, bucket.Limit{Capacity: 100, Rate: 1e-6}
	if redisSlot("tb:user:1") == redisSlot("tb:org") {
		t.Fatal("precondition: tb:user:1 and tb:org share a slot")
	}
	calls := scriptCalls(t, cl)
	rs := runGroup(t, s, []decide.Request{acquireOp("single", user, 1)},
		[]decide.Request{acquireOp("user:1", user, 1), acquireOp("org", org, 1)},
		acquireOp("single", user, 1))
	if rs[1].Err != decide.ErrCrossSlot || rs[2].Err != decide.ErrCrossSlot {
		t.Fatalf("group across slots: %+v, want CROSSSLOT for both keys", rs)
	}
	if rs[0].Decision.Remaining != 99 || rs[3].Decision.Remaining != 98 {
		t.Fatalf("the single operations around the group: %+v", rs)
	}
	if got := scriptCalls(t, cl) - calls; got != 2 {
		t.Fatalf("%d script calls, want 2 (the single acquires; nothing of the group)", got)
	}
	// A Run of only a CROSSSLOT group sends nothing at all.
	rs = runGroup(t, s, nil, []decide.Request{acquireOp("org", org, 1), acquireOp("user:1", user, 1), acquireOp("{acme}:org", org, 1)})
	for i, r := range rs {
		if r.Err != decide.ErrCrossSlot {
			t.Fatalf("group across slots, alone in its Run: answer %d %+v, want CROSSSLOT", i, r)
		}
	}
	if got := scriptCalls(t, cl) - calls; got != 2 {
		t.Fatalf("%d script calls, want still 2", got)
	}
	for _, k := range []string{"tb:user:1", "tb:org"} {
		if n, err := cc.Exists(ctx, k).Result(); err != nil || n != 0 {
			t.Fatalf("EXISTS %s: %d, %v; the CROSSSLOT group must create nothing", k, n, err)
		}
	}

	// With a tag: 5 users share the org's capacity of 3, taken once per
	// group; the denied groups take nothing from their user.
	owner, err := cc.MasterForKey(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		u := fmt.Sprintf("{acme}:user:%d", i)
		rs := runGroup(t, s, nil, []decide.Request{acquireOp(u, user, 1), acquireOp("{acme}:org", org, 1)})
		allowed := i < 3
		if !rs[0].Decision.Allowed || rs[1].Decision.Allowed != allowed {
			t.Fatalf("group %d: %+v, want the org to allow %v", i, rs, allowed)
		}
		st, ok := stored(t, owner, "tb:"+u)
		if allowed && (!ok || st.Tokens < 99 || st.Tokens > 99.01) {
			t.Fatalf("group %d: %s on the tag's master holds %+v (%v), want 99 tokens", i, u, st, ok)
		}
		if !allowed && ok {
			t.Fatalf("denied group %d wrote %s: %+v", i, u, st)
		}
	}
	if st, ok := stored(t, owner, "tb:{acme}:org"); !ok || st.Tokens > 0.01 {
		t.Fatalf("the org on the tag's master: %+v (%v), want empty", st, ok)
	}
	// A group of one key needs no tag.
	if rs := runGroup(t, s, nil, []decide.Request{acquireOp("solo", org, 1)}); !rs[0].Decision.Allowed || rs[0].Decision.Remaining != 2 {
		t.Fatalf("group of one on a cluster: %+v", rs)
	}
	st := s.Stats()
	if st.Allowed != 2+3+1 || st.Denied != 2 {
		t.Fatalf("stats %+v: want 6 allowed, 2 denied (CROSSSLOT is no decision)", st)
	}
	if s.Errors() != 0 || s.Degraded() != 0 {
		t.Fatalf("errors %d, degraded %d; want none", s.Errors(), s.Degraded())
	}
}

// groupOf returns n acquires on distinct tagged keys.
func groupOf(n int) []decide.Request {
	reqs := make([]decide.Request, n)
	for i := range reqs {
		reqs[i] = acquireOp(fmt.Sprintf("{g}:%d", i), bucket.Limit{Capacity: 10, Rate: 1}, 1)
	}
	return reqs
}

// checkGroupPolicy checks that every answer is the policy's.
func checkGroupPolicy(t *testing.T, what string, rs []decide.Answer, want bucket.Decision) {
	t.Helper()
	for i, r := range rs {
		if r.Err != nil || r.Decision != want {
			t.Fatalf("%s: answer %d %+v, want the policy's %+v", what, i, r, want)
		}
	}
}

// TestGroupFailOpenClosed: when Redis cannot answer, every bucket of a
// group gets the --on-redis-error answer (allowed with fail-open, denied
// with retry = the timeout with fail-closed), counted as one decision: a
// refused connection, a paused Redis (no reply within the timeout), and a
// cluster whose slot map is unknown (answered without sending).
func TestGroupFailOpenClosed(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("failOpen=%v", failOpen), func(t *testing.T) {
			want := func(s *Store) bucket.Decision {
				if failOpen {
					return FailOpenDecision()
				}
				return FailClosedDecision(s.cfg.Timeout)
			}
			counted := func(s *Store, groups int64) {
				t.Helper()
				st := s.Stats()
				if (failOpen && st.Allowed != groups) || (!failOpen && st.Denied != groups) || s.Degraded() != groups {
					t.Fatalf("stats %+v, degraded %d: want %d groups counted once each", st, s.Degraded(), groups)
				}
			}

			o := storeOptions()
			o.Addr = freeAddr(t)
			refused := redis.NewClient(o)
			t.Cleanup(func() { _ = refused.Close() })
			s := startStore(t, refused, Config{Prefix: "tb:", FailOpen: failOpen})
			for range 3 {
				checkGroupPolicy(t, "connection refused", runGroup(t, s, nil, groupOf(4)), want(s))
			}
			counted(s, 3)

			srv := redistest.Start(t)
			s = startStore(t, srv.Client(storeOptions()), Config{Prefix: "tb:", FailOpen: failOpen, Timeout: 50 * time.Millisecond})
			loadScript(t, s)
			srv.Pause()
			checkGroupPolicy(t, "Redis paused", runGroup(t, s, nil, groupOf(3), acquireOp("x", bucket.Limit{Capacity: 1, Rate: 1}, 1)), want(s))
			srv.Resume()
			counted(s, 2) // the group and the single acquire

			cc := redis.NewClusterClient(ClusterClientOptions([]string{freeAddr(t)}))
			t.Cleanup(func() { _ = cc.Close() })
			s = startStore(t, cc, Config{Prefix: "tb:", FailOpen: failOpen})
			checkGroupPolicy(t, "cluster unreachable", runGroup(t, s, nil, groupOf(5)), want(s))
			counted(s, 1)
		})
	}
}

// TestGroupAnsweredOnce: the worker (Redis's replies) and the timer (the
// policy) race for a group through its first operation's flag, so a group
// is answered whole by one of them, never a mix, and counted once.
func TestGroupAnsweredOnce(t *testing.T) {
	rdb := redis.NewClient(storeOptions()) // nothing is sent
	t.Cleanup(func() { _ = rdb.Close() })
	s := startStore(t, rdb, Config{Timeout: time.Hour})
	reply := []any{int64(1), int64(9), int64(0), int64(1000)}
	for _, timerFirst := range []bool{false, true} {
		c := s.NewCaller().(*Caller)
		c.AddAll(groupOf(3))
		c.results = make([]decide.Answer, 3)
		c.pending.Store(3)
		c.deadline = time.Now().Add(-time.Hour) // due: the timer may answer
		p := newPipe(&part{c: c, ops: []int32{0, 1, 2}}, 3)
		w := worker{l: &lane{s: s}}
		w.build(context.Background(), p)
		// Build again for the command (build keeps none), and give it
		// Redis's reply.
		w.batch.Build(context.Background(), redisscript.BatchKeys)[0].SetVal([]any{reply, reply, reply})
		before := s.Stats()
		if timerFirst {
			s.expirePipe(p, "")
		}
		n, err := s.settleGroup(p, 0, &w.batch)
		if !timerFirst {
			s.expirePipe(p, "")
		}
		want := bucket.Decision{Allowed: true, Remaining: 9, ResetAfterMs: 1000}
		if timerFirst {
			want = s.fail.Decision
		}
		checkGroupPolicy(t, fmt.Sprintf("timer first %v", timerFirst), c.results, want)
		after := s.Stats()
		if n != 0 || err != nil || after.Allowed+after.Denied-before.Allowed-before.Denied != 1 || c.pending.Load() != 0 {
			t.Fatalf("timer first %v: settleGroup %d, %v; %d decisions counted, %d pending; want one decision, all answered",
				timerFirst, n, err, after.Allowed+after.Denied-before.Allowed-before.Denied, c.pending.Load())
		}
		if p.answered[0].Load() != 1 {
			t.Fatal("the group's flag is not set")
		}
	}
}

// TestGroupNeverOverGrants is the concurrency test in store mode,
// on a standalone Redis and on a three-master cluster: 50 connections
// released together, each sending rounds of a group {user_i, org} and an
// acquire on org alone in one pipeline, with a rate near 0. The org grants
// exactly its capacity, and every user bucket lost exactly one token per
// group granted: a denied group takes nothing.
func TestGroupNeverOverGrants(t *testing.T) {
	t.Parallel() // its own Redis and Redis Cluster, which takes 2 s to form
	for _, cluster := range []bool{false, true} {
		t.Run(fmt.Sprintf("cluster=%v", cluster), func(t *testing.T) {
			var client redis.UniversalClient
			if cluster {
				client = redistest.StartCluster(t, 3).Client(clusterOptions())
			} else {
				client = redistest.Start(t).Client(storeOptions())
			}
			s := startStore(t, client, Config{Prefix: "tb:", Timeout: exactTimeout})
			loadScript(t, s)
			const workers, rounds, orgCap = 50, 12, 200
			org, user := bucket.Limit{Capacity: orgCap, Rate: 1e-9}, bucket.Limit{Capacity: 1e6, Rate: 1e-9}
			var orgGrants atomic.Int64
			userGrants := make([]int64, workers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := s.NewCaller().(*Caller)
					u := fmt.Sprintf("{acme}:user:%d", w)
					<-start
					for range rounds {
						c.AddAll([]decide.Request{acquireOp(u, user, 1), acquireOp("{acme}:org", org, 1)})
						c.Add(acquireOp("{acme}:org", org, 1))
						rs, err := c.Run()
						if err != nil {
							t.Error(err)
							return
						}
						if rs[0].Decision.Allowed && rs[1].Decision.Allowed {
							orgGrants.Add(1)
							userGrants[w]++
						}
						if rs[2].Decision.Allowed {
							orgGrants.Add(1)
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			if n := orgGrants.Load(); n != orgCap {
				t.Fatalf("org granted %d, capacity %d", n, orgCap)
			}
			for w := range workers {
				st, ok := stored(t, client, fmt.Sprintf("tb:{acme}:user:%d", w))
				spent := int64(0)
				if ok {
					spent = int64(math.Round(user.Capacity - st.Tokens))
				}
				if spent != userGrants[w] {
					t.Fatalf("user %d spent %d tokens but was granted %d groups", w, spent, userGrants[w])
				}
			}
			if s.Errors() != 0 || s.Degraded() != 0 {
				t.Fatalf("errors %d, degraded %d; want none", s.Errors(), s.Degraded())
			}
		})
	}
}
