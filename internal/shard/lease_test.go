package shard

import (
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/lease"
	"github.com/bucketd/bucketd/internal/testkit"
)

// TestALeaseRecordIsNeverReusedForAKey: the record a key's lease calls go
// to (its generation) is new after every failed call and for every entry
// the shard makes anew for the key, so a late call, which Redis runs after
// the key has a new record, can only touch a record no live lease uses
// (lease rule 2). A generation that starts again at 0 for a forgotten and
// remade entry lets such a call drop a live record as spent, and the
// bucket refill over the lease still being spent.
func TestALeaseRecordIsNeverReusedForAKey(t *testing.T) {
	clk := testkit.NewClock()
	p := lease.DefaultPolicy
	g := New(Config{Shards: 1, Clock: clk.Now, Base: clk.Base(), SweepInterval: time.Millisecond,
		Lease: &LeaseConfig{Policy: p, Outbox: func(string, bucket.Limit, lease.Request) bool { return false }}})
	defer g.Close()
	c := g.NewCaller()
	lim := bucket.Limit{Capacity: 100, Rate: 10}
	run := func(k decide.Kind, op *decide.LeaseOp) {
		t.Helper()
		c.Add(decide.Request{Kind: k, Key: []byte("k"), Limit: lim, Cost: 1, Lease: op})
		if _, err := c.Run(); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[uint32]bool{}
	for round := range 3 {
		for range 2 {
			op := &decide.LeaseOp{}
			run(decide.LeaseTake, op)
			if op.Outcome != lease.Ask {
				t.Fatalf("round %d: outcome %v, want Ask", round, op.Outcome)
			}
			if seen[op.Call.Gen] {
				t.Fatalf("round %d: the key's lease call goes to generation %d, which an earlier call of the key used", round, op.Call.Gen)
			}
			seen[op.Call.Gen] = true
			run(decide.LeaseFail, op) // no reply: the record is given up
		}
		clk.Advance(time.Duration(2*p.Idle) * time.Microsecond) // forgettable now
		if !testkit.Poll(5*time.Second, func() bool { n, _ := g.LeaseEntries(); return n == 0 }) {
			t.Fatalf("round %d: the idle entry was not forgotten", round)
		}
	}
}
