package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/redistest"
)

// checkRedisStats compares s's counters with want and checks that they add
// up to Errors and Degraded, as INFO shows them.
func checkRedisStats(t *testing.T, s *Store, want RedisStats) {
	t.Helper()
	got := s.RedisStats()
	if got != want {
		t.Errorf("RedisStats %+v, want %+v", got, want)
	}
	if sum := got.ErrorReplies + got.Timeouts + got.TransportErrors; sum != s.Errors() {
		t.Errorf("error kinds add up to %d, Errors is %d", sum, s.Errors())
	}
	if sum := got.PolicyAcquires + got.PolicyPeeks; sum != s.Degraded() {
		t.Errorf("policy answers add up to %d, Degraded is %d", sum, s.Degraded())
	}
}

// TestRedisStatsByKind: each way Redis can fail is counted under its own
// kind, once per operation, and the policy's answers per command.
func TestRedisStatsByKind(t *testing.T) {
	l := bucket.Limit{Capacity: 10, Rate: 1}
	t.Run("transport", func(t *testing.T) {
		o := storeOptions()
		o.Addr = freeAddr(t) // refused at once
		rdb := redis.NewClient(o)
		t.Cleanup(func() { rdb.Close() })
		s := startStore(t, rdb, Config{Timeout: exactTimeout, FailOpen: true})
		runOps(t, s, acquireOp("a", l, 1), peekOp("b", l, 1), resetOp("c"))
		checkRedisStats(t, s, RedisStats{TransportErrors: 3, PolicyAcquires: 1, PolicyPeeks: 1, FailOpen: true})
	})
	t.Run("timeout", func(t *testing.T) {
		srv := redistest.Start(t)
		s := startStore(t, srv.Client(storeOptions()), Config{Timeout: 50 * time.Millisecond})
		loadScript(t, s)
		srv.Pause()
		defer srv.Resume()
		rs := runOps(t, s, acquireOp("a", l, 1), acquireOp("b", l, 1), peekOp("c", l, 1))
		if rs[0].Decision != FailClosedDecision(s.cfg.Timeout) {
			t.Fatalf("acquire with Redis paused: %+v, want the policy's", rs[0])
		}
		checkRedisStats(t, s, RedisStats{Timeouts: 3, PolicyAcquires: 2, PolicyPeeks: 1})
	})
	t.Run("error reply", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.Client(storeOptions())
		s := startStore(t, rdb, Config{Timeout: exactTimeout})
		loadScript(t, s)
		// A Redis that has no memory for a new bucket refuses the script's
		// write (OOM); reading and deleting still work.
		if err := rdb.ConfigSet(context.Background(), "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		// One at a time: operations in one pipeline share a script call,
		// and Redis refuses the whole call.
		rs := []decide.Answer{run1(t, s, acquireOp("a", l, 1)), run1(t, s, peekOp("b", l, 1)), run1(t, s, resetOp("c"))}
		if rs[0].Decision != FailClosedDecision(s.cfg.Timeout) || rs[1].Err != nil || !rs[1].Decision.Allowed || rs[2].Err != nil {
			t.Fatalf("answers %+v: want the policy's to the acquire, Redis's to the peek and the reset", rs)
		}
		checkRedisStats(t, s, RedisStats{ErrorReplies: 1, PolicyAcquires: 1})
	})
	t.Run("wrong type is the client's answer", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.Client(storeOptions())
		s := startStore(t, rdb, Config{Prefix: "tb:", Timeout: exactTimeout})
		loadScript(t, s)
		rdb.Set(context.Background(), "tb:s", "a string", 0)
		if r := run1(t, s, acquireOp("s", l, 1)); r.Err != decide.ErrWrongType {
			t.Fatalf("acquire on a string: %+v, want WRONGTYPE", r)
		}
		checkRedisStats(t, s, RedisStats{})
	})
}
