package shard

import (
	"fmt"
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
		first := &decide.LeaseOp{}
		run(decide.LeaseTake, first) // a key's first call makes no entry (TestAColdKeyGetsNoLeaseEntry)
		if first.Outcome != lease.Plain {
			t.Fatalf("round %d: the key's first call: outcome %v, want Plain", round, first.Outcome)
		}
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

// TestAColdKeyGetsNoLeaseEntry: a key asked once is sent to Redis as a
// plain acquire and leaves no lease entry behind (an entry would cost a
// copy of the key, a map insert and the sweep's time until it is
// forgotten, for every cold key); a key asked again soon after gets its
// entry, and its demand counts the first call.
func TestAColdKeyGetsNoLeaseEntry(t *testing.T) {
	clk := testkit.NewClock()
	p := lease.DefaultPolicy
	p.Target = 1_000_000 // bucketd's --lease-target: two calls 1 ms apart are worth a lease
	g := New(Config{Shards: 1, Clock: clk.Now, Base: clk.Base(),
		Lease: &LeaseConfig{Policy: p, Outbox: func(string, bucket.Limit, lease.Request) bool { return true }}})
	defer g.Close()
	c := g.NewCaller()
	lim := bucket.Limit{Capacity: 1000, Rate: 100}
	take := func(key string) *decide.LeaseOp {
		t.Helper()
		op := &decide.LeaseOp{}
		c.Add(decide.Request{Kind: decide.LeaseTake, Key: []byte(key), Limit: lim, Cost: 1, Lease: op})
		if _, err := c.Run(); err != nil {
			t.Fatal(err)
		}
		return op
	}
	for i := range 1000 {
		if op := take(fmt.Sprintf("cold%d", i)); op.Outcome != lease.Plain {
			t.Fatalf("cold key %d: outcome %v, want Plain", i, op.Outcome)
		}
	}
	if n, _ := g.LeaseEntries(); n != 0 {
		t.Fatalf("1,000 keys asked once left %d lease entries, want 0", n)
	}
	take("hot")
	clk.Advance(time.Millisecond)
	op := take("hot")
	if op.Outcome != lease.Ask || op.Call.Want <= 0 {
		t.Fatalf("a key's second call 1 ms after its first: %v, want %v, want Ask for a lease", op.Outcome, op.Call.Want)
	}
	if n, _ := g.LeaseEntries(); n != 1 {
		t.Fatalf("%d lease entries after a key asked twice, want 1", n)
	}
}
