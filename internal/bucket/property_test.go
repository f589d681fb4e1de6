package bucket

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// opsFromBytes turns fuzz input into a sequence of (time step, cost) pairs so
// the fuzzer explores call patterns, not only single calls.
func opsFromBytes(data []byte) (steps []int64, costs []float64) {
	for len(data) >= 4 {
		dt := int64(binary.LittleEndian.Uint16(data)) * int64(1+data[2]%64) // up to ~4 s
		if data[2]&0x80 != 0 {
			dt = -dt // time going backwards
		}
		steps = append(steps, dt)
		costs = append(costs, float64(data[3])/16) // 0 .. 15.9375 in 1/16 steps
		data = data[4:]
	}
	return steps, costs
}

// checkInvariants runs the sequence on one bucket and checks what must hold
// for every input: tokens stay in [0, capacity] and are never NaN, decisions
// agree with the tokens, and over the whole run the tokens granted never
// exceed capacity + rate * elapsed.
//
// A twin bucket is run beside it the way a shard runs buckets, deleting the
// state whenever it is full again; while time has only moved forward, its
// decisions must equal the kept bucket's (docs/commands.md, Expiry: deleting a full
// bucket changes no future answer). Once time has gone backwards the twin is
// no longer compared: a deleted bucket cannot remember a Last that lies in
// the future, which bucketd's monotonic clock never produces.
func checkInvariants(t *testing.T, l Limit, steps []int64, costs []float64) {
	t.Helper()
	var s, twin State
	exists, twinExists, monotonic := false, false, true
	now := int64(1 << 40)
	start, latest := now, now
	granted := 0.0
	for i := range steps {
		now += steps[i]
		monotonic = monotonic && steps[i] >= 0
		if now > latest {
			latest = now
		}
		if i == 0 {
			start, latest = now, now // the window opens at the first call
		}
		start = min(start, now) // ... or at an earlier one, if time went back
		cost := costs[i]
		before := l.Capacity
		if exists {
			before = s.TokensAt(l, now)
		}
		next, d := Acquire(s, exists, l, cost, now)
		if cost > 0 {
			s, exists = next, true
		}
		twinNext, twinD := Acquire(twin, twinExists, l, cost, now)
		if cost > 0 {
			twin, twinExists = twinNext, !twinNext.IsFull(l, now)
		}
		if monotonic && twinD != d {
			t.Fatalf("step %d: deleting full buckets changed the answer: %+v, kept bucket %+v", i, twinD, d)
		}
		if exists && (math.IsNaN(s.Tokens) || s.Tokens < 0 || s.Tokens > l.Capacity) {
			t.Fatalf("step %d: tokens %v outside [0, %v]", i, s.Tokens, l.Capacity)
		}
		if d.Allowed != (before >= cost) {
			t.Fatalf("step %d: allowed=%v with %v tokens for cost %v", i, d.Allowed, before, cost)
		}
		if d.Allowed {
			granted += cost
		}
		if d.Remaining < 0 || d.ResetAfterMs < 0 || d.RetryAfterMs < -1 {
			t.Fatalf("step %d: negative figure in %+v", i, d)
		}
		if d.Allowed && d.RetryAfterMs != 0 || !d.Allowed && cost > l.Capacity && d.RetryAfterMs != -1 {
			t.Fatalf("step %d: retry_after %d inconsistent with %+v cost %v", i, d.RetryAfterMs, d, cost)
		}
		elapsed := float64(latest-start) / 1e6
		if limit := l.Capacity + l.Rate*elapsed; granted > limit*(1+1e-12)+1e-9 {
			t.Fatalf("step %d: granted %v tokens in %v s, more than capacity+rate*T = %v", i, granted, elapsed, limit)
		}
	}
}

func FuzzAcquireInvariants(f *testing.F) {
	f.Add(10.0, 1.0, []byte{0, 0, 0, 16, 0, 0, 0, 16, 1, 0, 0x80, 32})
	f.Add(1.0, 0.5, []byte{232, 3, 0, 16, 232, 3, 0, 16, 232, 3, 1, 16})
	f.Add(1e15, 1e-300, []byte{255, 255, 63, 255})
	f.Add(0.25, 1e15, []byte{1, 0, 0, 4, 1, 0, 0x81, 4})
	f.Fuzz(func(t *testing.T, capacity, rate float64, data []byte) {
		if !(capacity > 0 && capacity <= 1e15 && rate > 0 && rate <= 1e15) {
			return // the protocol layer rejects these before they get here
		}
		steps, costs := opsFromBytes(data)
		checkInvariants(t, Limit{Capacity: capacity, Rate: rate}, steps, costs)
	})
}

// TestRandomSequences is the same property over a fixed pseudo-random
// sample, so plain `go test` exercises it without -fuzz.
func TestRandomSequences(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		l := Limit{
			Capacity: math.Pow(10, rng.Float64()*6-2),
			Rate:     math.Pow(10, rng.Float64()*8-4),
		}
		data := make([]byte, 4*rng.IntN(200))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		steps, costs := opsFromBytes(data)
		checkInvariants(t, l, steps, costs)
	}
}

// BenchmarkAcquireExisting measures the bucket math of one TB.ACQUIRE on a
// bucket that already exists: no allocation, no clock.
func BenchmarkAcquireExisting(b *testing.B) {
	b.ReportAllocs()
	l := Limit{Capacity: 1e9, Rate: 1}
	s := State{Tokens: 1e9 - 1, Last: 1}
	now := int64(2)
	for b.Loop() {
		s, _ = Acquire(s, true, l, 1, now)
		now++
	}
}

func TestAcquireAllocatesNothing(t *testing.T) {
	l := Limit{Capacity: 100, Rate: 3}
	s := State{Tokens: 10, Last: 1}
	allocs := testing.AllocsPerRun(1000, func() {
		s, _ = Acquire(s, true, l, 1, s.Last+1000)
		_ = Peek(s, true, l, 2, s.Last+2000)
	})
	if allocs != 0 {
		t.Fatalf("Acquire+Peek allocate %v times per call, want 0", allocs)
	}
}
