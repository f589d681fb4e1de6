package shard

import (
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/testkit"
)

// queued is the number of tasks waiting in shard i's queue.
func queued(g *Group, i int) int { return g.shards[i].queue.len() }

// Probes for the ways work across shards could hang, each found in a
// review of the earlier design (three mechanisms: plain Runs queued under
// a process-wide mutex, gated transactions, parked groups). Each waits for
// what it probes with a bound of real time: the point is an interleaving
// of goroutines, and a hang shows as that bound passing.

// within runs fn in a goroutine and reports whether it returned within d.
func within(d time.Duration, fn func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// hold occupies shard i's goroutine until the returned func is called.
func hold(t *testing.T, g *Group, i int) (release func()) {
	t.Helper()
	b := &blocker{running: make(chan struct{}), release: make(chan struct{})}
	if err := g.submit(i, b); err != nil {
		t.Fatal(err)
	}
	<-b.running
	return func() { close(b.release) }
}

// TestGroupAcrossShardsMeetingCloseNeverHangs: a TB.MACQUIRE group across
// shards A and B is run while the group closes, B has already stopped and
// A is still busy. Run must return ErrClosed, and Close must return. (The
// parking design queued a park task on B's stopped queue and waited for it
// forever, with A parked for the unit: both hung.)
func TestGroupAcrossShardsMeetingCloseNeverHangs(t *testing.T) {
	// Not newTestGroup: its cleanup would wait for Close, which is what
	// this test probes.
	g := New(Config{Shards: 2, SweepInterval: time.Hour})
	keys := keysOnDistinctShards(t, g, 2)
	releaseA := hold(t, g, shardOfKey(g, keys[0]))
	closed := make(chan struct{})
	go func() {
		g.Close()
		close(closed)
	}()
	// Close has told every shard to stop; B, idle, stops at once. The wait
	// is real time: B's goroutine must have returned (the interleaving).
	time.Sleep(50 * time.Millisecond)
	var err error
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		c := g.NewCaller()
		c.AddAll([]decide.Request{acquire(string(keys[0]), 10, 1, 1), acquire(string(keys[1]), 10, 1, 1)})
		_, err = c.Run()
	}()
	time.Sleep(50 * time.Millisecond) // the unit queues what it can
	releaseA()
	select {
	case <-ran:
	case <-time.After(2 * time.Second):
		t.Fatal("a group across shards did not return within 2 s of meeting Close")
	}
	if err != ErrClosed {
		t.Fatalf("Run after Close = %v, want ErrClosed", err)
	}
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not return within 2 s")
	}
}

// TestCallerReusedAfterCloseNeverHangs: a connection's Caller that got
// ErrClosed may be asked again (the next command of the pipeline); every
// call must return ErrClosed at once. (The parking design left a release
// signal in a park that never ran, and the next call blocked on it.)
func TestCallerReusedAfterCloseNeverHangs(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 4, SweepInterval: time.Hour})
	keys := keysOnDistinctShards(t, g, 4)
	g.Close()
	c := g.NewCaller()
	for i := range 20 {
		ok := within(time.Second, func() {
			c.AddAll([]decide.Request{acquire(string(keys[0]), 10, 1, 1), acquire(string(keys[1]), 10, 1, 1)})
			c.Add(acquire(string(keys[2]), 10, 1, 1))
			if _, err := c.Run(); err != ErrClosed {
				t.Errorf("call %d after Close: %v, want ErrClosed", i, err)
			}
			c.Add(acquire(string(keys[3]), 10, 1, 1))
			c.Add(acquire(string(keys[1]), 10, 1, 1))
			if _, err := c.RunIsolated(); err != ErrClosed {
				t.Errorf("isolated call %d after Close: %v, want ErrClosed", i, err)
			}
		})
		if !ok {
			t.Fatalf("call %d on a Caller after ErrClosed did not return within 1 s", i)
		}
	}
}

// TestBusyShardDelaysNoWorkElsewhere: while shard X is held and work for
// it piles up (plain calls, and a unit on X and Y), a pipeline on two
// other shards Y and Z is answered at once. Nothing that orders work
// across shards may wait for room on a busy shard while holding others
// up. (The earlier design held its process-wide mutex while blocked on
// X's full queue, so the pipeline waited as long as X was held.)
func TestBusyShardDelaysNoWorkElsewhere(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 8, SweepInterval: time.Hour})
	keys := keysOnDistinctShards(t, g, 3)
	kX, kY, kZ := keys[0], keys[1], keys[2]
	releaseX := hold(t, g, shardOfKey(g, kX))
	defer func() {
		if releaseX != nil {
			releaseX()
		}
	}()
	for range 4 { // plain calls waiting for X
		go func() {
			c := g.NewCaller()
			c.Add(acquire(string(kX), 1e9, 1, 1))
			c.Run() //nolint:errcheck // only fills X's queue
		}()
	}
	testkit.Eventually(t, 5*time.Second, "plain calls queued on X", func() bool { return queued(g, shardOfKey(g, kX)) >= 1 })
	unitDone := make(chan error, 1)
	go func() {
		u := g.NewCaller()
		u.Add(acquire(string(kX), 1e9, 1, 1))
		u.Add(acquire(string(kY), 1e9, 1, 1))
		_, err := u.RunIsolated()
		unitDone <- err
	}()
	time.Sleep(50 * time.Millisecond) // real time: the calls above queue (or wait to)
	start := time.Now()
	ok := within(2*time.Second, func() {
		p := g.NewCaller()
		p.Add(acquire(string(kY), 1e9, 1, 1))
		p.Add(acquire(string(kZ), 1e9, 1, 1))
		if _, err := p.Run(); err != nil {
			t.Error(err)
		}
	})
	if !ok {
		t.Fatalf("a pipeline on shards Y and Z waited %v (and on) while only shard X was held", time.Since(start).Round(time.Millisecond))
	}
	releaseX()
	releaseX = nil
	if err := <-unitDone; err != nil {
		t.Fatal(err)
	}
}
