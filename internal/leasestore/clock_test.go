package leasestore

import (
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/shard"
	"github.com/bucketd/bucketd/internal/testkit"
)

// TestEachRunReadsTheClockAnew: a Caller reads the shards' clock at most
// once a Run for the cold filter (shard.BatchClock), and anew in its next
// Run. A key asked on one connection twice, further apart than the demand
// window, is a cold key both times (two plain acquires, no lease entry);
// asked again within the window, its call goes to its shard, which makes
// the entry and asks for a lease.
func TestEachRunReadsTheClockAnew(t *testing.T) {
	srv := redistest.Start(t)
	clk := testkit.NewClock()
	in := startInstanceWith(t, srv.Addr, "a", time.Second, testPolicy,
		shard.Config{Shards: 2, Clock: clk.Now, Base: clk.Base()})
	c := in.NewCaller()
	key, l := []byte("k"), bucket.Limit{Capacity: 100, Rate: 10}
	window := time.Duration(testPolicy.DemandWindow()) * time.Microsecond
	call := func(step string) {
		t.Helper()
		if a, err := run1(c, acquireReq(key, l, 1)); err != nil || a.Err != nil || !a.Decision.Allowed {
			t.Fatalf("%s: %+v, %v, want allowed", step, a, err)
		}
	}
	call("first call")
	clk.Advance(2 * window)
	call("a call two demand windows later")
	if st := in.LeaseStats(); st.PlainCalls != 2 || st.LeaseCalls != 0 {
		t.Fatalf("after two calls two demand windows apart: %d plain and %d lease calls, want 2 and 0 (both cold)", st.PlainCalls, st.LeaseCalls)
	}
	clk.Advance(window / 4)
	call("a call a quarter of a window later")
	if n, err := in.group.LeaseEntries(); err != nil || n != 1 {
		t.Fatalf("after a key's second call within the window: %d lease entries (%v), want 1", n, err)
	}
}
