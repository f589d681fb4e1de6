package leasesim

import (
	"fmt"
	"io"
)

// Result is what one run found.
type Result struct {
	Config Config
	Keys   []KeyResult
	// Calls is the clients' calls; Decisions those answered (a call that
	// reached no instance, or is still waiting at the end, is not).
	Calls, Decisions int64
	// RedisCalls is every call sent to Redis: client misses, renewals,
	// give-backs, whether they arrived or not.
	RedisCalls int64
	// PlainCalls of them were plain acquires: a client's miss while a
	// lease call for its key was out (lease.Plain).
	PlainCalls int64
	Lost       int64 // legs lost, requests and replies
	TimedOut   int64 // calls their sender gave up on
	Late       int64 // calls Redis ran after their sender gave up on them (or died)
	Crashed    int
	Joined     int
	Events     int64
}

// KeyResult is one key's grants, against the bound and the ideal bucket.
type KeyResult struct {
	Key     Key
	Granted float64 // tokens granted, over all instances
	Ideal   float64 // tokens one ideal bucket fed the same calls grants
	Win100  Window  // the busiest 100 ms
	Win1s   Window  // the busiest second
}

func (k *keyState) result() KeyResult {
	return KeyResult{
		Key: k.Key, Granted: k.check.granted(), Ideal: k.check.idealTokens,
		Win100: k.check.window(100_000), Win1s: k.check.window(1_000_000),
	}
}

// Over is the most any window of any key went over its bound: 0 when the
// design kept its promise.
func (r Result) Over() float64 {
	o := 0.0
	for _, k := range r.Keys {
		o = max(o, k.Win100.Over, k.Win1s.Over)
	}
	return o
}

// Granted and Ideal sum the keys' tokens.
func (r Result) Granted() (lease, ideal float64) {
	for _, k := range r.Keys {
		lease += k.Granted
		ideal += k.Ideal
	}
	return lease, ideal
}

// CallsPerDecision is Redis calls per client decision.
func (r Result) CallsPerDecision() float64 {
	if r.Decisions == 0 {
		return 0
	}
	return float64(r.RedisCalls) / float64(r.Decisions)
}

// worst is the key whose busiest window of the length came closest to
// (or went furthest over) its bound.
func (r Result) worst(w100 bool) (Key, Window) {
	var key Key
	var best Window
	for i, k := range r.Keys {
		w := k.Win1s
		if w100 {
			w = k.Win100
		}
		if i == 0 || w.Max/w.Bound > best.Max/best.Bound {
			key, best = k.Key, w
		}
	}
	return key, best
}

// String is a one-line summary, for test logs.
func (r Result) String() string {
	l, i := r.Granted()
	k100, w100 := r.worst(true)
	k1, w1 := r.worst(false)
	return fmt.Sprintf("instances %d %s demand %gx: granted %.0f ideal %.0f (%.1f%%); 100ms max %.0f bound %.0f (%s at %dms); 1s max %.0f bound %.0f (%s at %dms); over %.0f; %.3f Redis calls/decision (%.3f plain); lost %d late %d crashed %d",
		r.Config.Instances, r.Config.Shape, r.Config.Demand, l, i, pct(l, i),
		w100.Max, w100.Bound, k100.Name, w100.At/1000, w1.Max, w1.Bound, k1.Name, w1.At/1000,
		r.Over(), r.CallsPerDecision(), float64(r.PlainCalls)/float64(max(r.Decisions, 1)), r.Lost, r.Late, r.Crashed)
}

func pct(a, b float64) float64 {
	if b == 0 {
		return 100
	}
	return 100 * a / b
}

// WriteTable writes results as a markdown table, one row per run. The
// window columns show the key that came closest to its bound.
func WriteTable(w io.Writer, rs []Result) error {
	if _, err := fmt.Fprintln(w, "| instances | demand | demand/rate | loss | crashes | granted | ideal | lease/ideal | max 100 ms / bound | max 1 s / bound | over | Redis calls / decision (plain) |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"); err != nil {
		return err
	}
	for _, r := range rs {
		l, i := r.Granted()
		k100, w100 := r.worst(true)
		k1, w1 := r.worst(false)
		_, err := fmt.Fprintf(w, "| %d | %s | %gx | %g%% | %d | %.0f | %.0f | %.1f%% | %.0f / %.0f (%s) | %.0f / %.0f (%s) | %.0f | %.3f (%.3f) |\n",
			r.Config.Instances, r.Config.Shape, r.Config.Demand, 100*r.Config.Net.Loss, r.Crashed,
			l, i, pct(l, i), w100.Max, w100.Bound, k100.Name, w1.Max, w1.Bound, k1.Name, r.Over(), r.CallsPerDecision(), float64(r.PlainCalls)/float64(max(r.Decisions, 1)))
		if err != nil {
			return err
		}
	}
	return nil
}
