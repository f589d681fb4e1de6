package shard

import (
	"fmt"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
)

// walkInChunks walks every shard of g in chunks of max entries, calling
// between after every chunk, and returns what the walk handed out by key.
func walkInChunks(t *testing.T, g *Group, max int, between func()) map[string]Record {
	t.Helper()
	got := map[string]Record{}
	for i := range g.Len() {
		w, err := g.Walk(i)
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
