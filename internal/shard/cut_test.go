package shard

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
)

// walkInChunks walks g in chunks of max entries, calling between after
// every chunk, and returns what the walk handed out by key.
func walkInChunks(t *testing.T, g *Group, max int, between func()) map[string]Record {
	t.Helper()
	got := map[string]Record{}
	w, err := g.Walk()
	if err != nil {
		t.Fatal(err)
	}
	for done := false; !done; {
		var chunk []Record
		if chunk, done, err = w.Next(nil, max); err != nil {
			t.Fatal(err)
		}
		for _, r := range chunk {
			if _, twice := got[r.Key]; twice {
				t.Fatalf("%s handed out twice", r.Key)
			}
			got[r.Key] = r
		}
		between()
	}
	return got
}

// TestWalkIsACutOfEveryUnit: units (a TB.MACQUIRE group across shards, a
// transaction of plain requests across shards, and a co-tagged group on
// one shard whose buckets lie far apart in its table) run between every
// two chunks of a walk. Each unit must be in what the walk hands out for
// all its buckets or for none: every bucket of a unit comes out with the
// same number of takes, the number it had when the walk started (the
// cut). The clock stands still, so tokens are exact.
func TestWalkIsACutOfEveryUnit(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 4, SweepInterval: time.Hour})
	c := g.NewCaller()
	lim := bucket.Limit{Capacity: 1e6, Rate: 1e-9}
	take := func(k string) decide.Request {
		return decide.Request{Kind: decide.Acquire, Key: []byte(k), Limit: lim, Cost: 1}
	}
	idle := 0
	fillIdle := func(n int, tag string) {
		for range n {
			runOne(t, c, acquire(fmt.Sprintf("%sidle:%d", tag, idle), 10, 1e-9, 10))
			idle++
		}
	}
	// Sixteen untagged keys, spread over the shards, each behind a run of
	// idle buckets; and two co-tagged keys on one shard, 50 entries apart.
	var spread, tagged []decide.Request
	for k := range 16 {
		fillIdle(20, "")
		spread = append(spread, take(fmt.Sprint("unit:", k)))
		runOne(t, c, spread[k])
	}
	tagged = []decide.Request{take("{t}a"), take("{t}b")}
	runOne(t, c, tagged[0])
	fillIdle(50, "{t}")
	runOne(t, c, tagged[1])

	runs := 0
	got := walkInChunks(t, g, 8, func() {
		c.AddAll(spread) // TB.MACQUIRE across shards
		for _, r := range spread {
			c.Add(r) // MULTI of sixteen TB.ACQUIRE
		}
		c.AddAll(tagged) // TB.MACQUIRE on one shard
		if _, err := c.Run(); err != nil {
			t.Fatal(err)
		}
		runs++
	})
	if runs < 10 {
		t.Fatalf("only %d units ran during the walk", runs)
	}
	for name, unit := range map[string][]decide.Request{"across shards": spread, "on one shard": tagged} {
		takes := map[float64][]string{}
		for _, r := range unit {
			rec, ok := got[string(r.Key)]
			if !ok {
				t.Fatalf("unit %s: %s not handed out", name, r.Key)
			}
			n := lim.Capacity - rec.State.Tokens
			takes[n] = append(takes[n], string(r.Key))
		}
		if len(takes) != 1 {
			t.Errorf("unit %s: its buckets were handed out with different takes (a unit half in the walk): %v", name, takes)
			continue
		}
		if _, ok := takes[1]; !ok {
			t.Errorf("unit %s: handed out with takes %v, want 1 (the state when the walk started)", name, takes)
		}
	}
	if len(got) != idle+len(spread)+len(tagged) {
		t.Fatalf("handed out %d buckets, want %d", len(got), idle+len(spread)+len(tagged))
	}
}

// TestWalkHandsOutTheCut checks the walk against a model, over 4 shards:
// between chunks, random new keys, spends, resets, restores of new keys
// and sweeps (which move a shard's last entry into the hole, across the
// cursor too). What the walk hands out is exactly the state at its cut:
// every key handed out had a bucket at the cut and comes out with its
// state and limit then; a key of the cut left out is full by the end of
// the walk; no key comes out twice. One walk in three is stopped or
// replaced half-way, and the walk after it must be exact all the same.
func TestWalkHandsOutTheCut(t *testing.T) {
	for seed := range uint64(200) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng, g, c, m := newWalkModel(t, 4, seed, 7)
			clk := m.clk
			restored := 0
			step := func() {
				if rng.IntN(15) == 0 { // a restore: a new key, newer than the cut
					key := fmt.Sprint("restored-", restored)
					restored++
					rec := Record{Key: key, State: bucket.State{Tokens: 1, Last: clk.Base().UnixMicros(clk.Now())},
						Limit: bucket.Limit{Capacity: 10, Rate: 1.0 / 3600}}
					if _, err := g.Restore([]Record{rec}); err != nil {
						t.Fatal(err)
					}
					m.state[key], m.limit[key] = bucket.State{Tokens: 1, Last: clk.Now()}, rec.Limit
					return
				}
				m.step(t, rng, c)
			}
			for range 50 + rng.IntN(500) {
				step()
			}
			for walks := 0; walks < 3; walks++ {
				abandon := rng.IntN(3) == 0
				cut := maps.Clone(m.state)
				cutLimit := maps.Clone(m.limit)
				w, err := g.Walk()
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]Record{}
				for done, chunks := false, 0; !done; chunks++ {
					if abandon && chunks == 3 {
						if rng.IntN(2) == 0 {
							err = w.Stop()
						} else {
							_, err = g.Walk() // replaces w, and is left alone in turn
						}
						if err != nil {
							t.Fatal(err)
						}
						break
					}
					var chunk []Record
					if chunk, done, err = w.Next(nil, 1+rng.IntN(40)); err != nil {
						t.Fatal(err)
					}
					for _, r := range chunk {
						if _, twice := got[r.Key]; twice {
							t.Fatalf("%s handed out twice", r.Key)
						}
						got[r.Key] = r
					}
					for range rng.IntN(30) {
						step()
					}
				}
				if abandon {
					continue
				}
				for k, r := range got {
					st, ok := cut[k]
					if !ok {
						t.Fatalf("%s handed out, but it had no bucket at the cut", k)
					}
					if r.State.Tokens != st.Tokens || r.State.Last != clk.Base().UnixMicros(st.Last) || r.Limit != cutLimit[k] {
						t.Fatalf("%s handed out as %+v %+v, want its state at the cut %+v %+v", k, r.State, r.Limit, st, cutLimit[k])
					}
				}
				for k, st := range cut {
					if _, ok := got[k]; !ok && !st.IsFull(cutLimit[k], clk.Now()) {
						t.Fatalf("%s had a bucket at the cut, is not full by the end of the walk, and was not handed out", k)
					}
				}
			}
		})
	}
}

// TestWalkHandsOutEvictedAndRestoredBucketsAsAtTheCut: a bucket evicted
// by --max-buckets after the cut, and a restored one replaced by a newer
// restore after it, are handed out as they were at the cut.
func TestWalkHandsOutEvictedAndRestoredBucketsAsAtTheCut(t *testing.T) {
	g, clk := newTestGroup(t, Config{Shards: 1, SweepInterval: time.Hour, MaxBuckets: 3})
	c := g.NewCaller()
	lim := bucket.Limit{Capacity: 10, Rate: 0.001}
	unix := clk.Base().UnixMicros(clk.Now())
	rec := func(tokens float64, last int64) Record {
		return Record{Key: "restored", State: bucket.State{Tokens: tokens, Last: last}, Limit: lim}
	}
	if _, err := g.Restore([]Record{rec(4, unix-2_000_000)}); err != nil {
		t.Fatal(err)
	}
	runOne(t, c, acquire("a", lim.Capacity, lim.Rate, 3))
	runOne(t, c, acquire("b", lim.Capacity, lim.Rate, 5))
	w, err := g.Walk()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := g.Restore([]Record{rec(2, unix-1_000_000)}); err != nil || n != 1 {
		t.Fatalf("the newer restore stored %d, %v", n, err)
	}
	runOne(t, c, acquire("c", lim.Capacity, lim.Rate, 9)) // a fourth bucket: one of the others is evicted
	if ev := g.Stats().Evicted; ev != 1 {
		t.Fatalf("%d evicted, want 1", ev)
	}
	var got []Record
	for done := false; !done; {
		if got, done, err = w.Next(got, 1); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]float64{"restored": 4, "a": 7, "b": 5}
	if len(got) != len(want) {
		t.Fatalf("handed out %+v, want the three buckets of the cut", got)
	}
	for _, r := range got {
		if tok, ok := want[r.Key]; !ok || r.State.Tokens != tok {
			t.Fatalf("%s handed out with %v tokens, want %v (its state at the cut)", r.Key, r.State.Tokens, tok)
		}
	}
}

// TestWalkTakesLaterShardsCopiesAsItGoes: while the walk is still on the
// first shard, a client spends from every bucket of the second; the
// shard keeps a copy of each, and the next chunk takes those copies out
// at once rather than leaving them until the walk reaches that shard.
// The walk still hands out every bucket once, as it was at the cut.
func TestWalkTakesLaterShardsCopiesAsItGoes(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 2, SweepInterval: time.Hour})
	c := g.NewCaller()
	var all, second []string
	for i := 0; len(second) < 100; i++ {
		k := fmt.Sprint("k", i)
		runOne(t, c, acquire(k, 10, 0.001, 1))
		all = append(all, k)
		if shardOfKey(g, []byte(k)) == 1 {
			second = append(second, k)
		}
	}
	w, err := g.Walk()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range second {
		runOne(t, c, acquire(k, 10, 0.001, 1))
	}
	kept := func() (n int) {
		if err := g.on(1, func(s *shard, _ int64) { n = len(s.walk.saved) }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := kept(); n != len(second) {
		t.Fatalf("the second shard keeps %d copies, want %d", n, len(second))
	}
	got, _, err := w.Next(nil, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if n := kept(); n != 0 || len(got) < len(second) {
		t.Fatalf("after a chunk of %d the second shard still keeps %d copies", len(got), n)
	}
	for done := false; !done; {
		if got, done, err = w.Next(got, 7); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for _, r := range got {
		if seen[r.Key] || r.State.Tokens != 9 {
			t.Fatalf("%s handed out twice or not as at the cut (%v tokens, want 9)", r.Key, r.State.Tokens)
		}
		seen[r.Key] = true
	}
	if len(seen) != len(all) {
		t.Fatalf("handed out %d buckets, want %d", len(seen), len(all))
	}
}
