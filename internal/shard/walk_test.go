package shard

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/testkit"
)

// walkAll walks every shard of g to the end and returns what it handed out.
func walkAll(t *testing.T, g *Group) []Record {
	t.Helper()
	var all []Record
	w, err := g.Walk()
	if err != nil {
		t.Fatal(err)
	}
	for done := false; !done; {
		if all, done, err = w.Next(all, 100); err != nil {
			t.Fatal(err)
		}
	}
	return all
}

// walkModel is what a test knows of the keys of one shard during a walk.
type walkModel struct {
	clk   *testkit.Clock
	state map[string]bucket.State // the stored state of every key with a bucket
	limit map[string]bucket.Limit
	// seen holds every state a key has had since the walk started; stable
	// the keys that have had a bucket without a break since it started.
	seen   map[string][]float64
	stable map[string]bool
	next   int // the next new key's number
}

// newWalkModel returns a group of shards with its model, a Caller and
// the random source of one history. A sweep every millisecond removes
// what the model's clock steps fill.
func newWalkModel(t *testing.T, shards int, seed, stream uint64) (*rand.Rand, *Group, *Caller, *walkModel) {
	t.Helper()
	g, clk := newTestGroup(t, Config{Shards: shards, SweepInterval: time.Millisecond, SweepMin: 64})
	m := &walkModel{clk: clk, state: map[string]bucket.State{}, limit: map[string]bucket.Limit{}, seen: map[string][]float64{}}
	return rand.New(rand.NewPCG(seed, stream)), g, g.NewCaller(), m
}

// gone forgets key: reset, or full (which the sweeper deletes).
func (m *walkModel) gone(key string) {
	delete(m.state, key)
	delete(m.stable, key)
}

// step runs one random operation on c and applies it to the model.
func (m *walkModel) step(t *testing.T, rng *rand.Rand, c *Caller) {
	keys := make([]string, 0, len(m.state))
	for k := range m.state {
		keys = append(keys, k)
	}
	switch op := rng.IntN(10); {
	case op < 3 || len(keys) == 0: // a new key
		key := fmt.Sprintf("k%d", m.next)
		m.next++
		// Rates from one token a second to one an hour: some buckets fill
		// up (and go) within the clock steps below, others never do.
		l := bucket.Limit{Capacity: 10, Rate: []float64{1, 0.01, 1.0 / 3600}[rng.IntN(3)]}
		m.spend(t, c, key, l, float64(1+rng.IntN(9)))
	case op < 6: // spend from an existing key
		key := keys[rng.IntN(len(keys))]
		m.spend(t, c, key, m.limit[key], float64(1+rng.IntN(3)))
	case op < 8: // reset: the last entry moves into the hole
		key := keys[rng.IntN(len(keys))]
		runOne(t, c, decide.Request{Kind: decide.Reset, Key: []byte(key)})
		m.gone(key)
	default: // time passes: buckets fill up and the sweeper removes them
		m.clk.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
		for _, key := range keys {
			if m.state[key].IsFull(m.limit[key], m.clk.Now()) {
				m.gone(key)
			}
		}
	}
}

// spend runs one TB.ACQUIRE and stores the outcome in the model as the
// shard stores it.
func (m *walkModel) spend(t *testing.T, c *Caller, key string, l bucket.Limit, cost float64) {
	st, exists := m.state[key]
	runOne(t, c, decide.Request{Kind: decide.Acquire, Key: []byte(key), Limit: l, Cost: cost})
	next, _ := bucket.Acquire(st, exists, l, cost, m.clk.Now())
	m.state[key], m.limit[key] = next, l
	m.seen[key] = append(m.seen[key], next.Tokens)
}

// TestWalkHandsOutEveryLiveBucketOnce checks the walk against a model:
// between chunks, random new keys, spends, resets and sweeps (which move
// the shard's last entry into the hole, across the cursor too). Every key
// that has a bucket for the whole walk is handed out exactly once, with a
// state it had during the walk; no key is handed out twice.
func TestWalkHandsOutEveryLiveBucketOnce(t *testing.T) {
	for seed := range uint64(200) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng, g, c, m := newWalkModel(t, 1, seed, 42)
			for range 50 + rng.IntN(500) {
				m.step(t, rng, c)
			}
			m.stable = map[string]bool{}
			m.seen = map[string][]float64{}
			for k, st := range m.state {
				m.stable[k] = true
				m.seen[k] = []float64{st.Tokens}
			}

			w, err := g.Walk()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for done := false; !done; {
				var chunk []Record
				if chunk, done, err = w.Next(nil, 1+rng.IntN(40)); err != nil {
					t.Fatal(err)
				}
				for _, r := range chunk {
					got[r.Key]++
					if !containsFloat(m.seen[r.Key], r.State.Tokens) {
						t.Fatalf("%s handed out with %v tokens, a state it never had during the walk (%v)", r.Key, r.State.Tokens, m.seen[r.Key])
					}
				}
				for range rng.IntN(30) {
					m.step(t, rng, c)
				}
			}
			for k, n := range got {
				if n > 1 {
					t.Fatalf("%s handed out %d times", k, n)
				}
			}
			for k := range m.stable {
				if got[k] != 1 {
					t.Fatalf("%s had a bucket for the whole walk but was handed out %d times", k, got[k])
				}
			}
			if walking(t, g) {
				t.Fatal("the shard still runs the walk after its end")
			}
		})
	}
}

func containsFloat(s []float64, v float64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// walking reports whether shard 0 of g has a walk in progress.
func walking(t *testing.T, g *Group) bool {
	t.Helper()
	var busy bool
	if err := g.on(0, func(s *shard, _ int64) { busy = s.walk != nil }); err != nil {
		t.Fatal(err)
	}
	return busy
}

// TestWalkStopAndReplace: a stopped walk is forgotten by its shard (which
// then remembers no moved entries), and a second walk ends the first,
// whose Next then says so. After Close, Walk and Next return ErrClosed
// (invariant 8).
func TestWalkStopAndReplace(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 1, SweepInterval: time.Hour})
	c := g.NewCaller()
	for i := range 10 {
		runOne(t, c, acquire(fmt.Sprint("k", i), 10, 0.001, 1))
	}
	w, err := g.Walk()
	if err != nil {
		t.Fatal(err)
	}
	if recs, done, err := w.Next(nil, 4); err != nil || done || len(recs) != 4 {
		t.Fatalf("first chunk: %d records, done %v, %v", len(recs), done, err)
	}
	if err := w.Stop(); err != nil || walking(t, g) {
		t.Fatalf("Stop: %v; still walking %v", err, walking(t, g))
	}
	if err := w.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}

	first, _ := g.Walk()
	second, _ := g.Walk()
	if _, _, err := first.Next(nil, 4); !errors.Is(err, ErrWalkEnded) {
		t.Fatalf("Next of a replaced walk: %v, want ErrWalkEnded", err)
	}
	if recs, done, err := second.Next(nil, 100); err != nil || !done || len(recs) != 10 {
		t.Fatalf("the second walk: %d records, done %v, %v", len(recs), done, err)
	}
	open, err := g.Walk()
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if _, err := g.Walk(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Walk after Close: %v", err)
	}
	if _, _, err := open.Next(nil, 4); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next of a walk begun before Close: %v, want ErrClosed", err)
	}
}

// TestWalkHandsOutAMovedBucketThatChangedSince: a bucket that moves below
// the cursor is remembered as it was then; when it is spent again later
// and time passes, that old copy refilled to now looks full while the
// bucket is not, and it must be handed out all the same (the walk once
// dropped it, about one run in twenty of the model test above).
func TestWalkHandsOutAMovedBucketThatChangedSince(t *testing.T) {
	g, clk := newTestGroup(t, Config{Shards: 1, SweepInterval: time.Hour})
	c := g.NewCaller()
	l := bucket.Limit{Capacity: 10, Rate: 1}
	runOne(t, c, acquire("a", l.Capacity, l.Rate, 5))
	runOne(t, c, acquire("mover", l.Capacity, l.Rate, 1)) // 9 left: full again after 1 s
	w, err := g.Walk()
	if err != nil {
		t.Fatal(err)
	}
	got, done, err := w.Next(nil, 1) // hands out "a": the cursor is past index 0
	if err != nil || done || len(got) != 1 || got[0].Key != "a" {
		t.Fatalf("first chunk %v, %v, %v", got, done, err)
	}
	runOne(t, c, decide.Request{Kind: decide.Reset, Key: []byte("a")}) // "mover" moves to index 0, below the cursor
	clk.Advance(500 * time.Millisecond)
	runOne(t, c, acquire("mover", l.Capacity, l.Rate, 5)) // 9.5 - 5 = 4.5 left
	clk.Advance(900 * time.Millisecond)                   // the copy of 9 would be full by now; the bucket holds 5.4
	rest, done, err := w.Next(nil, 10)
	if err != nil || !done {
		t.Fatalf("second chunk: done %v, %v", done, err)
	}
	if len(rest) != 1 || rest[0].Key != "mover" {
		t.Fatalf("second chunk %+v, want the moved bucket", rest)
	}
}

// BenchmarkWalkChunk: the time a shard spends on one chunk of a walk
// (1,024 entries, as a snapshot takes them) over a million buckets: the
// pause that a request posted behind the chunk can see.
func BenchmarkWalkChunk(b *testing.B) {
	g := New(Config{Shards: 1, SweepInterval: time.Hour})
	defer g.Close()
	now := time.Now().UnixMicro()
	recs := make([]Record, 0, 1_000_000)
	for i := range cap(recs) {
		recs = append(recs, Record{Key: fmt.Sprintf("k%015d", i), State: bucket.State{Last: now},
			Limit: bucket.Limit{Capacity: 1e6, Rate: 1e-9}})
	}
	if _, err := g.Restore(recs); err != nil {
		b.Fatal(err)
	}
	dst := make([]Record, 0, 1024)
	var w *Walk
	for b.Loop() {
		var done bool
		var err error
		if w == nil {
			if w, err = g.Walk(); err != nil {
				b.Fatal(err)
			}
		}
		if dst, done, err = w.Next(dst[:0], 1024); err != nil {
			b.Fatal(err)
		}
		if done {
			w = nil
		}
	}
}
