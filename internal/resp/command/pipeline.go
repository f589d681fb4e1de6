package command

import (
	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/resp/wire"
)

// planKind says how to turn shard results into the reply of one command.
type planKind uint8

const (
	replyAcquire       planKind = iota // one op; reply :1 or :0
	replyAcquireInfo                   // one op; reply the four WITHINFO integers
	replyPeek                          // one op; reply the four integers
	replyReset                         // n ops; reply the number removed
	replyThrottle                      // one op; reply CL.THROTTLE's five integers
	replyError                         // no op; reply session.errs[arg]
	replyPolicyAcquire                 // a group of a policy's limits, or a shadow policy's op (policies.go)
	replyPolicyPeek                    // the peeks of a policy's limits, or of a shadow policy (policies.go)
	replyMAcquire                      // TB.MACQUIRE's groups (macquire.go)
)

// planned is one command of a pipeline waiting for its shard results.
// It holds no pointer and stays small: a pipeline plans one per command.
type planned struct {
	kind planKind
	row  statRow // the command's statistics row; 0 in a transaction's EXEC
	push bool    // an invalidation follows the reply (tracking.go)
	info bool    // WITHINFO, for replyPolicyAcquire and replyMAcquire
	ops  int32
	// arg is what the kind needs besides: for replyError its reply's index
	// in pipeline.errs; for replyPolicyAcquire and replyPolicyPeek the
	// index, in the pipeline's policy set, of the policy named; for
	// replyMAcquire its first triple in pipeline.mb.
	arg int32
}

// pipeline is the bucket commands of the batch being answered: their
// requests go to the store through caller, all at once when the batch
// ends or a command that is not a bucket command comes (flush), and each
// command's reply is written, in order, from its planned entry and its
// answers. A planner (commandSpec.plan) sees only this: the store, the
// policies in force, the reply's plan; it writes nothing. Owned by the
// connection's goroutine.
type pipeline struct {
	e        *Engine
	w        *wire.Writer
	caller   decide.Caller
	plan     []planned
	errs     []*errorReply    // the replies of this batch's replyError commands
	keys     []byte           // keys derived for this batch's policy commands
	reqs     []decide.Request // a group's requests while it is planned (macquire.go)
	group    []decide.Request // TB.MACQUIRE's deciding group, when it has shadow triples
	mb       []mbucket        // TB.MACQUIRE's buckets of this batch (macquire.go)
	pt       policyTally      // decisions under policies (policies.go)
	tally    *tally           // the session's
	tracking *tracking        // the session's: invalidations follow tracked replies
}

// planError plans an error reply.
func (p *pipeline) planError(e *errorReply) {
	p.plan = append(p.plan, planned{kind: replyError, arg: int32(len(p.errs))})
	p.errs = append(p.errs, e)
}

// planAcquire parses TB.ACQUIRE key capacity rate [cost] [WITHINFO]
// (4 to 6 arguments), or TB.ACQUIRE key POLICY name [cost] [WITHINFO].
func planAcquire(p *pipeline, args [][]byte) *errorReply {
	if wire.EqualFold(args[2], "POLICY") {
		return planPolicyAcquire(p, args)
	}
	op, e := p.parseBucketArgs(args)
	if e != nil {
		return e
	}
	kind := replyAcquire
	rest := args[4:] // acquireOptions's work, written out on this hot path
	if len(rest) > 0 && wire.EqualFold(rest[len(rest)-1], "WITHINFO") {
		kind = replyAcquireInfo
		rest = rest[:len(rest)-1]
	}
	if len(rest) > 1 {
		return errSyntax
	}
	if op.Cost, e = optionalCost(rest); e != nil {
		return e
	}
	op.Kind = decide.Acquire
	p.caller.Add(op)
	p.plan = append(p.plan, planned{kind: kind, ops: 1})
	return nil
}

// acquireOptions parses what may follow TB.ACQUIRE's limits: [cost]
// [WITHINFO], WITHINFO only last.
func acquireOptions(rest [][]byte) (cost float64, info bool, _ *errorReply) {
	if len(rest) > 0 && wire.EqualFold(rest[len(rest)-1], "WITHINFO") {
		info = true
		rest = rest[:len(rest)-1]
	}
	if len(rest) > 1 {
		return 0, false, errSyntax
	}
	cost, e := optionalCost(rest)
	return cost, info, e
}

// optionalCost parses the cost argument that may follow key capacity rate
// (rest holds at most it): 1 when it is absent.
func optionalCost(rest [][]byte) (float64, *errorReply) {
	if len(rest) == 0 {
		return 1, nil
	}
	return parseCost(rest[0])
}

// planPeek parses TB.PEEK key capacity rate [cost] (4 or 5 arguments), or
// TB.PEEK key POLICY name [cost].
func planPeek(p *pipeline, args [][]byte) *errorReply {
	if wire.EqualFold(args[2], "POLICY") {
		return planPolicyPeek(p, args)
	}
	op, e := p.parseBucketArgs(args)
	if e != nil {
		return e
	}
	if op.Cost, e = optionalCost(args[4:]); e != nil {
		return e
	}
	op.Kind = decide.Peek
	p.caller.Add(op)
	p.plan = append(p.plan, planned{kind: replyPeek, ops: 1})
	return nil
}

// planReset parses TB.RESET key [key ...]. All keys are checked before any
// is queued, so a bad one changes nothing.
func planReset(p *pipeline, args [][]byte) *errorReply {
	keys := args[1:]
	for _, k := range keys {
		if len(k) > p.e.cfg.MaxKeyBytes {
			return errKeyTooLong
		}
	}
	for _, k := range keys {
		p.caller.Add(decide.Request{Kind: decide.Reset, Key: k})
	}
	p.plan = append(p.plan, planned{kind: replyReset, ops: int32(len(keys))})
	return nil
}

// parseBucketArgs checks key, capacity and rate, the arguments TB.ACQUIRE
// and TB.PEEK share without POLICY. It returns an error reply, or nil when
// all are valid.
func (p *pipeline) parseBucketArgs(args [][]byte) (decide.Request, *errorReply) {
	op := decide.Request{Key: args[1]}
	if len(op.Key) > p.e.cfg.MaxKeyBytes {
		return op, errKeyTooLong
	}
	capacity, e := parseParam(args[2], false, errInvalidCapacity, errCapacityTooLarge)
	if e != nil {
		return op, e
	}
	rate, e := parseParam(args[3], false, errInvalidRate, errRateTooLarge)
	if e != nil {
		return op, e
	}
	op.Limit = bucket.Limit{Capacity: capacity, Rate: rate}
	return op, nil
}

func parseCost(b []byte) (float64, *errorReply) {
	return parseParam(b, true, errInvalidCost, errCostTooLarge)
}

// parseParam parses a capacity, rate or cost: a finite number > 0 (>= 0
// with zeroOK) and at most bucket.MaxValue, or the matching error reply.
func parseParam(b []byte, zeroOK bool, invalid, tooLarge *errorReply) (float64, *errorReply) {
	v, ok := wire.ParseNumber(b)
	switch {
	case !ok || !(v > 0 || zeroOK && v == 0):
		return 0, invalid
	case v > bucket.MaxValue:
		return 0, tooLarge
	}
	return v + 0, nil // + 0 turns -0 into 0
}

// flush sends the planned bucket requests to the store and writes every
// planned reply in order. Then it lets go of the policy set the answered
// commands planned with, adding its tally to the counters, so that a
// command after it, and the next batch, see the policies in force then.
func (p *pipeline) flush() {
	if len(p.plan) != 0 {
		p.answer()
	}
	if p.pt.set != nil {
		p.releasePolicies()
	}
}

// answer runs the planned requests and writes every planned reply, each
// followed by its invalidation when it is tracked.
func (p *pipeline) answer() {
	answers, err := p.caller.Run()
	next := 0
	for _, pl := range p.plan {
		answered := p.writePlanned(pl, answers, &next, err)
		if pl.push {
			p.tracking.writeInvalidation(p.w, answered)
		}
	}
	p.end()
}

// writePlanned writes the reply of one planned command: its error, the
// store's failure (err, from Run), or the reply made from its answers,
// answers[*next:], past which it moves *next. It reports whether the reply
// carries a value, that is, is not an error.
func (p *pipeline) writePlanned(pl planned, answers []decide.Answer, next *int, err error) bool {
	switch {
	case pl.kind == replyError:
		p.writeError(p.errs[pl.arg])
		return false
	case err != nil:
		p.e.fail(pl.row)
		p.writeError(errShuttingDown)
		return false
	}
	rs := answers[*next : *next+int(pl.ops)]
	*next += int(pl.ops)
	if e := answerError(rs); e != nil {
		p.e.fail(pl.row)
		p.writeError(e)
		return false
	}
	p.writeAnswer(pl, rs)
	return true
}

// writeError writes a planned command's error reply and counts it under
// its kind.
func (p *pipeline) writeError(e *errorReply) {
	p.tally.error(e.kind)
	p.w.ErrorReply(e.text)
}

// end empties the plan once its replies are written.
func (p *pipeline) end() {
	p.plan = p.plan[:0]
	clear(p.errs) // drop dynamic error replies
	p.errs = p.errs[:0]
	p.keys = p.keys[:0]
	p.mb = p.mb[:0]
}

// writeAnswer writes the reply of one planned bucket command from its
// answers, which carry no error, and counts its decision.
func (p *pipeline) writeAnswer(pl planned, rs []decide.Answer) {
	switch pl.kind {
	case replyAcquire:
		p.w.Bool(rs[0].Decision.Allowed)
		p.tally.decision(result(rs[0].Decision.Allowed))
	case replyAcquireInfo:
		writeDecision(p.w, rs[0].Decision)
		p.tally.decision(result(rs[0].Decision.Allowed))
	case replyPeek:
		writeDecision(p.w, rs[0].Decision)
	case replyThrottle:
		writeThrottle(p.w, rs[0].Throttle)
		p.tally.decision(result(!rs[0].Throttle.Limited))
	case replyReset:
		removed := 0
		for _, r := range rs {
			if r.Removed {
				removed++
			}
		}
		p.w.Int(removed)
	case replyPolicyAcquire:
		p.writePolicyAcquire(pl, rs)
	case replyPolicyPeek:
		p.writePolicyPeek(pl, rs)
	case replyMAcquire:
		p.writeMAcquire(pl, rs)
	}
}

// result is the result a decision is counted under.
func result(allowed bool) int {
	if allowed {
		return resultAllowed
	}
	return resultDenied
}

// boolInt is 1 for true and 0 for false, as the replies show them.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// writeDecision writes the four integers of WITHINFO and TB.PEEK.
func writeDecision(w *wire.Writer, d bucket.Decision) {
	w.Array(4)
	w.Bool(d.Allowed)
	w.Int64(d.Remaining)
	w.Int64(d.RetryAfterMs)
	w.Int64(d.ResetAfterMs)
}

// writeThrottle writes CL.THROTTLE's five integers, as redis-cell does.
func writeThrottle(w *wire.Writer, r bucket.ThrottleResult) {
	w.Array(5)
	w.Bool(r.Limited)
	w.Int64(r.Limit)
	w.Int64(r.Remaining)
	w.Int64(r.RetryAfterSec)
	w.Int64(r.ResetAfterSec)
}

// planThrottle parses CL.THROTTLE key max_burst count_per_period period
// [quantity] (5 or 6 arguments), redis-cell's command, whose reply it
// reproduces exactly.
func planThrottle(p *pipeline, args [][]byte) *errorReply {
	key := args[1]
	if len(key) > p.e.cfg.MaxKeyBytes {
		return errKeyTooLong
	}
	maxBurst, ok := wire.ParseInt(args[2])
	if !ok || maxBurst < 0 {
		return errThrottleBurst
	}
	count, ok := wire.ParseInt(args[3])
	if !ok || count < 1 {
		return errThrottleCount
	}
	period, ok := wire.ParseInt(args[4])
	if !ok || period < 1 {
		return errThrottlePeriod
	}
	quantity := int64(1)
	if len(args) == 6 {
		if quantity, ok = wire.ParseInt(args[5]); !ok || quantity < 0 {
			return errThrottleQuantity
		}
	}
	q, ok := bucket.NewGCRA(maxBurst, count, period, quantity)
	if !ok {
		return errThrottleRange
	}
	p.caller.Add(decide.Request{Kind: decide.Throttle, Key: key, Quota: q})
	p.plan = append(p.plan, planned{kind: replyThrottle, ops: 1})
	return nil
}
