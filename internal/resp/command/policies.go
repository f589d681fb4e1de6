package command

import (
	"github.com/bucketd/bucketd/internal/policy"

	"maps"
	"slices"
	"sync/atomic"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
)

// Policies: the named limits of the configuration file that
// TB.ACQUIRE key POLICY name, TB.PEEK key POLICY name and the key POLICY
// name triples of TB.MACQUIRE use, and the decisions counted per policy.
//
// A policy with one limit keeps one bucket per client key (prefix + key);
// one with several keeps a bucket per limit, under the keys
// policy.Policy.AppendKey derives, and a call checks them all as one
// all-or-nothing group (Caller.AddAll). A shadow policy's decisions are
// computed and charged as usual, but its replies always say allowed.
//
// Counting costs a call without POLICY one increment of its connection's
// tally. A call with POLICY adds one to its connection's tally for that
// policy, by index: the tally holds the policy set it counts for, taken
// once per pipeline (so a pipeline sees one set, and a reload takes effect
// from the next pipeline, or after the next command that is not a bucket
// command); both tallies are added to the shared counters when the
// pipeline is answered. The counters belong to the policy's name: a
// reload that keeps a policy keeps its totals, even for a connection that
// still counts into the set before the reload.

// The results a decision is counted under, in bucketd_decisions_total and
// INFO's # Policies section.
const (
	resultAllowed      = iota // the reply said allowed
	resultDenied              // the reply said denied
	resultShadowDenied        // a shadow policy would have denied; the reply said allowed
	numResults
)

// policySet is the policies in force, as SetPolicies built them, in name
// order. It never changes once built; a reload builds another.
type policySet struct {
	byName map[string]int32 // index in list
	list   []policyEntry
}

// policyEntry is one policy of a set, with its counters.
type policyEntry struct {
	name string
	policy.Policy
	counts *policyCounts
}

// policyCounts are one policy's decisions, by result. Shared by the sets
// that hold the policy, so totals survive reloads.
type policyCounts [numResults]atomic.Int64

// policyTally is one connection's decisions under policies, counted in
// the set it holds; set is nil between pipelines. Owned by the
// connection's goroutine.
type policyTally struct {
	set    *policySet
	counts [][numResults]int32 // by policy index in set
	any    bool
}

// SetPolicies replaces the named policies. Commands already planned finish
// with the old set; a connection picks up the new one at its next pipeline
// (see above). Every policy must have 1 to policy.MaxLimits limits, as
// config.Load makes them. Safe for concurrent use (reloads call it).
func (e *Engine) SetPolicies(p map[string]policy.Policy) {
	e.policyMu.Lock()
	defer e.policyMu.Unlock()
	old := e.policies.Load()
	set := &policySet{byName: make(map[string]int32, len(p)), list: make([]policyEntry, 0, len(p))}
	for _, name := range slices.Sorted(maps.Keys(p)) {
		counts := new(policyCounts)
		if old != nil {
			if i, ok := old.byName[name]; ok {
				counts = old.list[i].counts
			}
		}
		set.byName[name] = int32(len(set.list))
		set.list = append(set.list, policyEntry{name: name, Policy: p[name], counts: counts})
	}
	e.policies.Store(set)
}

// policySet returns the set this batch plans with, taking the one in
// force at its first policy command.
func (p *pipeline) policySet() *policySet {
	if p.pt.set == nil {
		p.pt.set = p.e.policies.Load()
	}
	return p.pt.set
}

// lookupPolicy finds the policy name in this pipeline's set: its index,
// or an error reply when the set has no such policy.
func (p *pipeline) lookupPolicy(name []byte) (int32, *policyEntry, *errorReply) {
	set := p.policySet()
	i, ok := set.byName[string(name)] // no allocation for the lookup
	if !ok {
		return 0, nil, unknownPolicy(name)
	}
	return i, &set.list[i], nil
}

// countDecision counts one decision under the policy whose index is
// policy-1, or, for policy 0, under explicit limits.
func (p *pipeline) countDecision(policy int32, result int) {
	if policy == 0 {
		p.tally.decision(result)
		return
	}
	pt := &p.pt
	if len(pt.counts) < len(pt.set.list) { // once per connection, and after a reload that adds policies
		pt.counts = append(pt.counts, make([][numResults]int32, len(pt.set.list)-len(pt.counts))...)
	}
	pt.counts[policy-1][result]++
	pt.any = true
}

// releasePolicies adds the connection's policy tally to the shared
// counters of the set it was counted in, and lets the set go, so that the
// next command plans with the policies in force then.
func (p *pipeline) releasePolicies() {
	pt := &p.pt
	if pt.any {
		for i := range pt.set.list {
			for r, n := range pt.counts[i] {
				if n != 0 {
					pt.set.list[i].counts[r].Add(int64(n))
					pt.counts[i][r] = 0
				}
			}
		}
		pt.any = false
	}
	pt.set = nil
}

// PolicyStats are the decisions counted under one policy (Name "" for
// calls with explicit limits and CL.THROTTLE, which have no shadow).
type PolicyStats struct {
	Name         string
	Limits       int // the policy's limits (0 for explicit limits)
	Shadow       bool
	Allowed      int64
	Denied       int64
	ShadowDenied int64
}

// policyStats returns the decisions under explicit limits, then under each
// policy in force, in name order.
func (e *Engine) policyStats() []PolicyStats {
	set := e.policies.Load()
	out := make([]PolicyStats, 0, 1+len(set.list))
	out = append(out, PolicyStats{Allowed: e.n.decisions[resultAllowed].Load(), Denied: e.n.decisions[resultDenied].Load()})
	for i := range set.list {
		p := &set.list[i]
		out = append(out, PolicyStats{
			Name: p.name, Limits: len(p.Limits), Shadow: p.Shadow,
			Allowed:      p.counts[resultAllowed].Load(),
			Denied:       p.counts[resultDenied].Load(),
			ShadowDenied: p.counts[resultShadowDenied].Load(),
		})
	}
	return out
}

// planPolicyAcquire plans TB.ACQUIRE key POLICY name [cost] [WITHINFO]:
// the request of a policy of one limit, or, for several limits, a group
// of their buckets (Caller.AddAll), answered by writePolicyAcquire.
func planPolicyAcquire(p *pipeline, args [][]byte) *errorReply {
	i, pe, e := p.policyRequests(args[1], args[3], decide.Acquire)
	if e != nil {
		return e
	}
	cost, info, e := acquireOptions(args[4:])
	if e != nil {
		return e
	}
	for k := range p.reqs {
		p.reqs[k].Cost = cost
	}
	if pe.Multi() {
		p.caller.AddAll(p.reqs)
	} else {
		p.caller.Add(p.reqs[0])
	}
	p.plan = append(p.plan, planned{kind: replyPolicyAcquire, info: info, ops: int32(len(p.reqs)), arg: i})
	return nil
}

// planPolicyPeek plans TB.PEEK key POLICY name [cost]. A policy of several
// limits peeks each of its buckets twice, with the cost and with none:
// what TB.ACQUIRE would answer depends on whether every bucket holds the
// cost (writePolicyPeek).
func planPolicyPeek(p *pipeline, args [][]byte) *errorReply {
	i, pe, e := p.policyRequests(args[1], args[3], decide.Peek)
	if e != nil {
		return e
	}
	cost, e := optionalCost(args[4:])
	if e != nil {
		return e
	}
	pl := planned{kind: replyPolicyPeek, ops: int32(len(p.reqs)), arg: i}
	for _, r := range p.reqs {
		r.Cost = cost
		p.caller.Add(r)
		if pe.Multi() {
			r.Cost = 0
			p.caller.Add(r)
			pl.ops++
		}
	}
	if !pe.Multi() && !pe.Shadow {
		pl.kind = replyPeek
	}
	p.plan = append(p.plan, pl)
	return nil
}

// policyRequests checks key and the policy name, and puts in p.reqs a
// request of kind for each of the policy's limits, on its bucket's key. It
// returns the policy's index in the pipeline's set and its entry, or the
// error reply.
func (p *pipeline) policyRequests(key, name []byte, kind decide.Kind) (int32, *policyEntry, *errorReply) {
	if len(key) > p.e.cfg.MaxKeyBytes {
		return 0, nil, errKeyTooLong
	}
	i, pe, e := p.lookupPolicy(name)
	if e != nil {
		return 0, nil, e
	}
	p.reqs = p.reqs[:0]
	if !p.appendPolicyRequests(pe, key, kind) {
		return 0, nil, errKeyTooLong
	}
	return i, pe, nil
}

// appendPolicyRequests appends to p.reqs a request of kind for each
// limit of p, on the key of its bucket for key, and reports whether every
// such key is within --max-key-bytes. The keys a prefix or several limits
// derive live in the session's arena until the pipeline is answered;
// growing the arena leaves earlier keys pointing at the old array, which
// stays valid.
func (p *pipeline) appendPolicyRequests(pe *policyEntry, key []byte, kind decide.Kind) bool {
	for l, lim := range pe.Limits {
		k := key
		if pe.Multi() || pe.Prefix != "" {
			start := len(p.keys)
			p.keys = pe.AppendKey(p.keys, key, l)
			k = p.keys[start:len(p.keys):len(p.keys)]
		}
		if len(k) > p.e.cfg.MaxKeyBytes {
			return false
		}
		p.reqs = append(p.reqs, decide.Request{Kind: kind, Key: k, Limit: bucket.Limit{Capacity: lim.Capacity, Rate: lim.Rate}})
	}
	return true
}

// writePolicyAcquire writes the reply of TB.ACQUIRE key POLICY name for a
// policy of several limits or a shadow policy, and counts its decision.
// Several limits answer as one bucket would (combine); a shadow policy's
// reply says allowed, with the true remaining and retry_after_ms.
func (p *pipeline) writePolicyAcquire(pl planned, rs []decide.Answer) {
	d := combine(rs)
	res := result(d.Allowed)
	if !d.Allowed && p.pt.set.list[pl.arg].Shadow {
		d.Allowed, res = true, resultShadowDenied
	}
	p.countDecision(pl.arg+1, res)
	if pl.info {
		writeDecision(p.w, d)
	} else {
		p.w.Bool(d.Allowed)
	}
}

// writePolicyPeek writes what TB.ACQUIRE key POLICY name WITHINFO would
// answer: with several limits, when every bucket holds the cost, what each
// would have left after the take (the peeks with the cost); otherwise
// nothing would be taken, and each bucket shows what it holds (the peeks
// without cost), with its own retry_after_ms (the peeks with the cost), as
// bucket.Check answers it. A shadow policy says allowed.
func (p *pipeline) writePolicyPeek(pl planned, rs []decide.Answer) {
	pe := &p.pt.set.list[pl.arg]
	d := rs[0].Decision
	if pe.Multi() {
		all := true
		for k := 0; k < len(rs); k += 2 {
			all = all && rs[k].Decision.Allowed
		}
		for k := 0; k < len(rs); k += 2 {
			b := rs[k].Decision
			if !all {
				b.Remaining, b.ResetAfterMs = rs[k+1].Decision.Remaining, rs[k+1].Decision.ResetAfterMs
			}
			fold(&d, b, k == 0)
		}
	}
	if pe.Shadow {
		d.Allowed = true
	}
	writeDecision(p.w, d)
}

// combine answers for the buckets of rs as TB.ACQUIRE WITHINFO answers
// for one (see fold).
func combine(rs []decide.Answer) bucket.Decision {
	var d bucket.Decision
	for k := range rs {
		fold(&d, rs[k].Decision, k == 0)
	}
	return d
}

// fold adds bucket b's decision to d, the decision on several buckets:
// allowed when every bucket is; remaining, the fewest any has left;
// retry_after_ms, the longest wait, when every bucket will hold the cost
// (-1 when one never will); reset_after_ms, the longest, when every
// bucket will be full.
func fold(d *bucket.Decision, b bucket.Decision, first bool) {
	if first {
		*d = b
		return
	}
	d.Allowed = d.Allowed && b.Allowed
	d.Remaining = min(d.Remaining, b.Remaining)
	switch {
	case d.RetryAfterMs == -1 || b.RetryAfterMs == -1:
		d.RetryAfterMs = -1
	default:
		d.RetryAfterMs = max(d.RetryAfterMs, b.RetryAfterMs)
	}
	d.ResetAfterMs = max(d.ResetAfterMs, b.ResetAfterMs)
}
