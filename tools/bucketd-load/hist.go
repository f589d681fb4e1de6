package main

import (
	"math/bits"
	"sync/atomic"
)

// The latency histogram is HDR-style: values below 256 ns are counted
// exactly, above that every power of two is cut into 128 linear sub-buckets,
// so a reported quantile is within 1/128 (0.8%) of the true value. Values
// are nanoseconds and clamp at 2^41 ns (about 36 minutes).
const (
	subBits    = 7
	subCount   = 1 << subBits // sub-buckets per power of two
	maxBits    = 41           // values clamp below 1<<maxBits
	histCounts = 2*subCount + (maxBits-subBits-1)*subCount
)

// bucketIndex is the histogram slot of v.
func bucketIndex(v uint64) int {
	if v >= 1<<maxBits {
		v = 1<<maxBits - 1
	}
	if v < 2*subCount {
		return int(v)
	}
	shift := bits.Len64(v) - (subBits + 1) // >= 1
	m := v >> uint(shift)                  // in [subCount, 2*subCount)
	return 2*subCount + (shift-1)*subCount + int(m-subCount)
}

// bucketLow is the smallest value counted in slot i.
func bucketLow(i int) uint64 {
	if i < 2*subCount {
		return uint64(i)
	}
	j := i - 2*subCount
	shift := j/subCount + 1
	m := uint64(j%subCount + subCount)
	return m << uint(shift)
}

// bucketHigh is the largest value counted in slot i.
func bucketHigh(i int) uint64 {
	if i+1 >= histCounts {
		return 1<<maxBits - 1
	}
	return bucketLow(i+1) - 1
}

// histogram counts latencies. Record is safe for concurrent use (one
// atomic add) and allocates nothing; the load generator stripes several
// histograms over its connections so that the two cores rarely share a
// cache line.
type histogram struct {
	counts [histCounts]uint64
}

func (h *histogram) recordN(v uint64, n uint64) {
	atomic.AddUint64(&h.counts[bucketIndex(v)], n)
}

// merge adds o's counts into h. Call it only when nobody records any more.
func (h *histogram) merge(o *histogram) {
	for i := range h.counts {
		h.counts[i] += atomic.LoadUint64(&o.counts[i])
	}
}

func (h *histogram) total() uint64 {
	var n uint64
	for _, c := range h.counts {
		n += c
	}
	return n
}

// quantile returns the highest value equivalent to the q-th quantile's
// slot (as HdrHistogram does): the true quantile is at most this and at
// least 1/128 less. It returns 0 for an empty histogram.
func (h *histogram) quantile(q float64) uint64 {
	total := h.total()
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total) + 0.999999999)
	if rank < 1 {
		rank = 1
	}
	if rank > total {
		rank = total
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return bucketHigh(i)
		}
	}
	return bucketHigh(histCounts - 1)
}

// mean is the mean of the slots' midpoints.
func (h *histogram) mean() float64 {
	var sum float64
	var n uint64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		mid := float64(bucketLow(i)+bucketHigh(i)) / 2
		sum += mid * float64(c)
		n += c
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
