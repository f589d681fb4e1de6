package leasesim

import "math/rand/v2"

// Network is how a call travels between an instance and Redis: each leg
// (the request, the reply) takes a delay drawn afresh and may be lost.
// Times are microseconds of the true clock.
type Network struct {
	MinDelay, MaxDelay int64 // a leg's usual delay, uniform in [Min, Max]
	// LongShare of the legs take a delay uniform in [LongMin, LongMax]
	// instead: a GC pause, a retransmission, a busy Redis. Long enough,
	// the reply misses the instance's timeout, or the request reaches
	// Redis after its sender has given up on it.
	LongShare        float64
	LongMin, LongMax int64
	Loss             float64 // share of legs that never arrive
}

// DefaultNetwork is a LAN with 0.1-5 ms legs, 1% of them 20-300 ms, and
// 1% lost.
var DefaultNetwork = Network{
	MinDelay: 100, MaxDelay: 5_000,
	LongShare: 0.01, LongMin: 20_000, LongMax: 300_000,
	Loss: 0.01,
}

// leg draws one leg: its delay, and whether it is lost.
func (n Network) leg(r *rand.Rand) (delay int64, lost bool) {
	lost = r.Float64() < n.Loss
	if r.Float64() < n.LongShare {
		return uniform(r, n.LongMin, n.LongMax), lost
	}
	return uniform(r, n.MinDelay, n.MaxDelay), lost
}

// uniform draws an integer in [lo, hi].
func uniform(r *rand.Rand, lo, hi int64) int64 {
	if hi <= lo {
		return lo
	}
	return lo + r.Int64N(hi-lo+1)
}
