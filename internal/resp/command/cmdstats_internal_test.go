package command

import (
	"testing"

	"github.com/bucketd/bucketd/internal/resp/wire"
)

// TestCommandStatsAllocateNothing: counting commandstats and latencystats
// and the slowlog's check (at its default, so nothing is slow) cost a
// pipeline of 16 TB.ACQUIRE, and one TB.ACQUIRE, no allocation, and every
// command is counted under its row.
func TestCommandStatsAllocateNothing(t *testing.T) {
	srv, c := newBenchServer(t)
	acquire := command("TB.ACQUIRE", "user:1", "1000000", "1")
	row := lookup(commandTable, []byte("TB.ACQUIRE")).row
	for _, n := range []int{1, 16} {
		calls := srv.rows[row].calls.Load()
		rest := make([]wire.Command, n-1)
		for i := range rest {
			rest[i] = acquire
		}
		allocs := testing.AllocsPerRun(1000, func() {
			c.out = c.out[:0]
			c.rest = rest
			srv.handle(c, acquire)
		})
		if allocs != 0 {
			t.Errorf("pipeline of %d: %v allocations, want 0", n, allocs)
		}
		if got := srv.rows[row].calls.Load() - calls; got != int64(1001*n) { // AllocsPerRun runs once more to warm up
			t.Errorf("pipeline of %d: %d calls counted, want %d", n, got, 1001*n)
		}
		var hist int64
		for b := range srv.rows[row].hist {
			hist += srv.rows[row].hist[b].Load()
		}
		if hist != srv.rows[row].calls.Load() {
			t.Errorf("histogram holds %d calls, commandstats %d", hist, srv.rows[row].calls.Load())
		}
	}
}

// TestHistogramBuckets: every latency lands in a bucket whose upper bound
// is above it by at most a quarter octave, so a percentile is never
// reported below the latency, nor more than 25% above it.
func TestHistogramBuckets(t *testing.T) {
	for _, ns := range []int64{0, 1, 127, 128, 159, 160, 255, 256, 1000, 1023, 1024, 99999, 1e6, 1e9, 1e12} {
		b := histBucket(ns)
		up := histUpper(b)
		if ns >= up || ns >= 128 && float64(up) > 1.25*float64(ns)+1 || b > 0 && ns < histUpper(b-1) && histUpper(b-1) > 128 {
			t.Errorf("%d ns: bucket %d, upper bound %d", ns, b, up)
		}
	}
	if b := histBucket(1 << 62); b != histBuckets-1 {
		t.Errorf("a huge latency in bucket %d, want the last", b)
	}
}
