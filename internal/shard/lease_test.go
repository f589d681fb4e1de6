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
		if first.Outcome != lease.Cold {
			t.Fatalf("round %d: the key's first call: outcome %v, want Cold", round, first.Outcome)
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
		if op := take(fmt.Sprintf("cold%d", i)); op.Outcome != lease.Cold {
			t.Fatalf("cold key %d: outcome %v, want Cold", i, op.Outcome)
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

// TestKeysOfOneHashShareNoEntry: lease entries are found by their key's
// hash, and a second key of the same hash is answered as a cold key (a
// plain acquire) rather than from the first key's lease; Redis's replies
// to it leave the first key's entry as it was.
func TestKeysOfOneHashShareNoEntry(t *testing.T) {
	clk := testkit.NewClock()
	p := lease.DefaultPolicy
	p.Target = 1_000_000
	g := New(Config{Shards: 1, Clock: clk.Now, Base: clk.Base(),
		Lease: &LeaseConfig{Policy: p, Outbox: func(string, bucket.Limit, lease.Request) bool { return true }}})
	defer g.Close()
	lim := bucket.Limit{Capacity: 1000, Rate: 100}
	const hash = 0x5eed
	mk := func(key string) *op {
		return &op{Request: decide.Request{Kind: decide.LeaseTake, Key: []byte(key), Limit: lim, Cost: 1,
			Lease: &decide.LeaseOp{}}, hash: hash}
	}
	var failure string
	err := g.on(0, func(s *shard, now int64) {
		var n tally
		a1, a2 := mk("a"), mk("a")
		s.leaseTake(a1, now, &n)
		s.leaseTake(a2, now+1000, &n)
		if a2.Lease.Outcome != lease.Ask {
			failure = fmt.Sprintf("key a's second call: outcome %v, want Ask", a2.Lease.Outcome)
			return
		}
		for i := range 3 {
			b := mk("b")
			s.leaseTake(b, now+2000+int64(i), &n)
			if b.Lease.Outcome != lease.Cold {
				failure = fmt.Sprintf("key b (a's hash), call %d: outcome %v, want Cold", i, b.Lease.Outcome)
				return
			}
			b.Lease.Reply = lease.Reply{Decision: bucket.Decision{Allowed: true, Remaining: 7}, Epoch: 9, Held: 50}
			b.Lease.Outcome = lease.Ask // as if b had a lease call out: its reply must not reach a's entry
			s.leaseApply(b, now+3000)
			s.leaseFail(b)
		}
		e := s.leases.lookup(a2)
		switch {
		case len(s.leases.m) != 1 || e == nil || e.key != "a":
			failure = fmt.Sprintf("entries %d, a's %+v: want a's alone", len(s.leases.m), e)
		case !e.InFlight || e.Epoch != 0 || e.RedisTokens != 0:
			failure = fmt.Sprintf("a's entry after b's replies: %+v, want its own call still in flight, nothing applied", e.Entry)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if failure != "" {
		t.Fatal(failure)
	}
}
