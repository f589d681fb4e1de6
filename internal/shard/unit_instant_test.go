package shard

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/testkit"
)

// blocker holds its shard's goroutine until release is closed, then
// optionally runs fn (e.g. what a sweep tick would do).
type blocker struct {
	running chan struct{}
	release chan struct{}
	fn      func(s *shard)
}

func (b *blocker) run(s *shard) {
	close(b.running)
	<-b.release
	if b.fn != nil {
		b.fn(s)
	}
}

// hookedClock is the manual clock, plus a signal on every read when armed.
type hookedClock struct {
	clk   *testkit.Clock
	armed atomic.Bool
	read  chan int64
}

func (h *hookedClock) now() int64 {
	v := h.clk.Now()
	if h.armed.Load() {
		select {
		case h.read <- v:
		default:
		}
	}
	return v
}

func shardOfKey(g *Group, k []byte) int { s, _ := g.route(k); return s }

// TestUnitNeverDecidesBeforeItsShardsLastInstant: a sweep tick that runs
// on shard A after the clock was read for a unit (on its other shard), but
// before A reached the unit's part, deletes a bucket as full at a later
// instant than that reading. Decided at the earlier instant, the part
// would recreate the bucket stamped then, and the refill between the two
// instants would be granted twice (found in review of the gated design,
// which decided every part at one reading: 21 tokens from a bucket of 10
// at 1/s in 10.5 s). A shard never decides before an instant it already
// used (invariant 3). The wait of up to 500 ms is for the clock reading:
// real time, since the point is an interleaving.
func TestUnitNeverDecidesBeforeItsShardsLastInstant(t *testing.T) {
	clk := testkit.NewClock()
	h := &hookedClock{clk: clk, read: make(chan int64, 1)}
	g := New(Config{Shards: 2, SweepInterval: time.Hour, Clock: h.now, Base: clk.Base()})
	defer g.Close()
	keys := keysOnDistinctShards(t, g, 2)
	kA, kB := keys[0], keys[1]
	lim := bucket.Limit{Capacity: 10, Rate: 1} // 1 token/s
	req := func(k []byte, cost float64) decide.Request {
		return decide.Request{Kind: decide.Acquire, Key: k, Limit: lim, Cost: cost}
	}
	granted := 0.0
	c := g.NewCaller()
	if a := runOne(t, c, req(kA, 10)); a.Decision.Allowed { // t=0: drain
		granted += 10
	}
	clk.Advance(9500 * time.Millisecond) // 9.5 tokens, not full

	bl := &blocker{running: make(chan struct{}), release: make(chan struct{}),
		fn: (*shard).sweepTick} // the tick that comes next
	if err := g.submit(shardOfKey(g, kA), bl); err != nil {
		t.Fatal(err)
	}
	<-bl.running
	h.armed.Store(true)
	u := g.NewCaller()
	type res struct {
		a   []decide.Answer
		err error
	}
	done := make(chan res, 1)
	go func() {
		u.Add(req(kA, 10))
		u.Add(req(kB, 1))
		a, err := u.RunIsolated()
		done <- res{append([]decide.Answer(nil), a...), err}
	}()
	var unitNow int64 = -1
	select {
	case unitNow = <-h.read: // the clock was read for the unit (on B)
	case <-time.After(500 * time.Millisecond):
	}
	h.armed.Store(false)
	clk.Advance(time.Second) // t = 10.5 s when the tick fires
	close(bl.release)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("unit instant %d µs; unit's 10-token acquire on A allowed=%v", unitNow, r.a[0].Decision.Allowed)
	if r.a[0].Decision.Allowed {
		granted += 10
	}
	if a := runOne(t, c, req(kA, 1)); a.Decision.Allowed { // t = 10.5 s
		granted++
	}
	// cap 10 + 10.5 s * 1/s = 20.5: at most 20 whole tokens by t = 10.5 s.
	if granted > 20.5 {
		t.Errorf("granted %v tokens from a bucket of 10 refilled at 1/s over 10.5 s (at most 20.5)", granted)
	}
}

// TestUnitThrottleNeverDecidesBeforeItsShardsLastInstant: the same with
// no emulated sweep: another client's CL.THROTTLE of quantity 0, queued
// before the unit, runs at a later clock reading, finds the GCRA expired
// and deletes it; the unit's CL.THROTTLE must not then run at its earlier
// instant on no state (found in review: 3 allowed in 1.5 s at burst 1,
// 1/s).
func TestUnitThrottleNeverDecidesBeforeItsShardsLastInstant(t *testing.T) {
	clk := testkit.NewClock()
	h := &hookedClock{clk: clk, read: make(chan int64, 1)}
	g := New(Config{Shards: 2, SweepInterval: time.Hour, Clock: h.now, Base: clk.Base()})
	defer g.Close()
	keys := keysOnDistinctShards(t, g, 2)
	kA, kB := keys[0], keys[1]
	q1, _ := bucket.NewGCRA(0, 1, 1, 1) // burst 1, 1 per second, quantity 1
	q0, _ := bucket.NewGCRA(0, 1, 1, 0) // quantity 0: a look
	thr := func(k []byte, q bucket.GCRA) decide.Request {
		return decide.Request{Kind: decide.Throttle, Key: k, Quota: q}
	}
	allowed := 0
	c := g.NewCaller()
	if a := runOne(t, c, thr(kA, q1)); !a.Throttle.Limited { // t=0, TAT -> 1 s
		allowed++
	}
	clk.Advance(500 * time.Millisecond)
	bl := &blocker{running: make(chan struct{}), release: make(chan struct{})}
	if err := g.submit(shardOfKey(g, kA), bl); err != nil {
		t.Fatal(err)
	}
	<-bl.running
	// W: another client's CL.THROTTLE quantity 0, queued before the unit.
	wc := g.NewCaller()
	wdone := make(chan decide.Answer, 1)
	go func() { wc.Add(thr(kA, q0)); a, _ := wc.Run(); wdone <- a[0] }()
	for g.shards[shardOfKey(g, kA)].queue.len() == 0 {
		time.Sleep(time.Millisecond)
	}
	h.armed.Store(true)
	u := g.NewCaller()
	done := make(chan []decide.Answer, 1)
	go func() {
		u.Add(thr(kA, q1))
		u.Add(thr(kB, q1))
		a, err := u.RunIsolated()
		if err != nil {
			t.Error(err)
		}
		done <- append([]decide.Answer(nil), a...)
	}()
	var unitNow int64 = -1
	select {
	case unitNow = <-h.read:
	case <-time.After(500 * time.Millisecond):
	}
	h.armed.Store(false)
	clk.Advance(500 * time.Millisecond) // W runs at 1.0 s, after the unit's instant
	// the shard reads the clock for W: let it through unhooked
	close(bl.release)
	<-wdone
	ua := <-done
	t.Logf("unit instant %d µs; unit's throttle limited=%v", unitNow, ua[0].Throttle.Limited)
	if !ua[0].Throttle.Limited {
		allowed++
	}
	clk.Advance(500 * time.Millisecond) // 1.5 s
	if a := runOne(t, c, thr(kA, q1)); !a.Throttle.Limited {
		allowed++
	}
	// burst 1 + 1/s: in [0, 1.5 s] at most 1 + floor(1.5) = 2.
	if allowed > 2 {
		t.Errorf("CL.THROTTLE (burst 1, 1/s) allowed %d times in 1.5 s (at most 2)", allowed)
	}
}

// idle is a task that does nothing: it only takes room in a queue.
type idle struct{}

func (idle) run(*shard) {}

// TestPipelineNeverStraddlesAUnit: a plain pipeline that reads two buckets
// on two shards while a unit takes from both must see the unit on both or
// on neither, as in Redis, where EXEC runs between two commands of a
// pipeline, never inside one. A and C are busy when the unit comes, B is
// not; if the pipeline could be queued between the unit's parts, its read
// of B would run before the unit's part on B and its read of A after the
// unit's part on A. (The earlier design, with queues of a fixed depth,
// made the unit wait for room on C's full queue after queueing on A.)
func TestPipelineNeverStraddlesAUnit(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 8, SweepInterval: time.Hour})
	keys := keysOnDistinctShards(t, g, 3)
	kA, kC, kB := keys[0], keys[1], keys[2]
	const capacity = 1e9
	holdA := &blocker{running: make(chan struct{}), release: make(chan struct{})}
	holdC := &blocker{running: make(chan struct{}), release: make(chan struct{})}
	for _, h := range []struct {
		k []byte
		b *blocker
	}{{kA, holdA}, {kC, holdC}} {
		if err := g.submit(shardOfKey(g, h.k), h.b); err != nil {
			t.Fatal(err)
		}
		<-h.b.running
	}
	for range 2 { // work waiting on C
		if err := g.submit(shardOfKey(g, kC), idle{}); err != nil {
			t.Fatal(err)
		}
	}
	queueA := g.shards[shardOfKey(g, kA)].queue
	unitDone := make(chan error, 1)
	go func() {
		u := g.NewCaller()
		for _, k := range [][]byte{kA, kC, kB} {
			u.Add(acquire(string(k), capacity, 1e-9, 1))
		}
		_, err := u.RunIsolated()
		unitDone <- err
	}()
	testkit.Eventually(t, 5*time.Second, "the unit's part queued on A", func() bool { return queueA.len() == 1 })
	pipeDone := make(chan []decide.Answer, 1)
	go func() {
		p := g.NewCaller()
		p.Add(acquire(string(kA), capacity, 1e-9, 0))
		p.Add(acquire(string(kB), capacity, 1e-9, 0))
		res, err := p.Run()
		if err != nil {
			t.Error(err)
		}
		pipeDone <- append([]decide.Answer(nil), res...)
	}()
	// Give the pipeline real time to queue, if it can (the point is an
	// interleaving): its read of A lands behind the unit's part.
	for deadline := time.Now().Add(200 * time.Millisecond); queueA.len() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(holdA.release)
	close(holdC.release)
	if err := <-unitDone; err != nil {
		t.Fatal(err)
	}
	res := <-pipeDone
	if len(res) != 2 {
		t.Fatalf("pipeline answers %v", res)
	}
	if a, b := res[0].Decision.Remaining, res[1].Decision.Remaining; a != b {
		t.Fatalf("one pipeline saw the unit half done: %d left on A, %d on B", a, b)
	}
}
