package bucket

import (
	"math"
	"testing"
)

// Fixed instants in microseconds, as in golang.org/x/time/rate's tests.
const (
	t0 = int64(1_000_000)
	t1 = t0 + 100_000   // +0.1 s
	t2 = t0 + 500_000   // +0.5 s
	t3 = t0 + 1_000_000 // +1 s
	t4 = t0 + 2_000_000 // +2 s
	t9 = t0 + 60_000_000
)

type step struct {
	name  string
	limit Limit
	cost  float64
	now   int64
	want  Decision
	// wantTokens is the stored tokens after the step; -1 means "not stored"
	// (the bucket is full or the call was a peek of a missing bucket).
	wantTokens float64
}

func allowed(rem, reset int64) Decision {
	return Decision{Allowed: true, Remaining: rem, ResetAfterMs: reset}
}

func denied(rem, retry, reset int64) Decision {
	return Decision{Remaining: rem, RetryAfterMs: retry, ResetAfterMs: reset}
}

// runSteps applies steps to one bucket the way a shard does: store the
// returned state unless the call was a peek or the bucket came back full.
func runSteps(t *testing.T, steps []step) {
	t.Helper()
	var s State
	exists := false
	for i, st := range steps {
		next, got := Acquire(s, exists, st.limit, st.cost, st.now)
		if got != st.want {
			t.Fatalf("step %d (%s): decision %+v, want %+v", i, st.name, got, st.want)
		}
		if st.cost > 0 {
			s, exists = next, !next.IsFull(st.limit, st.now)
		} else if next != s {
			t.Fatalf("step %d (%s): cost 0 changed the state %+v -> %+v", i, st.name, s, next)
		}
		gotTokens := -1.0
		if exists {
			gotTokens = s.Tokens
		}
		if math.Abs(gotTokens-st.wantTokens) > 1e-9 {
			t.Fatalf("step %d (%s): stored tokens %v, want %v", i, st.name, gotTokens, st.wantTokens)
		}
	}
}

func TestAcquireSteps(t *testing.T) {
	ten := Limit{Capacity: 10, Rate: 1}
	half := Limit{Capacity: 1, Rate: 0.5}
	tests := []struct {
		name  string
		steps []step
	}{
		{"new bucket is full and takes one", []step{
			{"first", ten, 1, t0, allowed(9, 1000), 9},
		}},
		{"burst drains then denies, refill brings tokens back", []step{
			{"take 10", ten, 10, t0, allowed(0, 10000), 0},
			{"empty", ten, 1, t0, denied(0, 1000, 10000), 0},
			{"0.1s later still short", ten, 1, t1, denied(0, 900, 9900), 0.1},
			{"1s after drain one token", ten, 1, t3, allowed(0, 10000), 0},
			{"2s later two tokens", ten, 2, t4 + 1_000_000, allowed(0, 10000), 0},
		}},
		{"fractional rate: one token every two seconds", []step{
			{"take", half, 1, t0, allowed(0, 2000), 0},
			{"after 1s half a token", half, 1, t3, denied(0, 1000, 1000), 0.5},
			{"after 2s one token", half, 1, t4, allowed(0, 2000), 0},
		}},
		{"cost larger than capacity never succeeds and stores nothing", []step{
			{"too big on new bucket", ten, 11, t0, denied(10, -1, 0), -1},
			{"take 3", ten, 3, t0, allowed(7, 3000), 7},
			{"too big on existing bucket", ten, 11, t0, denied(7, -1, 3000), 7},
		}},
		{"cost 0 is a peek that creates nothing", []step{
			{"peek new", ten, 0, t0, allowed(10, 0), -1},
			{"take 4", ten, 4, t0, allowed(6, 4000), 6},
			{"peek existing", ten, 0, t1, allowed(6, 3900), 6},
		}},
		{"fractional cost", []step{
			{"take 0.5", ten, 0.5, t0, allowed(9, 500), 9.5},
			{"take 9.25", ten, 9.25, t0, allowed(0, 9750), 0.25},
			{"need 1, have 0.25", ten, 1, t0, denied(0, 750, 9750), 0.25},
		}},
		{"lower capacity clamps stored tokens", []step{
			{"take 1 of 10", ten, 1, t0, allowed(9, 1000), 9},
			{"capacity 5 now", Limit{5, 1}, 1, t0, allowed(4, 1000), 4},
			{"capacity back to 10 keeps the clamp", ten, 1, t0, allowed(3, 7000), 3},
		}},
		{"refill uses the rate of the current call", []step{
			{"drain", ten, 10, t0, allowed(0, 10000), 0},
			{"1s at rate 4 gives 4", Limit{10, 4}, 4, t3, allowed(0, 2500), 0},
		}},
		{"time going backwards adds nothing", []step{
			{"drain at t3", ten, 10, t3, allowed(0, 10000), 0},
			{"at t0 (earlier)", ten, 1, t0, denied(0, 1000, 10000), 0},
			{"at t3 again: still nothing, the earlier call did not rewind Last", ten, 1, t3, denied(0, 1000, 10000), 0},
			{"one second after t3", ten, 1, t4, allowed(0, 10000), 0},
		}},
		{"bucket full again is not stored", []step{
			{"take 1", ten, 1, t0, allowed(9, 1000), 9},
			{"a minute later take 1", ten, 1, t9, allowed(9, 1000), 9},
		}},
		{"huge and tiny rates saturate instead of overflowing", []step{
			{"tiny rate", Limit{1e15, 1e-300}, 1, t0, allowed(1e15-1, math.MaxInt64), 1e15 - 1},
			{"huge rate refills at once", Limit{1e15, 1e15}, 1e15, t1, allowed(0, 1000), 0},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runSteps(t, tc.steps) })
	}
}

func TestPeekChangesNothingAndMatchesAcquire(t *testing.T) {
	l := Limit{Capacity: 5, Rate: 2}
	s := State{Tokens: 1.5, Last: t0}
	for _, cost := range []float64{0, 1, 1.5, 2, 3, 5, 6} {
		for _, now := range []int64{t0 - 1, t0, t1, t2, t3, t9} {
			before := s
			p := Peek(s, true, l, cost, now)
			if s != before {
				t.Fatalf("Peek changed the state")
			}
			_, a := Acquire(s, true, l, cost, now)
			if p != a {
				t.Fatalf("cost %v at %v: peek %+v, acquire %+v", cost, now, p, a)
			}
		}
	}
	// A smaller capacity in a peek lowers the answer only.
	if d := Peek(State{Tokens: 9, Last: t0}, true, Limit{Capacity: 3, Rate: 1}, 1, t0); d.Remaining != 2 {
		t.Fatalf("peek with smaller capacity: remaining %d, want 2", d.Remaining)
	}
}

// TestFrequentPollingKeepsFractions is docs/commands.md's refill rule: a key polled every
// millisecond at rate 0.5/s still gets one token every two seconds.
func TestFrequentPollingKeepsFractions(t *testing.T) {
	l := Limit{Capacity: 1, Rate: 0.5}
	var s State
	exists := false
	grants := 0
	const pollMicros = 1000
	const seconds = 60
	for now := t0; now <= t0+seconds*1_000_000; now += pollMicros {
		next, d := Acquire(s, exists, l, 1, now)
		s, exists = next, !next.IsFull(l, now)
		if d.Allowed {
			grants++
		}
	}
	// One at start (full bucket) plus one every two seconds.
	if want := 1 + seconds/2; grants < want-1 || grants > want {
		t.Fatalf("granted %d tokens in %ds at 0.5/s polled every ms, want %d", grants, seconds, want)
	}
}

// TestIsFull: 2 of 10 tokens at 4 per second are full exactly 2 s later.
func TestIsFull(t *testing.T) {
	l := Limit{Capacity: 10, Rate: 4}
	s := State{Tokens: 2, Last: t0}
	if at := int64(t0 + 2_000_000); s.IsFull(l, at-1) || !s.IsFull(l, at) {
		t.Fatalf("IsFull around %d is wrong", at)
	}
	if !(State{Tokens: 10, Last: t1}).IsFull(l, t1) {
		t.Fatalf("a bucket with capacity tokens is not full")
	}
}

func TestCeilMillis(t *testing.T) {
	for _, tc := range []struct {
		amount, rate float64
		want         int64
	}{
		{0, 1, 0}, {-1, 1, 0}, {1, 1, 1000}, {1, 3, 334}, {1e-9, 1, 1},
		{10 - 6.1, 1, 3900},             // float noise above a whole number snaps down
		{1, 1.0 / 3e9, 3e12},            // long waits are still rounded up, never short
		{0.5e-3 + 1e-12, 1, 1},          // a hair over half a millisecond rounds up
		{1e15, 1e-300, math.MaxInt64},   // saturates
		{1e7 + 1e-7, 1, 10_000_000_001}, // 1e10 ms plus 1e-4 ms: rounds up
	} {
		if got := ceilMillis(tc.amount, tc.rate); got != tc.want {
			t.Errorf("ceilMillis(%v, %v) = %d, want %d", tc.amount, tc.rate, got, tc.want)
		}
	}
}

func TestSaturate(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want int64
	}{
		{0, 0}, {1.9, 1}, {0x1p62, 1 << 62}, {0x1p63, math.MaxInt64},
		{math.Inf(1), math.MaxInt64}, {math.NaN(), math.MaxInt64}, {1e300, math.MaxInt64},
	} {
		if got := saturate(tc.in); got != tc.want {
			t.Errorf("saturate(%v) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestCheckTakesNothing: Check says whether a bucket alone holds the cost,
// with what it holds now as Remaining (a take is not applied), and the
// usual retry rules when it does not.
func TestCheckTakesNothing(t *testing.T) {
	l := Limit{Capacity: 10, Rate: 1}
	s := State{Tokens: 4.5, Last: t0}
	for _, tc := range []struct {
		name   string
		s      State
		exists bool
		cost   float64
		now    int64
		want   Decision
	}{
		{"a missing bucket is full", State{}, false, 3, t0, allowed(10, 0)},
		{"enough: remaining is what it holds", s, true, 4, t0, allowed(4, 5500)},
		{"refill counts", s, true, 5, t2, allowed(5, 5000)},
		{"not enough", s, true, 6, t0, denied(4, 1500, 5500)},
		{"cost above capacity can never succeed", s, true, 11, t0, denied(4, -1, 5500)},
		{"cost 0", s, true, 0, t0, allowed(4, 5500)},
	} {
		if got := Check(tc.s, tc.exists, l, tc.cost, tc.now); got != tc.want {
			t.Errorf("%s: Check = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
