package leasestore

import (
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/redistest"
)

// TestMacquireCountsTheLeasesOut: instance a spends 1 token of a key and
// leases 5 more; instance b's TB.MACQUIRE of the key must see 3 tokens,
// not the 9 the bucket would hold if the lease were not counted.
func TestMacquireCountsTheLeasesOut(t *testing.T) {
	srv := redistest.Start(t)
	pol := testPolicy
	pol.MaxShare, pol.Target, pol.TTL, pol.Margin, pol.Idle = 0.5, 1_000_000, 10_000_000, 1_000_000, 10_000_000
	a := startInstance(t, srv.Addr, "a", time.Second, pol)
	b := startInstance(t, srv.Addr, "b", time.Second, pol)
	l := bucket.Limit{Capacity: 10, Rate: 0.001}
	key := []byte("m")
	ca := a.NewCaller()
	for range 2 { // a plain acquire, then a lease call: 1 + 1 taken, 5 leased
		if ans, err := run1(ca, acquireReq(key, l, 1)); err != nil || !ans.Decision.Allowed {
			t.Fatalf("acquire on a: %+v, %v", ans, err)
		}
	}
	st := a.LeaseStats()
	if st.Leases != 1 {
		t.Fatalf("a holds no lease: %+v", st)
	}
	held := st.Leased
	left := l.Capacity - 2 - held
	t.Logf("a took 2 and leased %v: the bucket holds %v", held, left)
	macquire := func(cost float64) decide.Answer {
		t.Helper()
		cb := b.NewCaller()
		cb.AddAll([]decide.Request{
			acquireReq(key, l, cost),
			acquireReq([]byte("other"), l, cost),
		})
		as, err := cb.Run()
		if err != nil {
			t.Fatal(err)
		}
		return as[0]
	}
	if ans := macquire(left + 1); ans.Decision.Allowed {
		t.Fatalf("TB.MACQUIRE of %v with %v in the bucket and %v leased: %+v, want denied", left+1, left, held, ans)
	}
	if ans := macquire(left); !ans.Decision.Allowed {
		t.Fatalf("TB.MACQUIRE of %v with %v in the bucket: %+v, want allowed", left, left, ans)
	}
}

// TestMacquireBesideHotLeasesNeverOverGrants hammers a key from two
// instances' leases while a third instance sends TB.MACQUIRE of it and
// another key in a loop: the key's grants, both kinds together, stay
// within one bucket's bound.
func TestMacquireBesideHotLeasesNeverOverGrants(t *testing.T) {
	skipShort(t)
	srv := redistest.Start(t)
	insts, _ := startThree(t, srv, 50*time.Millisecond)
	l := bucket.Limit{Capacity: 60, Rate: 60}
	var g ledger
	stop := make(chan struct{})
	wg := hammer(insts[:2], 2, "mhot", l, stop, &g)
	wg.Go(func() {
		c := insts[2].NewCaller()
		reqs := []decide.Request{acquireReq([]byte("mhot"), l, 1), acquireReq([]byte("mother"), bucket.Limit{Capacity: 1e6, Rate: 1e6}, 1)}
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			c.AddAll(reqs)
			as, err := c.Run()
			g.note(start, time.Now(), err == nil && as[0].Err == nil && as[0].Decision.Allowed)
		}
	})
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	checkWindows(t, "leases and TB.MACQUIRE", g.grants, g.slowest, l.Capacity, l.Rate)
}

// TestHotKeySteadyStateAllocatesNothing: a hot key answered from its
// lease allocates nothing per call, as memory mode's Caller does
// (internal/shard's TestCallerSteadyStateAllocatesNothing).
func TestHotKeySteadyStateAllocatesNothing(t *testing.T) {
	srv := redistest.Start(t)
	pol := testPolicy
	// A lease of a second of demand, renewed a quarter of a second ahead
	// of need: only a renewal that long late sends calls to Redis, so the
	// count below does not hang on this machine's speed.
	pol.Target, pol.TTL, pol.Margin, pol.Idle = 1_000_000, 10_000_000, 1_000_000, 10_000_000
	in := startInstance(t, srv.Addr, "a", time.Second, pol)
	l := bucket.Limit{Capacity: 1e12, Rate: 1e9}
	c := in.NewCaller()
	key := []byte("hot")
	run := func() {
		c.Add(acquireReq(key, l, 1))
		as, err := c.Run()
		if err != nil || !as[0].Decision.Allowed {
			t.Fatalf("Run: %+v, %v", as, err)
		}
	}
	// The lease, and the Caller's slices: the demand estimate takes a few
	// of its time constants (200 ms) to reach the calls' rate, and until
	// then the lease grows, by calls to Redis. (A count of calls, 1,000
	// of them, took 2 ms on a fast machine and left 36 to 79 of the 2,001
	// below to Redis.)
	for start := time.Now(); time.Since(start) < time.Second; {
		run()
	}
	if st := in.LeaseStats(); st.Leases != 1 {
		t.Fatalf("no lease after warm-up: %+v", st)
	}
	from := in.LeaseStats().FromLease
	if allocs := testing.AllocsPerRun(2000, run); allocs != 0 {
		t.Errorf("a hot key answered from its lease allocates %v times per call, want 0", allocs)
	}
	if n := in.LeaseStats().FromLease - from; n < 1980 { // a renewal may come late for a few
		t.Errorf("%d of 2001 calls answered from the lease, want nearly all", n)
	}
}
