package leasesim

import (
	"cmp"
	"slices"

	"github.com/bucketd/bucketd/internal/bucket"
)

// grant is one allowed call: its cost, at the true instant the tokens were
// taken (Redis's decision, or the instance's spending of its lease).
type grant struct {
	at   int64
	cost float64
}

// checker records what one key granted and what an ideal single bucket
// fed the same demand would have granted.
type checker struct {
	key    Key
	grants []grant
	// ideal is one bucket that sees every call the moment it arrives at
	// an instance: what a limiter with no distance to cross would allow.
	ideal       bucket.State
	idealExists bool
	idealTokens float64
}

// demand feeds a call that arrived at true instant t to the ideal bucket.
func (c *checker) demand(cost float64, t int64) {
	s, d := bucket.Acquire(c.ideal, c.idealExists, c.key.limitAt(t), cost, t)
	c.ideal, c.idealExists = s, true
	if d.Allowed {
		c.idealTokens += cost
	}
}

// allow records a grant.
func (c *checker) allow(cost float64, t int64) { c.grants = append(c.grants, grant{at: t, cost: cost}) }

// Window is the busiest window of one length: the most tokens granted in
// any [t, t+W] against what one bucket can grant in it. With a limit
// change, it is the window that came closest to (or went furthest over)
// its bound, which is the old limit's before the change, the new one's
// after, and the larger of the two across it.
type Window struct {
	W     int64   // microseconds
	Max   float64 // tokens granted in that window
	At    int64   // the true instant that window starts
	Bound float64 // capacity + rate*W
	Over  float64 // max(0, Max - Bound): must be 0
}

// bound is what one bucket can grant in [t, t+w].
func (c *checker) bound(t, w int64) float64 {
	f := func(l bucket.Limit) float64 { return l.Capacity + l.Rate*float64(w)/1e6 }
	a, b := f(c.key.limitAt(t)), f(c.key.limitAt(t+w))
	return max(a, b)
}

// window finds the busiest window of length w over every grant.
func (c *checker) window(w int64) Window {
	g := slices.Clone(c.grants)
	slices.SortStableFunc(g, func(a, b grant) int { return cmp.Compare(a.at, b.at) })
	res := Window{W: w, Bound: c.bound(0, w)}
	sum, j := 0.0, 0
	for i := range g {
		for j < len(g) && g[j].at <= g[i].at+w {
			sum += g[j].cost
			j++
		}
		if b := c.bound(g[i].at, w); sum-b > res.Max-res.Bound {
			res.Max, res.At, res.Bound = sum, g[i].at, b
		}
		sum -= g[i].cost
	}
	// Costs are whole numbers here, so sums are exact; the bound carries
	// the rounding of rate*w, hence the tolerance.
	if over := res.Max - res.Bound; over > 1e-9*res.Bound {
		res.Over = over
	}
	return res
}

// granted sums the tokens granted.
func (c *checker) granted() float64 {
	s := 0.0
	for _, g := range c.grants {
		s += g.cost
	}
	return s
}
