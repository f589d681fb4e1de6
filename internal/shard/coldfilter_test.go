package shard

import (
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/clock"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/lease"
	"github.com/bucketd/bucketd/internal/testkit"
)

// TestAColdKeysFirstCallSkipsItsShard: in lease mode a key's first call
// is answered cold by the Caller without a visit to the shard (the
// caller sends Redis a plain acquire); its second call within the demand
// window goes to the shard, which makes the entry and asks for a lease;
// a key whose filter slot counts an entry goes to its shard; and once the
// entry is forgotten, its slot counts none again.
func TestAColdKeysFirstCallSkipsItsShard(t *testing.T) {
	clk := testkit.NewClock()
	p := lease.DefaultPolicy
	p.Target = 1_000_000
	g := New(Config{Shards: 4, Clock: clk.Now, Base: clk.Base(), SweepInterval: time.Millisecond,
		Lease: &LeaseConfig{Policy: p, Outbox: func(string, bucket.Limit, lease.Request) bool { return true }}})
	defer g.Close()
	c := g.NewCaller()
	lim := bucket.Limit{Capacity: 1000, Rate: 100}
	take := func(key string) (*decide.LeaseOp, bool) {
		t.Helper()
		op := &decide.LeaseOp{}
		var cs [1]bool
		c.AddLeaseTakes([]*decide.Request{{Kind: decide.LeaseTake, Key: []byte(key), Limit: lim, Cost: 1, Lease: op}}, cs[:], &BatchClock{})
		cold := cs[0]
		as, err := c.Run()
		if err != nil {
			t.Fatal(err)
		}
		if cold != (len(as) == 0) {
			t.Fatalf("%s: cold %v, but the shards answered %d calls", key, cold, len(as))
		}
		return op, cold
	}
	for i := range 1000 {
		if op, cold := take(fmt.Sprintf("cold%d", i)); !cold || op.Outcome != lease.Cold {
			t.Fatalf("cold key %d: cold %v, outcome %v: want its first call answered cold", i, cold, op.Outcome)
		}
	}
	if n, _ := g.LeaseEntries(); n != 0 {
		t.Fatalf("1,000 keys asked once left %d lease entries, want 0", n)
	}
	take("hot")
	clk.Advance(time.Millisecond)
	op, cold := take("hot")
	if cold || op.Outcome != lease.Ask || op.Call.Want <= 0 {
		t.Fatalf("a key's second call 1 ms after its first: cold %v, outcome %v, want %v: want a lease asked for", cold, op.Outcome, op.Call.Want)
	}
	_, h := g.route([]byte("hot"))
	if n := g.cold.slots[slotOf(h)].entries.Load(); n != 1 {
		t.Fatalf("the slot of a key with an entry counts %d entries, want 1", n)
	}
	// Another key of the slot goes to its shard (which answers it cold).
	other := ""
	for i := 0; other == ""; i++ {
		if _, h2 := g.route(fmt.Appendf(nil, "k%d", i)); slotOf(h2) == slotOf(h) {
			other = fmt.Sprintf("k%d", i)
		}
	}
	if op, cold := take(other); cold || op.Outcome != lease.Cold {
		t.Fatalf("a key of a slot with an entry: cold %v, outcome %v, want its shard to answer it Cold", cold, op.Outcome)
	}
	// The lease call fails: nothing is held, and once idle the entry is
	// forgotten, and its slot counts none.
	c.Add(decide.Request{Kind: decide.LeaseFail, Key: []byte("hot"), Lease: op})
	if _, err := c.Run(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Duration(2*p.Idle) * time.Microsecond)
	if !testkit.Poll(5*time.Second, func() bool { n, _ := g.LeaseEntries(); return n == 0 }) {
		t.Fatal("the idle entry was not forgotten")
	}
	if n := g.cold.slots[slotOf(h)].entries.Load(); n != 0 {
		t.Fatalf("the slot of a forgotten entry counts %d entries, want 0", n)
	}
}

// TestColdFilterRemembersAFirstCallForTheWindow: a key's second call is a
// second only within the demand window of its first, and a call read as a
// second is forgotten (a third call starts over).
func TestColdFilterRemembersAFirstCallForTheWindow(t *testing.T) {
	f := newColdFilter(200_000)
	const h, other = 0xabcdef0123456789, 0x1bcdef0123456789 // one slot, other upper bits
	if _, _, ok := f.firstCall(h, 20, 1_000_000); ok {
		t.Fatal("a first call read as a second")
	}
	if _, _, ok := f.firstCall(other, 1, 1_050_000); ok {
		t.Fatal("another key of the slot read as the first's second call")
	}
	if _, _, ok := f.firstCall(h, 2.5, 1_100_000); ok {
		t.Fatal("a key whose first call another key's replaced read as a second")
	}
	at, cost, ok := f.firstCall(h, 1, 1_299_000)
	if !ok || at != 1_100_000 || cost != 2.5 {
		t.Fatalf("a second call 199 ms after the first: %v, first at %d of cost %g, want a first call at 1100000 of cost 2.5", ok, at, cost)
	}
	if _, _, ok := f.firstCall(h, 1, 1_300_000); ok {
		t.Fatal("a third call read as a second: the second should have been forgotten")
	}
	if _, _, ok := f.firstCall(h, 1, 1_500_000); ok {
		t.Fatal("a call 200 ms after the first read as its second: the window is 200 ms")
	}
}

// BenchmarkAddLeaseTakeColdKeys: what lease mode adds to a cold key's
// call before it goes to Redis (store mode's whole path otherwise): the
// cold filter's reading and writing of the key's slot, on keys each asked
// once, from a connection per goroutine, one call at a time (as at -P 1)
// and in batches of 16 (-P 16, AddLeaseTakes).
func BenchmarkAddLeaseTakeColdKeys(b *testing.B) {
	now, base := clock.Start()
	g := New(Config{Shards: 4, Clock: now, Base: base,
		Lease: &LeaseConfig{Policy: lease.DefaultPolicy, Outbox: func(string, bucket.Limit, lease.Request) bool { return true }}})
	defer g.Close()
	lim := bucket.Limit{Capacity: 100, Rate: 10}
	var next atomic.Int64
	for _, batch := range []int{1, 16} {
		b.Run(fmt.Sprintf("batch%d", batch), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				c := g.NewCaller()
				reqs := make([]decide.Request, batch)
				ptrs := make([]*decide.Request, batch)
				cold := make([]bool, batch)
				for k := range reqs {
					reqs[k] = decide.Request{Kind: decide.LeaseTake, Limit: lim, Cost: 1, Lease: &decide.LeaseOp{}}
					ptrs[k] = &reqs[k]
				}
				i := next.Add(1) << 40 // keys never repeat: each is asked once
				var clk BatchClock
				for k := 0; pb.Next(); k++ {
					i++
					r := &reqs[k%batch]
					r.Key = strconv.AppendInt(append(r.Key[:0], "cold:"...), i, 10)
					if k%batch != batch-1 {
						continue
					}
					clk.Reset()
					c.AddLeaseTakes(ptrs, cold, &clk)
					if _, err := c.Run(); err != nil { // the keys that were not cold
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// TestAddLeaseTakesDecidesInOrder: a batch decides its requests as
// batches of one, one after another, would: a key asked twice in one batch is
// cold the first time and goes to its shard the second (which makes its
// entry), and a key whose slot counts an entry goes to its shard.
func TestAddLeaseTakesDecidesInOrder(t *testing.T) {
	clk := testkit.NewClock()
	p := lease.DefaultPolicy
	g := New(Config{Shards: 4, Clock: clk.Now, Base: clk.Base(), SweepInterval: time.Millisecond,
		Lease: &LeaseConfig{Policy: p, Outbox: func(string, bucket.Limit, lease.Request) bool { return true }}})
	defer g.Close()
	c := g.NewCaller()
	lim := bucket.Limit{Capacity: 1000, Rate: 100}
	batch := func(keys ...string) []bool {
		t.Helper()
		ptrs, cold := make([]*decide.Request, len(keys)), make([]bool, len(keys))
		for k, key := range keys {
			ptrs[k] = &decide.Request{Kind: decide.LeaseTake, Key: []byte(key), Limit: lim, Cost: 1, Lease: &decide.LeaseOp{}}
		}
		c.AddLeaseTakes(ptrs, cold, &BatchClock{})
		as, err := c.Run()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for k := range keys {
			if !cold[k] {
				n++
			} else if ptrs[k].Lease.Outcome != lease.Cold {
				t.Fatalf("%v: %s reported cold with outcome %v", keys, keys[k], ptrs[k].Lease.Outcome)
			}
		}
		if len(as) != n {
			t.Fatalf("%v: the shards answered %d calls, want the %d not cold", keys, len(as), n)
		}
		return cold
	}
	if got := batch("a", "b", "a", "c"); !slices.Equal(got, []bool{true, true, false, true}) {
		t.Fatalf("cold keys a, b, a, c: %v, want a's second call to its shard", got)
	}
	clk.Advance(time.Millisecond)
	if n, _ := g.LeaseEntries(); n != 1 {
		t.Fatalf("after a key's second call: %d lease entries, want 1", n)
	}
	if got := batch("d", "a"); !slices.Equal(got, []bool{true, false}) {
		t.Fatalf("a cold key and a key with an entry: %v, want [true false]", got)
	}
}

// TestBatchClockReadsOncePerBatch: a BatchClock reads the group's clock
// at its first use and keeps that reading until Reset, so a batch of
// calls costs one clock reading, and the next batch sees the time move.
func TestBatchClockReadsOncePerBatch(t *testing.T) {
	clk := testkit.NewClock()
	g := New(Config{Shards: 1, Clock: clk.Now, Base: clk.Base()})
	defer g.Close()
	var b BatchClock
	first := b.now(g)
	clk.Advance(time.Second)
	if got := b.now(g); got != first {
		t.Fatalf("the second reading of one batch is %d µs, want the first's %d", got, first)
	}
	b.Reset()
	if got := b.now(g); got != first+1_000_000 {
		t.Fatalf("the reading after Reset is %d µs, want %d: a second later", got, first+1_000_000)
	}
}
