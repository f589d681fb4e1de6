package bucket

import "testing"

// TestThrottleMatchesRedisCell replays redis-cell's own test table
// (src/cell/mod.rs, it_rate_limits: max_burst 4, 1 per second) and the
// example of its README.
func TestThrottleMatchesRedisCell(t *testing.T) {
	const s = int64(1e9)
	const ms = int64(1e6)
	start := int64(1_000_000) * s
	cases := []struct {
		at                      int64
		quantity                int64
		remaining, reset, retry int64
		limited                 bool
	}{
		// You can never make a request larger than the maximum.
		{start, 6, 5, 0, -1, true},
		// Rate limit normal requests appropriately.
		{start, 1, 4, 1, -1, false},
		{start, 1, 3, 2, -1, false},
		{start, 1, 2, 3, -1, false},
		{start, 1, 1, 4, -1, false},
		{start, 1, 0, 5, -1, false},
		{start, 1, 0, 5, 1, true},
		{start + 3000*ms, 1, 2, 3, -1, false},
		{start + 3100*ms, 1, 1, 4, -1, false}, // 3.9 s rounds up to 4
		{start + 4000*ms, 1, 1, 4, -1, false},
		{start + 8000*ms, 1, 4, 1, -1, false},
		{start + 9500*ms, 1, 4, 1, -1, false},
		// Zero-volume request just peeks at the state.
		{start + 9500*ms, 0, 4, 1, -1, false},
		// High-volume request uses up more of the limit.
		{start + 9500*ms, 2, 2, 3, -1, false},
		// Large requests cannot exceed limits.
		{start + 9500*ms, 5, 2, 3, 3, true},
	}
	var tat int64
	exists := false
	for i, tc := range cases {
		q, ok := NewGCRA(4, 1, 1, tc.quantity)
		if !ok {
			t.Fatal("quota rejected")
		}
		newTat, store, r := Throttle(tat, exists, q, tc.at)
		want := ThrottleResult{Limited: tc.limited, Limit: 5, Remaining: tc.remaining, RetryAfterSec: tc.retry, ResetAfterSec: tc.reset}
		if r != want {
			t.Fatalf("case %d: %+v, want %+v", i, r, want)
		}
		tat, exists = newTat, store
	}
	// README: CL.THROTTLE user123 15 30 60 1 on a fresh key -> 0 16 15 -1 2.
	q, _ := NewGCRA(15, 30, 60, 1)
	if _, _, r := Throttle(0, false, q, start); r != (ThrottleResult{Limit: 16, Remaining: 15, RetryAfterSec: -1, ResetAfterSec: 2}) {
		t.Fatalf("README example: %+v", r)
	}
}

func TestNewGCRARejectsOverflow(t *testing.T) {
	if _, ok := NewGCRA(1<<62, 1, 1000, 1); ok {
		t.Fatal("overflowing tolerance accepted")
	}
	if _, ok := NewGCRA(1, 1, 1<<40, 1); ok {
		t.Fatal("overflowing period accepted")
	}
	if _, ok := NewGCRA(15, 30, 60, 1); !ok {
		t.Fatal("ordinary quota rejected")
	}
}
