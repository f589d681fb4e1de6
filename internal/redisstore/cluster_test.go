package redisstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/testkit"
)

// Store mode on a Redis Cluster: each master has its own lane; slot
// migrations (MOVED, ASK) are followed without running anything twice.

// do runs a command on c and fails the test on an error.
func do(t *testing.T, c *redis.Client, args ...any) any {
	t.Helper()
	v, err := c.Do(context.Background(), args...).Result()
	if err != nil {
		t.Fatalf("%v on %s: %v", args, c.Options().Addr, err)
	}
	return v
}

// slotAndOwner returns the slot of the stored key and the index in
// cl.Nodes of the master that owns it now.
func slotAndOwner(t *testing.T, cl *redistest.Cluster, stored string) (int, int) {
	t.Helper()
	slot := redisSlot(stored)
	owner, err := cl.Client().MasterForKey(context.Background(), stored)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range cl.Nodes {
		if n.Addr == owner.Options().Addr {
			return slot, i
		}
	}
	t.Fatalf("the owner %s of %s is not a node of the cluster", owner.Options().Addr, stored)
	return 0, 0
}

// TestClusterFollowsMovedAndAsk: after the store has learned the slot map,
// a slot moves to another master (MOVED from the old one) and another slot
// starts migrating (ASK). The old master runs nothing of those commands;
// the store sends them again where the cluster says, so every acquire is
// Redis's answer and is charged exactly once, on the new master. The new
// master has no script (SCRIPT FLUSH), so the resent call gets NOSCRIPT and
// is sent once more as EVAL.
func TestClusterFollowsMovedAndAsk(t *testing.T) {
	t.Parallel() // a Redis Cluster of its own, which takes 2 s to form
	cl := redistest.StartCluster(t, 3)
	s := startStore(t, cl.Client(clusterOptions()), Config{Prefix: "tb:", Timeout: exactTimeout})
	loadScript(t, s) // the store's slot map is now the one before the moves
	l := bucket.Limit{Capacity: 10, Rate: 0.001}
	ids := make([]string, len(cl.Nodes))
	clients := make([]*redis.Client, len(cl.Nodes))
	for i, n := range cl.Nodes {
		clients[i] = nodeClient(t, n.Addr)
		ids[i] = do(t, clients[i], "cluster", "myid").(string)
	}

	// MOVED: the slot of tb:moved goes from its master to the next one.
	slot, from := slotAndOwner(t, cl, "tb:moved")
	to := (from + 1) % len(cl.Nodes)
	do(t, clients[to], "script", "flush")
	do(t, clients[to], "cluster", "setslot", slot, "importing", ids[from])
	do(t, clients[from], "cluster", "setslot", slot, "migrating", ids[to])
	for _, c := range clients { // the slot is empty: nothing to migrate
		do(t, c, "cluster", "setslot", slot, "node", ids[to])
	}
	loads := s.ScriptLoads()
	for i := range 2 {
		if d := run1(t, s, acquireOp("moved", l, 1)).Decision; !d.Allowed || d.Remaining != int64(9-i) {
			t.Fatalf("acquire %d after the slot moved: %+v, want allowed with %d left", i, d, 9-i)
		}
	}
	if got := s.ScriptLoads() - loads; got != 1 {
		t.Fatalf("%d script loads, want 1 (the new master had none)", got)
	}
	checkStoredOn(t, clients, "tb:moved", to, 8)

	// ASK: the slot of tb:asked is migrating; the key is not on its master
	// yet, so the master sends the command to the importing node.
	slot, from = slotAndOwner(t, cl, "tb:asked")
	to = (from + 1) % len(cl.Nodes)
	do(t, clients[to], "cluster", "setslot", slot, "importing", ids[from])
	do(t, clients[from], "cluster", "setslot", slot, "migrating", ids[to])
	if d := run1(t, s, acquireOp("asked", l, 1)).Decision; !d.Allowed || d.Remaining != 9 {
		t.Fatalf("acquire during the migration: %+v, want allowed with 9 left", d)
	}
	checkStoredOn(t, clients, "tb:asked", to, 9)
	if s.Errors() != 0 || s.Degraded() != 0 {
		t.Fatalf("errors %d, degraded %d; want none", s.Errors(), s.Degraded())
	}
}

// checkStoredOn checks that only master want holds key, with tokens left.
func checkStoredOn(t *testing.T, clients []*redis.Client, key string, want int, tokens float64) {
	t.Helper()
	for i, c := range clients {
		// ASKING lets the importing node read a key of a slot it does not
		// own yet; a node that owns the slot ignores it.
		pipe := c.Pipeline()
		pipe.Do(context.Background(), "asking")
		get := pipe.HGetAll(context.Background(), key)
		if _, err := pipe.Exec(context.Background()); err != nil && i == want {
			t.Fatalf("HGETALL %s on master %d: %v", key, i, err)
		}
		h, err := get.Result()
		switch {
		case i != want && err == nil && len(h) > 0:
			t.Fatalf("%s is on master %d too: %v", key, i, h)
		case i != want:
		case err != nil:
			t.Fatalf("HGETALL %s on master %d: %v", key, i, err)
		default:
			st, err := redistest.ParseBucket(h)
			// The limit refills 0.001 tokens/s: a fraction of a token at most.
			if err != nil || st.Tokens < tokens || st.Tokens > tokens+0.5 {
				t.Fatalf("%s on master %d: %v (%v), want %v tokens", key, i, h, err, tokens)
			}
		}
	}
}

// TestClusterLanesRetireWhenIdle: with a short idle time, the lanes of a
// cluster stop while unused, and the next operation for a master makes a
// new one; many connections meanwhile (under -race) show that a lane
// retiring never loses or double-answers an operation.
func TestClusterLanesRetireWhenIdle(t *testing.T) {
	t.Parallel() // a Redis Cluster of its own, which takes 2 s to form
	cl := redistest.StartCluster(t, 3)
	s := startStore(t, cl.Client(clusterOptions()), Config{Prefix: "tb:", Timeout: exactTimeout})
	s.laneIdle = 5 * time.Millisecond // before any lane exists
	loadScript(t, s)
	lanes := func() int {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return len(s.lanes)
	}
	l := bucket.Limit{Capacity: 1e6, Rate: 1e-6}
	const conns, runs = 8, 40
	var wg sync.WaitGroup
	for g := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := s.NewCaller()
			for i := range runs {
				for k := range 3 {
					c.Add(acquireOp(fmt.Sprintf("idle:%d", (g+i+k)%16), l, 1))
				}
				rs, err := c.Run()
				if err != nil {
					t.Errorf("Run: %v", err)
					return
				}
				for _, r := range rs {
					if !r.Decision.Allowed {
						t.Errorf("answer %+v, want allowed by Redis", r)
						return
					}
				}
				if i%8 == 0 {
					time.Sleep(10 * time.Millisecond) // idle long enough for lanes to retire
				}
			}
		}()
	}
	wg.Wait()
	if s.Errors() != 0 || s.Degraded() != 0 {
		t.Fatalf("errors %d, degraded %d; want none", s.Errors(), s.Degraded())
	}
	if st := s.Stats(); st.Allowed != conns*runs*3 {
		t.Fatalf("%d allowed, want %d", st.Allowed, conns*runs*3)
	}
	testkit.Eventually(t, 5*time.Second, "every idle lane retired", func() bool { return lanes() == 0 })
	if d := run1(t, s, acquireOp("after", l, 1)).Decision; !d.Allowed {
		t.Fatalf("acquire after the lanes retired: %+v", d)
	}
	if lanes() != 1 {
		t.Fatalf("%d lanes after one acquire, want 1", lanes())
	}
}

// TestClusterLaneRetiresOnce: a lane whose idle timer fires again while
// its dispatcher has not yet seen that its queue is closed must not retire
// (close the queue) twice. An idle time of a nanosecond makes the timer
// ready whenever the dispatcher looks, as a loaded machine does with the
// minute.
func TestClusterLaneRetiresOnce(t *testing.T) {
	t.Parallel() // a Redis Cluster of its own, which takes 2 s to form
	cl := redistest.StartCluster(t, 3)
	s := startStore(t, cl.Client(clusterOptions()), Config{Prefix: "tb:", Timeout: exactTimeout})
	s.laneIdle = time.Nanosecond // before any lane exists
	loadScript(t, s)
	lanes := func() int {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return len(s.lanes)
	}
	l := bucket.Limit{Capacity: 1e6, Rate: 1e-6}
	for i := range 30 {
		if d := run1(t, s, acquireOp(fmt.Sprint("once:", i), l, 1)).Decision; !d.Allowed {
			t.Fatalf("acquire %d: %+v", i, d)
		}
		testkit.Eventually(t, 5*time.Second, "the lane retired", func() bool { return lanes() == 0 })
	}
}

// TestClusterUnreachable: a cluster client whose seed nodes do not answer
// never learns a slot map; every operation gets the policy's answer within
// the timeout bound, and the store keeps asking for the map in the
// background without stalling anyone.
func TestClusterUnreachable(t *testing.T) {
	testkit.SkipShort(t, "fault injection: timeouts against cluster nodes that do not answer")
	cc := redis.NewClusterClient(ClusterClientOptions([]string{freeAddr(t), freeAddr(t)}))
	t.Cleanup(func() { _ = cc.Close() })
	s := startStore(t, cc, Config{Prefix: "tb:"})
	tm, rs := timedAcquires(t, s, 10, 10, "k")
	checkDegraded(t, "cluster unreachable", s, tm, rs, FailClosedDecision(s.cfg.Timeout))
	if s.Degraded() != int64(len(rs)) {
		t.Fatalf("degraded %d, want %d", s.Degraded(), len(rs))
	}
}
