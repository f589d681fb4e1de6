package redisstore

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
)

// TestPipeTimerAnswersEachAtItsDeadline: a pipeline that carries an
// operation near its deadline and one that has just started runs until the
// later deadline, and the timer answers each operation at its own: the
// old one now, the young one not before its deadline (so that Redis's reply
// to it, when it comes in time, is the answer).
func TestPipeTimerAnswersEachAtItsDeadline(t *testing.T) {
	rdb := redis.NewClient(storeOptions()) // nothing is sent
	t.Cleanup(func() { _ = rdb.Close() })
	s := startStore(t, rdb, Config{Timeout: time.Hour})
	now := time.Now()
	old, young := s.NewCaller().(*Caller), s.NewCaller().(*Caller)
	l := bucket.Limit{Capacity: 1, Rate: 1}
	for _, x := range []struct {
		c        *Caller
		deadline time.Time
	}{{old, now.Add(-time.Millisecond)}, {young, now.Add(time.Hour)}} {
		x.c.Add(acquireOp("k", l, 1))
		x.c.results = make([]decide.Answer, 1)
		x.c.pending.Store(1)
		x.c.deadline = x.deadline
	}
	p := newPipe(&part{c: old, ops: []int32{0}}, 2)
	p.add(&part{c: young, ops: []int32{0}})
	p.answered = make([]atomic.Uint32, len(p.refs))
	if !p.deadline.Equal(young.deadline) {
		t.Fatalf("the pipeline's deadline is %v, want the young operation's %v", p.deadline, young.deadline)
	}

	next, left := s.expirePipe(p, "")
	if p.answered[0].Load() != 1 || old.results[0] != s.fail {
		t.Fatalf("the old operation is not answered by the policy: %+v", old.results[0])
	}
	if p.answered[1].Load() != 0 {
		t.Fatal("the young operation was answered before its deadline")
	}
	if want := young.deadline.Add(s.grace); !left || !next.Equal(want) {
		t.Fatalf("next due %v (left %v), want %v", next, left, want)
	}
	if !s.settle(p, 1, decide.Answer{Decision: bucket.Decision{Allowed: true}}, nil) {
		t.Fatal("Redis's reply to the young operation was not its answer")
	}
	if _, left := s.expirePipe(p, ""); left {
		t.Fatal("operations left after every one was answered")
	}
}
