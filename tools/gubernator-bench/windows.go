package main

import (
	"math"
	"slices"
)

// maxInWindow is the most of the sorted instants in any closed window
// [s, s+w] (nanoseconds; w >= 0). It is 0 for no instants.
func maxInWindow(sorted []int64, w int64) int {
	best, i := 0, 0
	for j, t := range sorted {
		for t-sorted[i] > w {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}

// bucketBound is the most one token bucket of capacity tokens refilled at
// ratePerSec can grant in a window of windowNanos when it starts full.
func bucketBound(capacity, ratePerSec float64, windowNanos int64) float64 {
	return capacity + ratePerSec*float64(windowNanos)/1e9
}

// windowCheck is how the grants of a run compare with one bucket per key
// over windows of one length.
type windowCheck struct {
	WindowNanos int64 `json:"window_ns"`
	// SlackNanos is the slowest round trip of the run: a grant is timed at
	// its reply, and the decision happened up to a round trip before, so
	// the grants replied in a window of WindowNanos were decided in one of
	// at most WindowNanos+SlackNanos. The bound is taken over that.
	SlackNanos int64   `json:"slack_ns"`
	Bound      float64 `json:"bound"` // capacity + rate * (window + slack), per key
	// Above is the sum over keys of the grants beyond floor(Bound) in the
	// key's fullest window: the grants above one bucket.
	Above int `json:"grants_above_one_bucket"`
	// Worst is the fullest window of any key, and KeysAbove the keys
	// whose fullest window holds more than Bound.
	Worst     int `json:"worst_key_grants"`
	KeysAbove int `json:"keys_above"`
}

// checkWindows compares each key's grants (reply instants, nanoseconds,
// sorted) over windows of windowNanos with one bucket.
func checkWindows(grants [][]int64, capacity, ratePerSec float64, windowNanos, slackNanos int64) windowCheck {
	c := windowCheck{
		WindowNanos: windowNanos,
		SlackNanos:  slackNanos,
		Bound:       bucketBound(capacity, ratePerSec, windowNanos+slackNanos),
	}
	allowed := int(math.Floor(c.Bound))
	for _, g := range grants {
		n := maxInWindow(g, windowNanos)
		c.Worst = max(c.Worst, n)
		if n > allowed {
			c.Above += n - allowed
			c.KeysAbove++
		}
	}
	return c
}

// sortGrants sorts every key's instants in place.
func sortGrants(grants [][]int64) {
	for _, g := range grants {
		slices.Sort(g)
	}
}
