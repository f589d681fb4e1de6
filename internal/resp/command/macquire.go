package command

import (
	"github.com/bucketd/bucketd/internal/policy"

	"bytes"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/resp/wire"
)

// TB.MACQUIRE numbuckets key capacity rate [key capacity rate ...]
// [COST cost] [WITHINFO]: several buckets, one decision. Each of the
// numbuckets triples names one bucket, key capacity rate, or a policy's,
// key POLICY name, whose limits each add a bucket (on the keys
// policy.Policy.AppendKey derives). The buckets are one all-or-nothing
// group (Caller.AddAll): allowed, and each gives cost, only if every one
// holds it; otherwise nothing changes. The store answers the group as one
// unit across shards (or as one script call in store mode).
//
// A shadow policy's triple never changes the reply: its buckets are a
// group of their own, checked and charged as TB.ACQUIRE key POLICY name
// would be, whatever the other triples decide, and the deciding group is
// the other triples' buckets. The reply (WITHINFO: its element 0) is that
// group's decision, 1 when every triple is a shadow policy's.
//
// Counting: the triples with explicit numbers count one decision under
// explicit limits; each policy triple counts one under its policy, the
// reply's decision, or, for a shadow policy, its own buckets' (allowed or
// shadow_denied).

// maxGroup is the most buckets one call checks: TB.MACQUIRE's numbuckets,
// and its buckets once policies are expanded. A policy's limits are
// bounded alike (policy.MaxLimits), so that TB.ACQUIRE with any policy
// fits.
const maxGroup = 16

// maxGroup and policy.MaxLimits must be equal: a negative constant does not
// convert to uint, so this fails to compile when they differ.
const _ = uint(maxGroup-policy.MaxLimits) + uint(policy.MaxLimits-maxGroup)

// mbucket is one triple of a planned TB.MACQUIRE, whose answers are
// answers[at:at+n] of the command's.
type mbucket struct {
	at, n  int32
	policy int32 // 1 + the policy's index in the pipeline's set; 0 for explicit numbers
	shadow bool  // a shadow policy's: a group of its own, never deciding
}

// planMAcquire parses TB.MACQUIRE and queues its groups. Problems are
// reported in the order of the arguments: numbuckets, a missing triple,
// each triple in turn (its key, its policy or numbers, the number of
// buckets, a key repeated), then COST and WITHINFO.
func planMAcquire(p *pipeline, args [][]byte) *errorReply {
	n, ok := wire.ParseInt(args[1])
	if !ok || n < 1 || n > maxGroup {
		return errNumBuckets
	}
	if len(args) < 2+3*int(n) {
		return errMissingBucketAt[(len(args)-2)/3]
	}
	first := len(p.mb)
	p.reqs = p.reqs[:0]
	shadows := false
	for i := range int(n) {
		if e := p.parseTriple(args[2+3*i:5+3*i], i); e != nil {
			p.mb = p.mb[:first]
			return e
		}
		shadows = shadows || p.mb[len(p.mb)-1].shadow
	}
	cost, info, e := macquireOptions(args[2+3*n:])
	if e != nil {
		p.mb = p.mb[:first]
		return e
	}
	for k := range p.reqs {
		p.reqs[k].Cost = cost
	}
	p.addGroups(first, shadows)
	p.plan = append(p.plan, planned{kind: replyMAcquire, info: info, ops: int32(len(p.reqs)), arg: int32(first)})
	return nil
}

// parseTriple parses the triple at position i (from 0), key capacity rate
// or key POLICY name, appends its requests to p.reqs and its mbucket
// to p.mb.
func (p *pipeline) parseTriple(t [][]byte, i int) *errorReply {
	key := t[0]
	if len(key) > p.e.cfg.MaxKeyBytes {
		return errKeyTooLongAt[i]
	}
	start := len(p.reqs)
	b := mbucket{at: int32(start), n: 1}
	if wire.EqualFold(t[1], "POLICY") {
		set := p.policySet()
		idx, ok := set.byName[string(t[2])] // no allocation for the lookup
		if !ok {
			return unknownPolicyAt(t[2], i)
		}
		pe := &set.list[idx]
		if start+len(pe.Limits) > maxGroup {
			return errTooManyBuckets
		}
		if !p.appendPolicyRequests(pe, key, decide.Acquire) {
			return errKeyTooLongAt[i]
		}
		b.n, b.policy, b.shadow = int32(len(pe.Limits)), idx+1, pe.Shadow
	} else {
		capacity, e := parseParam(t[1], false, errInvalidCapacityAt[i], errCapacityTooLargeAt[i])
		if e != nil {
			return e
		}
		rate, e := parseParam(t[2], false, errInvalidRateAt[i], errRateTooLargeAt[i])
		if e != nil {
			return e
		}
		if start+1 > maxGroup {
			return errTooManyBuckets
		}
		p.reqs = append(p.reqs, decide.Request{Kind: decide.Acquire, Key: key, Limit: bucket.Limit{Capacity: capacity, Rate: rate}})
	}
	for _, r := range p.reqs[start:] {
		for _, q := range p.reqs[:start] {
			if bytes.Equal(r.Key, q.Key) {
				return errSameKeyAt[i]
			}
		}
	}
	p.mb = append(p.mb, b)
	return nil
}

// macquireOptions parses what follows the triples: COST cost and
// WITHINFO, each at most once, in either order, the words in any case.
func macquireOptions(rest [][]byte) (cost float64, info bool, _ *errorReply) {
	cost, costSet := 1, false
	for k := 0; k < len(rest); k++ {
		switch {
		case !info && wire.EqualFold(rest[k], "WITHINFO"):
			info = true
		case !costSet && k+1 < len(rest) && wire.EqualFold(rest[k], "COST"):
			c, e := parseCost(rest[k+1])
			if e != nil {
				return 0, false, e
			}
			cost, costSet = c, true
			k++
		default:
			return 0, false, errSyntax
		}
	}
	return cost, info, nil
}

// addGroups queues the groups of the TB.MACQUIRE whose triples are
// p.mb[first:] and whose requests are p.reqs: one group, or, with
// shadow triples, the deciding group (the other triples' buckets) first,
// then a group per shadow triple; it moves each mbucket's at to where its
// answers will be.
func (p *pipeline) addGroups(first int, shadows bool) {
	if !shadows {
		p.caller.AddAll(p.reqs)
		return
	}
	mbs := p.mb[first:]
	p.group = p.group[:0]
	for k := range mbs {
		if b := &mbs[k]; !b.shadow {
			reqs := p.reqs[b.at : b.at+b.n]
			b.at = int32(len(p.group))
			p.group = append(p.group, reqs...)
		}
	}
	if len(p.group) > 0 {
		p.caller.AddAll(p.group)
	}
	at := int32(len(p.group))
	for k := range mbs {
		if b := &mbs[k]; b.shadow {
			p.caller.AddAll(p.reqs[b.at : b.at+b.n])
			b.at = at
			at += b.n
		}
	}
	clear(p.group) // drop references to the connection's buffers
}

// writeMAcquire writes TB.MACQUIRE's reply, the deciding group's decision
// (WITHINFO: then per triple, in order, the four integers; a policy's
// limits combined as for TB.ACQUIRE key POLICY name), and counts it.
func (p *pipeline) writeMAcquire(pl planned, rs []decide.Answer) {
	mbs := p.mb[pl.arg:]
	k := 0
	for ops := int32(0); ops < pl.ops; k++ { // its triples hold its ops
		ops += mbs[k].n
	}
	mbs = mbs[:k]
	allowed, explicit := true, false
	for _, b := range mbs {
		if !b.shadow {
			for _, r := range rs[b.at : b.at+b.n] {
				allowed = allowed && r.Decision.Allowed
			}
		}
		explicit = explicit || b.policy == 0
	}
	if explicit {
		p.countDecision(0, result(allowed))
	}
	if pl.info {
		p.w.Array(1 + len(mbs))
	}
	p.w.Bool(allowed)
	for _, b := range mbs {
		d := combine(rs[b.at : b.at+b.n])
		switch {
		case b.shadow && !d.Allowed:
			p.countDecision(b.policy, resultShadowDenied)
			d.Allowed = true
		case b.shadow:
			p.countDecision(b.policy, resultAllowed)
		case b.policy != 0:
			p.countDecision(b.policy, result(allowed))
		}
		if pl.info {
			writeDecision(p.w, d)
		}
	}
}
