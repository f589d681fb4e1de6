package shard

import (
	"testing"
	"time"
	"unsafe"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
)

// TestEntryStaysFortyEightBytes: the flags Restore and walks need fit in
// the entry's padding; a bigger entry would cost every bucket.
func TestEntryStaysFortyEightBytes(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n != 48 {
		t.Fatalf("entry is %d bytes, want 48", n)
	}
}

// TestRestoreKeepsTheNewerState: at start the snapshot and then the Redis
// copy are restored; whichever holds the newer state of a key wins, in
// either order. A state decided since the start always wins.
func TestRestoreKeepsTheNewerState(t *testing.T) {
	g, clk := newTestGroup(t, Config{Shards: 1, SweepInterval: time.Hour})
	c := g.NewCaller()
	lim := bucket.Limit{Capacity: 10, Rate: 0.001}
	unixNow := clk.Base().UnixMicros(clk.Now())
	older, newer := unixNow-2_000_000, unixNow-1_000_000
	rec := func(key string, tokens float64, last int64) Record {
		return Record{Key: key, State: bucket.State{Tokens: tokens, Last: last}, Limit: lim}
	}
	remaining := func(key string) int64 {
		t.Helper()
		return runOne(t, c, decide.Request{Kind: decide.Peek, Key: []byte(key), Limit: lim, Cost: 1}).Decision.Remaining
	}
	restore := func(want int, recs ...Record) {
		t.Helper()
		if n, err := g.Restore(recs); err != nil || n != want {
			t.Fatalf("Restore stored %d (%v), want %d", n, err, want)
		}
	}

	// The snapshot first (older), then Redis (newer): Redis wins.
	restore(1, rec("a", 9, older))
	restore(1, rec("a", 0, newer))
	// Newer first, then older: the newer stays.
	restore(1, rec("b", 0, newer))
	restore(0, rec("b", 9, older))
	// The same state twice: the first stays, nothing is stored again.
	restore(0, rec("a", 0, newer))
	for _, key := range []string{"a", "b"} {
		if got := remaining(key); got != 0 {
			t.Fatalf("%s: %d left after the peek's take would be 0 left; the older copy won", key, got)
		}
	}

	// A key decided since the start keeps its state even against a record
	// stamped later (a clock that was ahead in the process that wrote it).
	runOne(t, c, acquire("live", 10, 0.001, 2)) // 8 left
	restore(0, rec("live", 0, unixNow+60_000_000))
	if got := remaining("live"); got != 7 {
		t.Fatalf("live: %d left after one more, want 7 (the decided state)", got)
	}
	// ... and so does a loaded key once a call has decided on it.
	runOne(t, c, acquire("a", 10, 0.001, 0.5)) // a call on "a", denied or not, decides its state
	restore(0, rec("a", 9, unixNow+1))
	if got := remaining("a"); got != 0 {
		t.Fatalf("a: %d left, want 0: a decided state was replaced by a load", got)
	}

	// A newer record that is full by now removes the older loaded state.
	restore(1, rec("c", 0, older))
	restore(0, Record{Key: "c", State: bucket.State{Tokens: 1, Last: newer}, Limit: bucket.Limit{Capacity: 1, Rate: 1}})
	if got := remaining("c"); got != 9 {
		t.Fatalf("c: %d left, want a full bucket (9 after the peek's take)", got)
	}

	// CL.THROTTLE records fill in only keys without state, as they come
	// from snapshots alone; a record of the other kind never replaces.
	q, _ := bucket.NewGCRA(4, 1, 10, 1)
	tat := func(delta time.Duration) int64 { return clk.Base().UnixNanos(clk.Now()*1000 + int64(delta)) }
	restore(1, Record{Key: "g", Kind: GCRA, TAT: tat(2 * time.Second)})
	restore(0, Record{Key: "g", Kind: GCRA, TAT: tat(25 * time.Second)})
	restore(0, rec("g", 0, newer))
	if r := runOne(t, c, decide.Request{Kind: decide.Throttle, Key: []byte("g"), Quota: q}).Throttle; r.Remaining != 3 {
		t.Fatalf("g: %+v, want the first GCRA state (3 left)", r)
	}
	if st := g.Stats(); st.Buckets != 4 {
		t.Fatalf("%d live buckets, want 4 (a, b, live and g; c went)", st.Buckets)
	}
}
