package ratelog

import (
	"testing"
	"time"
)

// TestGate: one line per Interval passes, the next one says how many were
// held back in between.
func TestGate(t *testing.T) {
	var g Gate
	t0 := time.Unix(1_700_000_000, 0)
	for _, step := range []struct {
		at         time.Duration
		ok         bool
		suppressed int64
	}{
		{0, true, 0},
		{time.Millisecond, false, 0},
		{Interval - time.Nanosecond, false, 0},
		{Interval, true, 2},
		{Interval + 1, false, 0},
		{3 * Interval, true, 1},
		{3*Interval - time.Second, false, 0}, // the clock going back passes nothing
	} {
		n, ok := g.Allow(t0.Add(step.at))
		if ok != step.ok || n != step.suppressed {
			t.Fatalf("at %v: Allow = %d, %v; want %d, %v", step.at, n, ok, step.suppressed, step.ok)
		}
	}
}
