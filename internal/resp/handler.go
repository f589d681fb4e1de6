package resp

import (
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/tidwall/redcon"
)

// planKind says how to turn shard results into the reply of one command.
type planKind uint8

const (
	planAcquire       planKind = iota // one op; reply :1 or :0
	planAcquireInfo                   // one op; reply the four WITHINFO integers
	planPeek                          // one op; reply the four integers
	planReset                         // n ops; reply the number removed
	planThrottle                      // one op; reply CL.THROTTLE's five integers
	planError                         // no op; reply session.errs[arg]
	planPolicyAcquire                 // a group of a policy's limits, or a shadow policy's op (policies.go)
	planPolicyPeek                    // the peeks of a policy's limits, or of a shadow policy (policies.go)
	planMAcquire                      // TB.MACQUIRE's groups (macquire.go)
)

// planned is one command of a pipeline waiting for its shard results.
// It holds no pointer and stays small: a pipeline plans one per command.
type planned struct {
	kind planKind
	push bool // an invalidation follows the reply (tracking.go)
	info bool // WITHINFO, for planPolicyAcquire and planMAcquire
	ops  int32
	// arg is what the kind needs besides: for planError its reply's index
	// in session.errs; for planPolicyAcquire and planPolicyPeek the
	// index, in the pipeline's policy set, of the policy named; for
	// planMAcquire its first triple in session.mb.
	arg int32
}

// handle is redcon's callback for the first command of a read. It takes the
// rest of the pipeline at once (ReadPipeline), so that all bucket commands
// up to the next non-bucket command travel to their shards together, one
// batch per shard, and all replies leave in one write when redcon flushes.
func (s *Server) handle(c redcon.Conn, cmd redcon.Command) {
	sess, ok := c.Context().(*session)
	if !ok {
		c.WriteError("ERR internal error: connection has no session")
		c.Close() //nolint:errcheck // closing a broken connection
		return
	}
	var start time.Time
	if s.cfg.ObservePipeline != nil {
		start = time.Now()
	}
	s.exec(c, sess, cmd.Args)
	rest := c.ReadPipeline()
	executed := 1
	for i := range rest {
		if sess.quit {
			break // Redis ignores what follows QUIT
		}
		s.exec(c, sess, rest[i].Args)
		executed++
	}
	s.flushPlan(c, sess)
	s.flushTally(&sess.tally) // counts the commands executed, each under its name
	if s.cfg.ObservePipeline != nil {
		s.cfg.ObservePipeline(time.Since(start).Seconds(), executed)
	}
	if sess.quit {
		c.Close() //nolint:errcheck // QUIT: redcon flushes the +OK first
	}
}

// exec plans a bucket command or, for anything else, first answers the
// planned commands (so replies keep their order and INFO or DBSIZE see the
// effect of earlier commands) and then answers it directly. An error found
// before the command runs is planned like a reply, in its place. Between
// MULTI and EXEC a command is queued instead (transaction.go), unless it
// acts at once; nothing is planned then, so the replies written directly
// keep their order.
//
// With CLIENT TRACKING on, trackCommand then sees every command; that one
// test of a session flag, and the one of tx.open, is all tracking and
// transactions cost a connection that uses neither.
func (s *Server) exec(c redcon.Conn, sess *session, args [][]byte) {
	cmd, e := sess.resolve(args)
	if e != nil && equalFold(args[0], "EXEC") {
		e = sess.tx.refuseExec(e)
	}
	if e == nil && sess.tracking.on && cmd.plan != nil && sess.tracking.cachingAsked() {
		e = errNotCacheable
	}
	planned := false
	switch {
	case sess.tx.open && (e != nil || !cmd.atOnce):
		s.queue(c, sess, cmd, e, args)
	case e != nil:
		sess.planError(e)
	case cmd.plan != nil:
		if e = cmd.plan(s, sess, args); e != nil {
			sess.planError(e)
		} else {
			planned = true
		}
	default:
		s.flushPlan(c, sess)
		if e = cmd.run(s, c, sess, args); e != nil {
			sess.writeError(c, e)
		}
	}
	if sess.tracking.on {
		sess.trackCommand(cmd, planned, args)
	}
}

// planError plans an error reply.
func (sess *session) planError(e *errorReply) {
	sess.plan = append(sess.plan, planned{kind: planError, arg: int32(len(sess.errs))})
	sess.errs = append(sess.errs, e)
}

// planAcquire parses TB.ACQUIRE key capacity rate [cost] [WITHINFO]
// (4 to 6 arguments), or TB.ACQUIRE key POLICY name [cost] [WITHINFO].
func (s *Server) planAcquire(sess *session, args [][]byte) *errorReply {
	if equalFold(args[2], "POLICY") {
		return s.planPolicyAcquire(sess, args)
	}
	op, e := s.parseBucketArgs(args)
	if e != nil {
		return e
	}
	kind := planAcquire
	rest := args[4:] // acquireOptions's work, written out on this hot path
	if len(rest) > 0 && equalFold(rest[len(rest)-1], "WITHINFO") {
		kind = planAcquireInfo
		rest = rest[:len(rest)-1]
	}
	if len(rest) > 1 {
		return errSyntax
	}
	if op.Cost, e = optionalCost(rest); e != nil {
		return e
	}
	op.Kind = decide.Acquire
	sess.caller.Add(op)
	sess.plan = append(sess.plan, planned{kind: kind, ops: 1})
	return nil
}

// acquireOptions parses what may follow TB.ACQUIRE's limits: [cost]
// [WITHINFO], WITHINFO only last.
func acquireOptions(rest [][]byte) (cost float64, info bool, _ *errorReply) {
	if len(rest) > 0 && equalFold(rest[len(rest)-1], "WITHINFO") {
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
func (s *Server) planPeek(sess *session, args [][]byte) *errorReply {
	if equalFold(args[2], "POLICY") {
		return s.planPolicyPeek(sess, args)
	}
	op, e := s.parseBucketArgs(args)
	if e != nil {
		return e
	}
	if op.Cost, e = optionalCost(args[4:]); e != nil {
		return e
	}
	op.Kind = decide.Peek
	sess.caller.Add(op)
	sess.plan = append(sess.plan, planned{kind: planPeek, ops: 1})
	return nil
}

// planReset parses TB.RESET key [key ...]. All keys are checked before any
// is queued, so a bad one changes nothing.
func (s *Server) planReset(sess *session, args [][]byte) *errorReply {
	keys := args[1:]
	for _, k := range keys {
		if len(k) > s.cfg.MaxKeyBytes {
			return errKeyTooLong
		}
	}
	for _, k := range keys {
		sess.caller.Add(decide.Request{Kind: decide.Reset, Key: k})
	}
	sess.plan = append(sess.plan, planned{kind: planReset, ops: int32(len(keys))})
	return nil
}

// parseBucketArgs checks key, capacity and rate, the arguments TB.ACQUIRE
// and TB.PEEK share without POLICY. It returns an error reply, or nil when
// all are valid.
func (s *Server) parseBucketArgs(args [][]byte) (decide.Request, *errorReply) {
	op := decide.Request{Key: args[1]}
	if len(op.Key) > s.cfg.MaxKeyBytes {
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
// with zeroOK) and at most maxParam, or the matching error reply.
func parseParam(b []byte, zeroOK bool, invalid, tooLarge *errorReply) (float64, *errorReply) {
	v, ok := parseNumber(b)
	switch {
	case !ok || !(v > 0 || zeroOK && v == 0):
		return 0, invalid
	case v > maxParam:
		return 0, tooLarge
	}
	return v + 0, nil // + 0 turns -0 into 0
}

// flushPlan sends the planned bucket operations to the shards and writes
// every planned reply in order. Then it lets go of the policy set the
// answered commands planned with, adding its tally to the counters, so
// that a command after it, and the next pipeline, see the policies in
// force then.
func (s *Server) flushPlan(c redcon.Conn, sess *session) {
	if len(sess.plan) != 0 {
		sess.answerPlan(c)
	}
	if sess.pt.set != nil {
		sess.releasePolicies()
	}
}

// answerPlan runs the planned operations and writes every planned reply.
func (sess *session) answerPlan(c redcon.Conn) {
	answers, err := sess.caller.Run()
	next := 0
	for _, p := range sess.plan {
		answered := sess.writePlanned(c, p, answers, &next, err)
		if p.push {
			sess.writeInvalidation(c, answered)
		}
	}
	sess.endPlan()
}

// writePlanned writes the reply of one planned command: its error, the
// store's failure (err, from Run), or the reply made from its answers,
// answers[*next:], past which it moves *next. It reports whether the reply
// carries a value, that is, is not an error.
func (sess *session) writePlanned(c redcon.Conn, p planned, answers []decide.Answer, next *int, err error) bool {
	switch {
	case p.kind == planError:
		sess.writeError(c, sess.errs[p.arg])
		return false
	case err != nil:
		sess.writeError(c, errShuttingDown)
		return false
	}
	rs := answers[*next : *next+int(p.ops)]
	*next += int(p.ops)
	if e := answerError(rs); e != nil {
		sess.writeError(c, e)
		return false
	}
	sess.writeAnswer(c, p, rs)
	return true
}

// endPlan empties the plan once its replies are written.
func (sess *session) endPlan() {
	sess.plan = sess.plan[:0]
	clear(sess.errs) // drop dynamic error replies
	sess.errs = sess.errs[:0]
	sess.keys = sess.keys[:0]
	sess.mb = sess.mb[:0]
}

// writeAnswer writes the reply of one planned bucket command from its
// answers, which carry no error, and counts its decision.
func (sess *session) writeAnswer(c redcon.Conn, p planned, rs []decide.Answer) {
	switch p.kind {
	case planAcquire:
		c.WriteInt(boolInt(rs[0].Decision.Allowed))
		sess.tally.decision(result(rs[0].Decision.Allowed))
	case planAcquireInfo:
		writeDecision(c, rs[0].Decision)
		sess.tally.decision(result(rs[0].Decision.Allowed))
	case planPeek:
		writeDecision(c, rs[0].Decision)
	case planThrottle:
		writeThrottle(c, rs[0].Throttle)
		sess.tally.decision(result(!rs[0].Throttle.Limited))
	case planReset:
		removed := 0
		for _, r := range rs {
			if r.Removed {
				removed++
			}
		}
		c.WriteInt(removed)
	case planPolicyAcquire:
		sess.writePolicyAcquire(c, p, rs)
	case planPolicyPeek:
		sess.writePolicyPeek(c, p, rs)
	case planMAcquire:
		sess.writeMAcquire(c, p, rs)
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
func writeDecision(c redcon.Conn, d bucket.Decision) {
	c.WriteArray(4)
	c.WriteInt(boolInt(d.Allowed))
	c.WriteInt64(d.Remaining)
	c.WriteInt64(d.RetryAfterMs)
	c.WriteInt64(d.ResetAfterMs)
}

// writeThrottle writes CL.THROTTLE's five integers, as redis-cell does.
func writeThrottle(c redcon.Conn, r bucket.ThrottleResult) {
	c.WriteArray(5)
	c.WriteInt(boolInt(r.Limited))
	c.WriteInt64(r.Limit)
	c.WriteInt64(r.Remaining)
	c.WriteInt64(r.RetryAfterSec)
	c.WriteInt64(r.ResetAfterSec)
}

// planThrottle parses CL.THROTTLE key max_burst count_per_period period
// [quantity] (5 or 6 arguments), redis-cell's command, whose reply it
// reproduces exactly.
func (s *Server) planThrottle(sess *session, args [][]byte) *errorReply {
	key := args[1]
	if len(key) > s.cfg.MaxKeyBytes {
		return errKeyTooLong
	}
	maxBurst, ok := parseInt(args[2])
	if !ok || maxBurst < 0 {
		return errThrottleBurst
	}
	count, ok := parseInt(args[3])
	if !ok || count < 1 {
		return errThrottleCount
	}
	period, ok := parseInt(args[4])
	if !ok || period < 1 {
		return errThrottlePeriod
	}
	quantity := int64(1)
	if len(args) == 6 {
		if quantity, ok = parseInt(args[5]); !ok || quantity < 0 {
			return errThrottleQuantity
		}
	}
	q, ok := bucket.NewGCRA(maxBurst, count, period, quantity)
	if !ok {
		return errThrottleRange
	}
	sess.caller.Add(decide.Request{Kind: decide.Throttle, Key: key, Quota: q})
	sess.plan = append(sess.plan, planned{kind: planThrottle, ops: 1})
	return nil
}
