package redisstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/testkit"
)

// Store mode on a Redis Cluster whose master dies (issue 10, item 1): an
// unreachable node affects only its own slots, and a decision Redis made
// (and charged) is the decision the client gets.

// faultLimit is the limit of the keys under load: a capacity more than
// the test can spend, so Redis allows every acquire and any denial is the
// policy's, and a rate so small that the tokens spent can be read back.
var faultLimit = bucket.Limit{Capacity: 1e6, Rate: 1e-6}

// The load of TestClusterMasterDown: 10 connections, each sending a Run
// every 10 ms (1,000 Runs a second in all). Even connections send one
// acquire per Run on any key; odd ones a pipeline of three, one key on each
// master, so a connection's pipeline spans the nodes.
const (
	faultConns    = 10
	faultInterval = 10 * time.Millisecond
	faultKeys     = 8 // per master
)

// faultOp is one acquire of the load and what the client was told.
type faultOp struct {
	node       int // index in the cluster's Nodes of the key's master
	key        string
	answer     decide.Answer
	start, end time.Time // of the Run that carried it
	outage     bool      // the Run started after the master went down
}

// TestClusterMasterDown: three masters, store mode with a 50 ms timeout
// (fail-closed), load over keys on all three masters, then one master goes
// down: killed (kill -9; its port refuses connections) or paused (SIGSTOP;
// connections stay open and nothing is answered, as a hung or cut-off
// node). The cluster runs with a one-minute node timeout, so within the
// test no node marks the down master failed: its slots stay assigned to it
// and CLUSTER INFO says cluster_state:ok on the live masters (checked at
// the end). During the outage:
//   - keys on the two live masters are answered by Redis (allowed), never by
//     the policy;
//   - charged-but-denied is 0: on every live-master key, the tokens Redis
//     spent equal the allowed answers the clients got;
//   - keys on the down master get the policy's answer within the timeout
//     bound.
//
// A loaded machine can stall this process or a live redis-server past the
// timeout, and then an answer from a live master may truly come too late
// and be the policy's. The test measures such stalls (stallMeter: how late
// a sleeping goroutine wakes, as checkDegraded does, and how long a PING
// to each live master takes) and excuses only policy answers whose Run
// overlapped stalls of at least a quarter of the timeout. Charged-but-denied
// may not exceed the excused answers. On an idle machine nothing is
// excused.
func TestClusterMasterDown(t *testing.T) {
	testkit.SkipShort(t, "cluster failover: a master killed or paused under load")
	for _, tc := range []struct {
		name string
		down func(*redistest.Server)
	}{
		{"killed", (*redistest.Server).Kill},
		{"paused", (*redistest.Server).Pause},
	} {
		t.Run(tc.name, func(t *testing.T) { clusterMasterDown(t, tc.name, tc.down) })
	}
}

// clusterMasterDown is TestClusterMasterDown with one way of taking a
// master down.
func clusterMasterDown(t *testing.T, how string, down func(*redistest.Server)) {
	cl := redistest.StartCluster(t, 3, "--cluster-node-timeout", "60000")
	const timeout = 50 * time.Millisecond
	s := startStore(t, cl.Client(clusterOptions()), Config{Prefix: "tb:", Timeout: timeout})
	loadScript(t, s)
	direct := cl.Client()
	keys := keysPerMaster(t, direct, cl, "tb:", faultKeys)
	const dead = 0

	meter := startStallMeter(t, cl.Nodes[1].Addr, cl.Nodes[2].Addr) // the live masters
	var outage atomic.Bool
	stop := make(chan struct{})
	var mu sync.Mutex
	var ops []faultOp
	var wg sync.WaitGroup
	for g := range faultConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := faultConnection(t, s, keys, g, &outage, stop)
			mu.Lock()
			ops = append(ops, mine...)
			mu.Unlock()
		}()
	}

	time.Sleep(300 * time.Millisecond) // real load on a healthy cluster first
	down(cl.Nodes[dead])
	outage.Store(true)
	time.Sleep(1500 * time.Millisecond) // the outage under real load
	close(stop)
	wg.Wait()
	stalls := meter.stop()

	for i, n := range cl.Nodes {
		if i == dead {
			continue
		}
		if st := clusterState(t, n.Addr); st != "ok" {
			t.Fatalf("live master %s says cluster_state:%s at the end of the outage; the test needs the slots assigned (a longer node timeout?)", n.Addr, st)
		}
	}
	checkClusterOutage(t, how, s, direct, ops, stalls, dead)
}

// faultConnection sends connection g's Runs every faultInterval until stop
// and returns every operation with its answer.
func faultConnection(t *testing.T, s *Store, keys [][]string, g int, outage *atomic.Bool, stop chan struct{}) []faultOp {
	c := s.NewCaller()
	rng := rand.New(rand.NewPCG(uint64(g), 1))
	tick := time.NewTicker(faultInterval) // pacing: real time is the point
	defer tick.Stop()
	var mine []faultOp
	for {
		select {
		case <-stop:
			return mine
		case <-tick.C:
		}
		var run []faultOp
		if g%2 == 0 {
			n := rng.IntN(len(keys))
			run = append(run, faultOp{node: n, key: keys[n][rng.IntN(len(keys[n]))]})
		} else {
			for _, n := range rng.Perm(len(keys)) {
				run = append(run, faultOp{node: n, key: keys[n][rng.IntN(len(keys[n]))]})
			}
		}
		for _, op := range run {
			c.Add(acquireOp(op.key, faultLimit, 1))
		}
		out := outage.Load()
		start := time.Now()
		rs, err := c.Run()
		end := time.Now()
		if err != nil {
			t.Errorf("Run: %v", err)
			return mine
		}
		for i := range run {
			run[i].answer, run[i].start, run[i].end, run[i].outage = rs[i], start, end, out
		}
		mine = append(mine, run...)
	}
}

// outageTally is what the clients of TestClusterMasterDown were told.
type outageTally struct {
	fromRedis, fromPolicy int // live-slot answers during the outage
	// Live-slot answers from the policy over the whole run (warm-up
	// included), with and without stalls to explain them.
	excused, unexcused int
	deadOps, deadRedis int           // dead-slot answers during the outage
	slowestDead        time.Duration // without the stalls it overlapped
	allowed            map[string]int
}

// tally counts ops; a policy answer is excused when its Run overlapped
// stalls of at least excuse.
func tally(t *testing.T, ops []faultOp, st *stallMeter, dead int, policy bucket.Decision, excuse time.Duration) outageTally {
	t.Helper()
	n := outageTally{allowed: map[string]int{}}
	for _, op := range ops {
		d := op.answer.Decision
		if op.answer.Err != nil || (!d.Allowed && d != policy) {
			t.Fatalf("key %s: answer %+v is neither Redis's allowed nor the policy's %+v", op.key, op.answer, policy)
		}
		stalled := st.overlap(op.start, op.end)
		switch {
		case op.node == dead && op.outage:
			n.deadOps++
			if d.Allowed {
				n.deadRedis++
			}
			n.slowestDead = max(n.slowestDead, op.end.Sub(op.start)-stalled)
		case op.node == dead:
		case d.Allowed:
			n.allowed[op.key]++
			if op.outage {
				n.fromRedis++
			}
		default:
			if op.outage {
				n.fromPolicy++
			}
			if stalled >= excuse {
				n.excused++
			} else {
				n.unexcused++
			}
		}
	}
	return n
}

// charged returns the tokens Redis spent on the keys of allowed and how
// many of them no client was told allowed.
func charged(t *testing.T, direct *redis.ClusterClient, allowed map[string]int) (spentAll, chargedButDenied int) {
	t.Helper()
	for key, n := range allowed {
		state, ok := redistest.StoredBucket(t, direct, "tb:"+key)
		if !ok {
			t.Fatalf("key tb:%s: %d allowed answers but no bucket in Redis", key, n)
		}
		spent := int(math.Round(faultLimit.Capacity - state.Tokens))
		spentAll += spent
		if spent < n {
			t.Errorf("key tb:%s: %d allowed answers but Redis spent only %d tokens", key, n, spent)
		}
		chargedButDenied += spent - n
	}
	return spentAll, chargedButDenied
}

// checkClusterOutage checks and logs what the clients were told and what
// Redis charged (see TestClusterMasterDown).
func checkClusterOutage(t *testing.T, how string, s *Store, direct *redis.ClusterClient, ops []faultOp, st *stallMeter, dead int) {
	t.Helper()
	bound := failureBound(s.cfg.Timeout)
	excuse := s.cfg.Timeout / 4
	n := tally(t, ops, st, dead, FailClosedDecision(s.cfg.Timeout), excuse)
	spent, chargedButDenied := charged(t, direct, n.allowed)
	t.Logf("master %d %s, timeout %v, fail-closed: during the outage live-slot answers %d from Redis, %d from the policy; "+
		"whole run: %d tokens charged on live-slot keys, charged-but-denied %d, live-slot policy answers %d in Runs that overlapped stalls >= %v and %d without; "+
		"dead-slot answers %d, %d from the policy, slowest %v without stalls (bound %v); worst stall %v",
		dead, how, s.cfg.Timeout, n.fromRedis, n.fromPolicy, spent, chargedButDenied, n.excused, excuse, n.unexcused,
		n.deadOps, n.deadOps-n.deadRedis, n.slowestDead.Round(time.Microsecond), bound, st.worst().Round(time.Microsecond))
	if n.fromRedis+n.fromPolicy == 0 || n.deadOps == 0 {
		t.Fatalf("the load did not reach both sides: %d live-slot and %d dead-slot answers during the outage", n.fromRedis+n.fromPolicy, n.deadOps)
	}
	if n.unexcused > 0 {
		t.Errorf("%d answers on keys of live masters came from the policy with no stall of this process or a live master to explain them; want every one from Redis", n.unexcused)
	}
	if chargedButDenied > n.excused {
		t.Errorf("charged-but-denied %d: Redis spent tokens for denied answers beyond the %d answers stalls can explain; want 0", chargedButDenied, n.excused)
	}
	if n.deadRedis > 0 {
		t.Errorf("%d dead-slot answers allowed while the master was down; want the policy's", n.deadRedis)
	}
	if n.slowestDead > bound {
		t.Errorf("a dead-slot answer took %v beyond the stalls; want within %v", n.slowestDead, bound)
	}
}

// keysPerMaster returns n keys for each master of cl (in the order of
// cl.Nodes) that the cluster stores, with prefix, on that master.
func keysPerMaster(t *testing.T, cc *redis.ClusterClient, cl *redistest.Cluster, prefix string, n int) [][]string {
	t.Helper()
	index := map[string]int{}
	for i, node := range cl.Nodes {
		index[node.Addr] = i
	}
	keys := make([][]string, len(cl.Nodes))
	for i, full := 0, 0; full < len(keys); i++ {
		key := fmt.Sprintf("fault:%d", i)
		owner, err := cc.MasterForKey(context.Background(), prefix+key)
		if err != nil {
			t.Fatalf("MasterForKey: %v", err)
		}
		j, ok := index[owner.Options().Addr]
		if !ok {
			t.Fatalf("master %s is not one of the cluster's nodes", owner.Options().Addr)
		}
		if len(keys[j]) < n {
			keys[j] = append(keys[j], key)
			if len(keys[j]) == n {
				full++
			}
		}
	}
	return keys
}

// clusterState returns the cluster_state CLUSTER INFO of the node at addr
// reports.
func clusterState(t *testing.T, addr string) string {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	info, err := rdb.ClusterInfo(context.Background()).Result()
	if err != nil {
		t.Fatalf("CLUSTER INFO on %s: %v", addr, err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_state:"); ok {
			return v
		}
	}
	t.Fatalf("CLUSTER INFO on %s has no cluster_state: %s", addr, info)
	return ""
}

// stallMeter records when the machine did not run this process or the
// live Redis servers: a goroutine sleeps 1 ms at a time, and each wake-up
// more than 1 ms late is a stall from when it should have woken to when it
// did; for each server a goroutine sends PING every millisecond, and a
// reply that takes more than 2 ms (a few tens of microseconds on an idle
// loopback) is a stall from the PING to the reply. On an idle machine it
// records nothing.
type stallMeter struct {
	done   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	stalls []stall // merged and sorted by stop
}

type stall struct{ from, to time.Time }

func startStallMeter(t *testing.T, addrs ...string) *stallMeter {
	m := &stallMeter{done: make(chan struct{})}
	m.measure(func() (time.Time, time.Time, bool) {
		start := time.Now()
		time.Sleep(time.Millisecond) // measuring the scheduler, not waiting for something
		due, now := start.Add(time.Millisecond), time.Now()
		return due, now, now.Sub(due) > time.Millisecond
	})
	for _, addr := range addrs {
		rdb := nodeClient(t, addr)
		m.measure(func() (time.Time, time.Time, bool) {
			time.Sleep(time.Millisecond) // pacing the PINGs: real time is the point
			start := time.Now()
			err := rdb.Ping(context.Background()).Err()
			now := time.Now()
			return start, now, err == nil && now.Sub(start) > 2*time.Millisecond
		})
	}
	return m
}

// measure runs probe until stop, recording the stalls it reports.
func (m *stallMeter) measure(probe func() (from, to time.Time, stalled bool)) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			select {
			case <-m.done:
				return
			default:
			}
			if from, to, stalled := probe(); stalled {
				m.mu.Lock()
				m.stalls = append(m.stalls, stall{from, to})
				m.mu.Unlock()
			}
		}
	}()
}

// stop ends the measurement and merges the stalls that overlap; m's
// methods may be called after it.
func (m *stallMeter) stop() *stallMeter {
	close(m.done)
	m.wg.Wait()
	slices.SortFunc(m.stalls, func(a, b stall) int { return a.from.Compare(b.from) })
	var merged []stall
	for _, s := range m.stalls {
		if n := len(merged); n > 0 && !s.from.After(merged[n-1].to) {
			merged[n-1].to = maxTime(merged[n-1].to, s.to)
			continue
		}
		merged = append(merged, s)
	}
	m.stalls = merged
	return m
}

// overlap returns how much of [from, to] the machine or a server stalled.
func (m *stallMeter) overlap(from, to time.Time) time.Duration {
	var sum time.Duration
	for _, s := range m.stalls {
		if a, b := maxTime(s.from, from), minTime(s.to, to); b.After(a) {
			sum += b.Sub(a)
		}
	}
	return sum
}

// worst returns the longest stall.
func (m *stallMeter) worst() time.Duration {
	var w time.Duration
	for _, s := range m.stalls {
		w = max(w, s.to.Sub(s.from))
	}
	return w
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
