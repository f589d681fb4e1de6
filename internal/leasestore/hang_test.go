package leasestore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/lease"
	"github.com/bucketd/bucketd/internal/redistest"
)

// within fails t when f does not return within d.
func within(t *testing.T, what string, d time.Duration, f func()) time.Duration {
	t.Helper()
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return time.Since(start)
	case <-time.After(d):
		t.Fatalf("%s: still running after %v", what, d)
		return 0
	}
}

// leaseKeys makes each of n keys hold a lease on c's instance: a key's
// first call is a plain acquire, and a lease call follows once its demand
// is worth a lease (lease.Policy: the third call, at testPolicy's target).
func leaseKeys(t *testing.T, c decide.Caller, prefix string, n int, l bucket.Limit) [][]byte {
	t.Helper()
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "%s%d", prefix, i)
	}
	for from := 0; from < n; from += 100 { // Runs Redis answers well within its timeout
		chunk := keys[from:min(from+100, n)]
		for range 3 { // in quick succession: the third call sees a demand worth a lease
			for _, k := range chunk {
				c.Add(acquireReq(k, l, 1))
			}
			if _, err := c.Run(); err != nil {
				t.Fatalf("Run: %v", err)
			}
		}
	}
	return keys
}

// TestCloseWhileRunsAreInFlightAndRedisIsPaused closes a store while
// callers hammer it and Redis answers nothing: Close returns within a few
// Redis timeouts, every Run in flight returns, and every Run after Close
// answers ErrClosed at once.
func TestCloseWhileRunsAreInFlightAndRedisIsPaused(t *testing.T) {
	srv := redistest.Start(t)
	timeout := 50 * time.Millisecond
	in := startInstance(t, srv.Addr, "a", timeout, testPolicy)
	l := bucket.Limit{Capacity: 100, Rate: 100}
	var wg sync.WaitGroup
	var closed atomic.Bool
	var wrong atomic.Value
	callers := make([]decide.Caller, 4)
	for i := range callers {
		c := in.NewCaller()
		callers[i] = c
		wg.Go(func() {
			k := fmt.Appendf(nil, "k%d", i%2)
			for {
				after := closed.Load()
				_, err := run1(c, acquireReq(k, l, 1))
				if err != nil && !errors.Is(err, ErrClosed) {
					wrong.Store(fmt.Sprintf("a Run racing Close: %v, want ErrClosed", err))
				}
				if after {
					if !errors.Is(err, ErrClosed) {
						wrong.Store(fmt.Sprintf("a Run after Close: %v, want ErrClosed", err))
					}
					return
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	srv.Pause()
	defer srv.Resume()
	time.Sleep(20 * time.Millisecond) // Runs are waiting for Redis now
	took := within(t, "Close with Redis paused", 2*time.Second, in.Close)
	closed.Store(true)
	within(t, "the callers' last Runs", 2*time.Second, wg.Wait)
	t.Logf("Close took %v", took)
	if w := wrong.Load(); w != nil {
		t.Error(w)
	}
	for i, c := range callers {
		within(t, "a Run after Close", time.Second, func() {
			if _, err := run1(c, acquireReq([]byte("x"), l, 1)); !errors.Is(err, ErrClosed) {
				t.Errorf("caller %d after Close: %v, want ErrClosed", i, err)
			}
		})
	}
	within(t, "a new Caller after Close", time.Second, func() {
		if _, err := run1(in.NewCaller(), acquireReq([]byte("x"), l, 1)); !errors.Is(err, ErrClosed) {
			t.Errorf("a new Caller after Close: %v, want ErrClosed", err)
		}
	})
}

// TestCloseWithManyLeasesAndRedisPausedTakesOneTimeout closes a store
// holding leases of 5,000 keys while Redis answers nothing: invariant 2
// says Close waits for the give-backs within the Redis timeout, so it
// must not wait one timeout per batch of the renewer.
func TestCloseWithManyLeasesAndRedisPausedTakesOneTimeout(t *testing.T) {
	srv := redistest.Start(t)
	timeout := 100 * time.Millisecond
	pol := testPolicy
	pol.Idle = 5_000_000 // no give-back before Close
	pol.TTL, pol.Margin = 5_000_000, 1_000_000
	in := startInstance(t, srv.Addr, "a", timeout, pol)
	l := bucket.Limit{Capacity: 100, Rate: 1}
	leaseKeys(t, in.NewCaller(), "many", 5000, l)
	if n := in.LeaseStats().Leases; n < 4000 {
		t.Fatalf("%d keys hold a lease, want about 5000", n)
	}
	srv.Pause()
	defer srv.Resume()
	took := within(t, "Close", 10*time.Second, in.Close)
	t.Logf("Close with %d leases out and Redis paused took %v", 5000, took)
	if took > 5*timeout {
		t.Errorf("Close took %v with Redis paused, want about one Redis timeout (%v)", took, timeout)
	}
}

// TestRenewerQueueFullDropsTheLease fills the renewer's queue while Redis
// is paused: the shard's renewal is refused, the lease is dropped (counted
// as dropped tokens), the key's calls go on being answered (by the fail
// policy) within the timeout, and once Redis is back and the queue drained
// the key is answered from a lease again.
func TestRenewerQueueFullDropsTheLease(t *testing.T) {
	srv := redistest.Start(t)
	timeout := 50 * time.Millisecond
	pol := testPolicy
	pol.Idle = 5_000_000
	in := startInstance(t, srv.Addr, "a", timeout, pol)
	l := bucket.Limit{Capacity: 1000, Rate: 1}
	c := in.NewCaller()
	key := []byte("q")
	local := func() int64 { return in.LeaseStats().FromLease }
	for i := 0; local() == 0; i++ {
		if i == 100 {
			t.Fatalf("no local answer after 100 calls: %+v", in.LeaseStats())
		}
		if _, err := run1(c, acquireReq(key, l, 1)); err != nil {
			t.Fatal(err)
		}
	}
	// A few more calls at once make the demand, and so the lease, large
	// enough to hold tokens when the refused renewal drops it: a lease of
	// two tokens renews when it is empty, and drops nothing countable.
	for range 30 {
		if _, err := run1(c, acquireReq(key, l, 1)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // a renewal in flight is back
	srv.Pause()
	posted := 0
	fill := func() { // until post refuses: the next renewal finds the queue full
		for in.ren.post("filler", l, lease.Request{Limit: l, Gen: 1}) {
			posted++
		}
	}
	before := in.LeaseStats()
	for i := 0; in.LeaseStats().Dropped == before.Dropped && i < 10_000; i++ {
		fill()
		start := time.Now()
		if _, err := run1(c, acquireReq(key, l, 1)); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 6*timeout {
			t.Fatalf("a Run took %v with Redis paused and the queue full, timeout %v", d, timeout)
		}
	}
	after := in.LeaseStats()
	t.Logf("posted %d fillers; before %+v; after %+v", posted, before, after)
	if after.Dropped == before.Dropped || after.Leases != 0 {
		t.Errorf("the renewal refused by a full queue did not drop the lease: before %+v, after %+v", before, after)
	}
	srv.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for from := local(); local() == from; {
		if time.Now().After(deadline) {
			t.Fatalf("the key got no lease again after Redis came back: %+v", in.LeaseStats())
		}
		if _, err := run1(c, acquireReq(key, l, 1)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRedisDownRunsReturnWithinTheTimeoutAndKeysLeaseAgain kills Redis:
// every Run returns within about the Redis timeout, and after Redis comes
// back a key that held a lease and a key first asked during the outage
// are both answered from leases again, so no entry was left in flight
// (invariant 1).
func TestRedisDownRunsReturnWithinTheTimeoutAndKeysLeaseAgain(t *testing.T) {
	srv := redistest.Start(t)
	timeout := 50 * time.Millisecond
	in := startInstance(t, srv.Addr, "a", timeout, testPolicy)
	l := bucket.Limit{Capacity: 1000, Rate: 100}
	c := in.NewCaller()
	old, fresh := []byte("held"), []byte("fresh")
	for range 20 {
		if _, err := run1(c, acquireReq(old, l, 1)); err != nil {
			t.Fatal(err)
		}
	}
	srv.Kill()
	var slowest time.Duration
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
		for _, k := range [][]byte{old, fresh} {
			start := time.Now()
			if _, err := run1(c, acquireReq(k, l, 1)); err != nil {
				t.Fatal(err)
			}
			slowest = max(slowest, time.Since(start))
		}
	}
	t.Logf("slowest Run with Redis down: %v (timeout %v)", slowest, timeout)
	if slowest > 6*timeout {
		t.Errorf("a Run took %v with Redis down, timeout %v", slowest, timeout)
	}
	srv.Restart()
	for _, k := range [][]byte{old, fresh} {
		from := in.LeaseStats().FromLease
		deadline := time.Now().Add(5 * time.Second)
		for in.LeaseStats().FromLease == from {
			if time.Now().After(deadline) {
				t.Fatalf("key %s: no local answer 5 s after Redis came back: %+v", k, in.LeaseStats())
			}
			if _, err := run1(c, acquireReq(k, l, 1)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
	}
}
