package leasestore

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/redistest"
)

// skipShort skips a probe that needs seconds of real time under -short.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("fault injection in real time: the full suite runs it")
	}
}

// startThree starts three instances on srv: the first straight to Redis,
// the other two through proxies that can delay Redis's traffic.
func startThree(t *testing.T, srv *redistest.Server, timeout time.Duration) ([]*instance, []*redistest.Proxy) {
	t.Helper()
	p1, p2 := redistest.StartProxy(t, srv.Addr), redistest.StartProxy(t, srv.Addr)
	insts := []*instance{
		startInstance(t, srv.Addr, "a", timeout, testPolicy),
		startInstance(t, p1.Addr, "b", timeout, testPolicy),
		startInstance(t, p2.Addr, "c", timeout, testPolicy),
	}
	return insts, []*redistest.Proxy{p1, p2}
}

// TestThreeInstancesNeverOverGrantThroughFaults hammers one key from three
// instances for about four seconds while Redis is paused for longer than
// the lease TTL, and while replies take longer than the Redis timeout (so
// they are lost, and Redis runs the calls anyway, late): in no 100 ms or
// 1 s window do the instances together grant more than one bucket would.
func TestThreeInstancesNeverOverGrantThroughFaults(t *testing.T) {
	skipShort(t)
	srv := redistest.Start(t)
	insts, proxies := startThree(t, srv, 50*time.Millisecond)
	l := bucket.Limit{Capacity: 60, Rate: 60}
	var g ledger
	stop := make(chan struct{})
	wg := hammer(insts, 2, "hot", l, stop, &g)

	time.Sleep(800 * time.Millisecond)
	srv.Pause() // 600 ms: every lease record lapses meanwhile (TTL 400 ms)
	time.Sleep(600 * time.Millisecond)
	srv.Resume()
	time.Sleep(700 * time.Millisecond)
	for _, p := range proxies {
		p.SetDelay(60 * time.Millisecond) // past the 50 ms timeout: replies are lost and come late
	}
	time.Sleep(700 * time.Millisecond)
	for _, p := range proxies {
		p.SetDelay(0)
	}
	time.Sleep(800 * time.Millisecond)
	close(stop)
	wg.Wait()

	g.mu.Lock()
	defer g.mu.Unlock()
	checkWindows(t, "hot key", g.grants, g.slowest, l.Capacity, l.Rate)
	for i, in := range insts {
		st := in.LeaseStats()
		t.Logf("instance %d: %+v", i, st)
	}
	if st := insts[0].LeaseStats(); st.FromLease == 0 {
		t.Errorf("instance a answered nothing from leases: %+v", st)
	}
}

// TestParameterChangesWhileLeasesAreHeldNeverOverGrant hammers one key
// with two limits at once (half the goroutines each), so that a lease
// taken under one limit is held while calls come with the other: the
// grants stay within the larger capacity plus the larger rate.
func TestParameterChangesWhileLeasesAreHeldNeverOverGrant(t *testing.T) {
	skipShort(t)
	srv := redistest.Start(t)
	insts, _ := startThree(t, srv, 50*time.Millisecond)
	l1 := bucket.Limit{Capacity: 60, Rate: 60}
	l2 := bucket.Limit{Capacity: 80, Rate: 40}
	var g ledger
	stop := make(chan struct{})
	wg1 := hammer(insts, 1, "params", l1, stop, &g)
	wg2 := hammer(insts, 1, "params", l2, stop, &g)
	time.Sleep(2 * time.Second)
	close(stop)
	wg1.Wait()
	wg2.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	checkWindows(t, "two limits", g.grants, g.slowest, max(l1.Capacity, l2.Capacity), max(l1.Rate, l2.Rate))
}

// TestResetRacingRenewalsNeverOverGrants hammers one key from three
// instances while a fourth client resets it every 300 ms: a reset makes
// the bucket full to its room (capacity less the leases out), never more,
// so between two resets the grants stay within one bucket's bound.
func TestResetRacingRenewalsNeverOverGrants(t *testing.T) {
	skipShort(t)
	srv := redistest.Start(t)
	insts, _ := startThree(t, srv, 50*time.Millisecond)
	l := bucket.Limit{Capacity: 60, Rate: 30}
	var g ledger
	stop := make(chan struct{})
	wg := hammer(insts, 2, "reset", l, stop, &g)

	type span struct{ start, end time.Time }
	var resets []span
	rc := insts[0].NewCaller()
	var failed atomic.Int64
	for range 8 {
		time.Sleep(300 * time.Millisecond)
		start := time.Now()
		if _, err := run1(rc, resetReq("reset")); err != nil {
			failed.Add(1)
		}
		resets = append(resets, span{start, time.Now()})
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d resets failed", failed.Load())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	// Between resets i and i+1: the grants decided wholly after the one
	// and before the other.
	for i := 0; i+1 < len(resets); i++ {
		var in []grant
		for _, x := range g.grants {
			if x.start.After(resets[i].end) && x.end.Before(resets[i+1].start) {
				in = append(in, x)
			}
		}
		checkWindows(t, fmt.Sprintf("between resets %d and %d", i, i+1), in, g.slowest, l.Capacity, l.Rate)
	}
}
