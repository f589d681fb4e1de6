package redisstore

import (
	"fmt"
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

// The load of TestSentinelFailover: 4 connections, each sending a Run of
// one acquire on a key of its own every 5 ms, under faultLimit (Redis
// allows every one of them, with tokens left, so an answer tells where it
// came from).
const (
	sentinelConns    = 4
	sentinelInterval = 5 * time.Millisecond
)

// sentinelOp is one acquire of the load and what the client was told.
type sentinelOp struct {
	answer     decide.Answer
	start, end time.Time
}

// TestSentinelFailover: store mode through Redis Sentinel (three
// Sentinels, a master and its replica) with the default 50 ms timeout and
// a steady load; the master goes down, killed (kill -9) or paused
// (SIGSTOP: connections stay open and nothing is answered), and the
// Sentinels promote the replica. Until the client reaches the new master
// every answer is the policy's (--on-redis-error: deny for the killed
// master, allow for the paused one), each within the timeout bound; then
// Redis decides again, on the new master, where a key drains. The figures
// (time to the first answer from the new master, answers by source,
// slowest answer) are logged; docs/history.md quotes them.
func TestSentinelFailover(t *testing.T) {
	testkit.SkipShort(t, "Sentinel: failovers under load")
	for _, tc := range []struct {
		name     string
		down     func(*redistest.Server)
		failOpen bool
	}{
		{"killed, fail-closed", (*redistest.Server).Kill, false},
		{"paused, fail-open", (*redistest.Server).Pause, true},
	} {
		t.Run(tc.name, func(t *testing.T) { sentinelFailover(t, tc.name, tc.down, tc.failOpen) })
	}
}

func sentinelFailover(t *testing.T, how string, down func(*redistest.Server), failOpen bool) {
	sen := redistest.StartSentinel(t, 3)
	opts, err := FailoverOptions(sen.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewFailoverClient(opts)
	t.Cleanup(func() { _ = client.Close() }) // the old master may be paused
	s := startStore(t, client, Config{Prefix: "tb:", Timeout: DefaultTimeout, FailOpen: failOpen})
	loadScript(t, s)

	meter := startStallMeter(t)
	var downAt atomic.Pointer[time.Time]
	var redisSince atomic.Int64 // Redis answers to Runs started after the master went down
	stop := make(chan struct{})
	var mu sync.Mutex
	var ops []sentinelOp
	var wg sync.WaitGroup
	for g := range sentinelConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := sentinelConnection(t, s, fmt.Sprint("load:", g), &downAt, &redisSince, stop)
			mu.Lock()
			ops = append(ops, mine...)
			mu.Unlock()
		}()
	}
	time.Sleep(300 * time.Millisecond) // real load on a healthy master first
	old := sen.Master()
	at := time.Now()
	downAt.Store(&at)
	down(old)
	next := sen.WaitFailover(old)
	named := time.Since(at)
	testkit.Eventually(t, 20*time.Second, "Redis to answer the load again", func() bool { return redisSince.Load() > 0 })
	time.Sleep(300 * time.Millisecond) // real load on the new master
	close(stop)
	wg.Wait()
	stalls := meter.stop()

	checkSentinelOutage(t, how, s, ops, stalls, at, named)
	checkDrainsOn(t, s, next)
}

// sentinelConnection sends Runs every sentinelInterval until stop and
// returns every acquire with its answer; it counts in redisSince the
// answers from Redis to Runs started after downAt.
func sentinelConnection(t *testing.T, s *Store, key string, downAt *atomic.Pointer[time.Time], redisSince *atomic.Int64, stop chan struct{}) []sentinelOp {
	c := s.NewCaller()
	var ops []sentinelOp
	for {
		select {
		case <-stop:
			return ops
		default:
		}
		c.Add(acquireOp(key, faultLimit, 1))
		start := time.Now()
		rs, err := c.Run()
		end := time.Now()
		if err != nil {
			t.Errorf("Run: %v", err)
			return ops
		}
		ops = append(ops, sentinelOp{answer: rs[0], start: start, end: end})
		if at := downAt.Load(); at != nil && start.After(*at) && fromRedis(rs[0]) {
			redisSince.Add(1)
		}
		time.Sleep(sentinelInterval) // the load's pace: real time is the point
	}
}

// fromRedis tells an answer of Redis under faultLimit (allowed, tokens
// left) from the policy's (denied, or allowed with nothing left).
func fromRedis(a decide.Answer) bool {
	return a.Err == nil && a.Decision.Allowed && a.Decision.Remaining > 0
}

// checkSentinelOutage checks and logs the answers: each Redis's or the
// policy's, each within the timeout bound beyond the stalls it overlapped,
// the policy's counted as degraded. The failover, for the figures, lasts
// from the master going down (at) to the first answer from the new master.
func checkSentinelOutage(t *testing.T, how string, s *Store, ops []sentinelOp, st *stallMeter, at time.Time, named time.Duration) {
	t.Helper()
	policy, name := FailClosedDecision(s.cfg.Timeout), "deny"
	if s.cfg.FailOpen {
		policy, name = FailOpenDecision(), "allow"
	}
	bound := failureBound(s.cfg.Timeout)
	var resumedAt time.Time
	var slowest, slowestRaw time.Duration
	policyAll := 0
	for _, op := range ops {
		redisAnswer := fromRedis(op.answer)
		if !redisAnswer && (op.answer.Err != nil || op.answer.Decision != policy) {
			t.Fatalf("answer %+v is neither Redis's nor the policy's %+v", op.answer, policy)
		}
		if !redisAnswer {
			policyAll++
		}
		if redisAnswer && !op.start.Before(at) && (resumedAt.IsZero() || op.end.Before(resumedAt)) {
			resumedAt = op.end
		}
		took := op.end.Sub(op.start)
		slowestRaw = max(slowestRaw, took)
		slowest = max(slowest, took-st.overlap(op.start, op.end))
	}
	var before, during, after, afterPolicy int
	for _, op := range ops {
		switch {
		case op.start.Before(at):
			before++
		case op.end.Before(resumedAt):
			during++
		default:
			after++
			if !fromRedis(op.answer) {
				afterPolicy++
			}
		}
	}
	t.Logf("master %s, --redis-timeout %v, --on-redis-error %s: the Sentinels named the new master %v after, the first answer came from it %v after; "+
		"%d answers before; %d during the failover, all the policy's; %d after (%d of them the policy's); "+
		"slowest answer %v beyond the machine's stalls (%v in all; bound %v; worst stall %v); script loads %d",
		how, s.cfg.Timeout, name, named.Round(time.Millisecond), resumedAt.Sub(at).Round(time.Millisecond),
		before, during, after, afterPolicy, slowest.Round(time.Microsecond), slowestRaw.Round(time.Microsecond), bound,
		st.worst().Round(time.Microsecond), s.ScriptLoads())
	if during == 0 || after == 0 {
		t.Fatalf("the load did not cover the failover: %d answers during it, %d after", during, after)
	}
	if slowest > bound {
		t.Errorf("an answer took %v beyond the machine's stalls; want within %v", slowest, bound)
	}
	if got := s.Degraded(); got != int64(policyAll) {
		t.Errorf("Degraded() = %d, want the %d policy answers", got, policyAll)
	}
}

// checkDrainsOn: after the failover Redis decides again, on the new
// master: a fresh key drains (three allowed, then Redis's own denial) and
// is stored there empty.
func checkDrainsOn(t *testing.T, s *Store, master *redistest.Server) {
	t.Helper()
	l := bucket.Limit{Capacity: 3, Rate: 1e-6}
	attempt := 0
	var rs []decide.Answer
	testkit.Eventually(t, 10*time.Second, "a key to drain on the new master", func() bool {
		attempt++
		key := fmt.Sprint("drain:", attempt) // a fresh key: a policy answer may have run on Redis
		rs = runOps(t, s, acquireOp(key, l, 1), acquireOp(key, l, 1), acquireOp(key, l, 1), acquireOp(key, l, 1))
		for i, r := range rs[:3] {
			if !r.Decision.Allowed || r.Decision.Remaining != int64(2-i) {
				return false
			}
		}
		d := rs[3].Decision
		if d.Allowed || d.RetryAfterMs < 1000 { // Redis's denial: a token in 1e6 s
			return false
		}
		state, ok := redistest.StoredBucket(t, master.Client(), "tb:"+key)
		return ok && state.Tokens == 0
	})
}
