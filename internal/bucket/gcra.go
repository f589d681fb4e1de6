package bucket

import "math"

// GCRA is redis-cell's CL.THROTTLE quota in the form its algorithm (the
// generic cell rate algorithm) uses, in integer nanoseconds. GCRA is a token
// bucket seen from the other side: a bucket of Limit = max_burst+1 tokens
// refilled at count/period per second allows exactly what GCRA allows. It is
// kept as integer nanoseconds here, instead of being mapped onto Acquire,
// so that CL.THROTTLE answers bit for bit what redis-cell answers, including
// its rounding.
type GCRA struct {
	Limit       int64 // max_burst + 1
	EmissionNs  int64 // period / count: the time one token takes to refill
	ToleranceNs int64 // EmissionNs × Limit: the delay variation tolerance
	IncrementNs int64 // EmissionNs × quantity
}

// NewGCRA builds the quota for CL.THROTTLE key max_burst count period
// quantity as redis-cell does: the emission interval is period/count in
// nanoseconds, truncated. ok is false when a product would overflow int64;
// callers validate max_burst >= 0, count >= 1, period >= 1, quantity >= 0.
func NewGCRA(maxBurst, count, periodSec, quantity int64) (GCRA, bool) {
	if periodSec > math.MaxInt64/int64(1e9) {
		return GCRA{}, false
	}
	emission := int64(float64(periodSec*1e9) / float64(count))
	limit := maxBurst + 1
	if emission <= 0 || limit <= 0 || limit > math.MaxInt64/emission || quantity > math.MaxInt64/emission {
		return GCRA{}, false
	}
	return GCRA{Limit: limit, EmissionNs: emission, ToleranceNs: emission * limit, IncrementNs: emission * quantity}, true
}

// ThrottleResult is CL.THROTTLE's five-integer reply.
type ThrottleResult struct {
	Limited       bool
	Limit         int64
	Remaining     int64
	RetryAfterSec int64 // -1 when allowed or when the quantity can never fit
	ResetAfterSec int64
}

// Throttle applies one CL.THROTTLE at nowNs to a key whose theoretical
// arrival time is tatNs (exists=false: no state). It returns the new TAT to
// store and whether there is anything to store: a TAT at or before now is
// the empty state (the bucket is full) and is not stored.
//
// It follows redis-cell's rate_limit step by step; a stored TAT in the past
// counts as now, which is what redis-cell sees once Redis has expired it.
func Throttle(tatNs int64, exists bool, q GCRA, nowNs int64) (newTatNs int64, store bool, r ThrottleResult) {
	tat := nowNs
	if exists && tatNs > nowNs {
		tat = tatNs
	}
	r = ThrottleResult{Limit: q.Limit, RetryAfterSec: -1}
	newTat := tat + q.IncrementNs
	diff := nowNs - (newTat - q.ToleranceNs)
	var ttl int64
	if diff < 0 {
		r.Limited = true
		if q.IncrementNs <= q.ToleranceNs {
			r.RetryAfterSec = secondsUp(-diff)
		}
		ttl = tat - nowNs
		newTat = tat // nothing taken
	} else {
		ttl = newTat - nowNs
	}
	if next := q.ToleranceNs - ttl; next > -q.EmissionNs {
		// redis-cell divides whole microseconds as floats and truncates.
		r.Remaining = int64(float64(next/1000) / float64(q.EmissionNs/1000))
	}
	r.ResetAfterSec = secondsUp(ttl)
	return newTat, newTat > nowNs, r
}

// secondsUp converts a duration to whole seconds the way redis-cell does:
// truncate, then add one if at least a whole millisecond was cut off.
func secondsUp(ns int64) int64 {
	s := ns / 1e9
	if (ns%1e9)/1e6 > 0 {
		s++
	}
	return s
}
