package resp

import (
	"strings"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/tidwall/redcon"
)

// planKind says how to turn shard results into the reply of one command.
type planKind uint8

const (
	planAcquire     planKind = iota // one op; reply :1 or :0
	planAcquireInfo                 // one op; reply the four WITHINFO integers
	planPeek                        // one op; reply the four integers
	planReset                       // n ops; reply the number removed
	planThrottle                    // one op; reply CL.THROTTLE's five integers
	planError                       // no op; reply err
)

// planned is one command of a pipeline waiting for its shard results.
type planned struct {
	kind    planKind
	errKind ErrorKind
	ops     int32
	err     string
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
	s.n.totalCmds.Add(int64(executed))
	s.flushTally(&sess.tally)
	if s.cfg.ObservePipeline != nil {
		s.cfg.ObservePipeline(time.Since(start).Seconds(), executed)
	}
	if sess.quit {
		c.Close() //nolint:errcheck // QUIT: redcon flushes the +OK first
	}
}

// exec plans a bucket command or, for anything else, first answers the
// planned commands (so replies keep their order and INFO or DBSIZE see the
// effect of earlier commands) and then answers it directly.
func (s *Server) exec(c redcon.Conn, sess *session, args [][]byte) {
	id := lookup(args[0])
	sess.tally.command(id)
	if !sess.authed && id != cmdAuth && id != cmdHello && id != cmdQuit {
		sess.plan = append(sess.plan, planned{kind: planError, errKind: ErrAuth, err: errNoAuth})
		return
	}
	switch id {
	case cmdAcquire:
		s.planAcquire(sess, args)
	case cmdPeek:
		s.planPeek(sess, args)
	case cmdReset:
		s.planReset(sess, args)
	case cmdThrottle:
		s.planThrottle(sess, args)
	default:
		s.flushPlan(c, sess)
		sess.counting.Conn = c
		s.execOther(&sess.counting, sess, id, args)
	}
}

// fail plans an error reply; kind classifies it for metrics.
func (sess *session) fail(err string) {
	kind := ErrInvalidArg
	if strings.HasPrefix(err, "ERR wrong number") {
		kind = ErrArity
	}
	sess.plan = append(sess.plan, planned{kind: planError, errKind: kind, err: err})
}

// planAcquire parses TB.ACQUIRE key capacity rate [cost] [WITHINFO].
func (s *Server) planAcquire(sess *session, args [][]byte) {
	if len(args) < 4 || len(args) > 6 {
		sess.fail(errArity["tb.acquire"])
		return
	}
	op, bad := s.parseBucketArgs(sess, args)
	if bad != "" {
		sess.fail(bad)
		return
	}
	withInfo := false
	rest := args[4:]
	if len(rest) > 0 && equalFold(rest[len(rest)-1], "WITHINFO") {
		withInfo = true
		rest = rest[:len(rest)-1]
	}
	switch len(rest) {
	case 0:
		op.Cost = 1
	case 1:
		if op.Cost, bad = parseCost(rest[0]); bad != "" {
			sess.fail(bad)
			return
		}
	default:
		sess.fail(errSyntax)
		return
	}
	op.Kind = decide.Acquire
	sess.caller.Add(op)
	kind := planAcquire
	if withInfo {
		kind = planAcquireInfo
	}
	sess.plan = append(sess.plan, planned{kind: kind, ops: 1})
}

// planPeek parses TB.PEEK key capacity rate [cost].
func (s *Server) planPeek(sess *session, args [][]byte) {
	if len(args) < 4 || len(args) > 5 {
		sess.fail(errArity["tb.peek"])
		return
	}
	op, bad := s.parseBucketArgs(sess, args)
	if bad != "" {
		sess.fail(bad)
		return
	}
	op.Cost = 1
	if len(args) == 5 {
		if op.Cost, bad = parseCost(args[4]); bad != "" {
			sess.fail(bad)
			return
		}
	}
	op.Kind = decide.Peek
	sess.caller.Add(op)
	sess.plan = append(sess.plan, planned{kind: planPeek, ops: 1})
}

// planReset parses TB.RESET key [key ...]. All keys are checked before any
// is queued, so a bad one changes nothing.
func (s *Server) planReset(sess *session, args [][]byte) {
	if len(args) < 2 {
		sess.fail(errArity["tb.reset"])
		return
	}
	keys := args[1:]
	for _, k := range keys {
		if len(k) > s.cfg.MaxKeyBytes {
			sess.fail(errKeyTooLong)
			return
		}
	}
	for _, k := range keys {
		sess.caller.Add(decide.Request{Kind: decide.Reset, Key: k})
	}
	sess.plan = append(sess.plan, planned{kind: planReset, ops: int32(len(keys))})
}

// parseBucketArgs checks key, capacity and rate (or POLICY name), the
// arguments TB.ACQUIRE and TB.PEEK share. It returns an error reply, or ""
// when all are valid.
func (s *Server) parseBucketArgs(sess *session, args [][]byte) (decide.Request, string) {
	var op decide.Request
	op.Key = args[1]
	if len(op.Key) > s.cfg.MaxKeyBytes {
		return op, errKeyTooLong
	}
	if equalFold(args[2], "POLICY") {
		p, ok := (*s.policies.Load())[string(args[3])] // no allocation for the lookup
		if !ok {
			return op, "ERR unknown policy '" + truncate(args[3]) + "': define it under policies: in the --config file"
		}
		if p.Prefix != "" {
			// The prefixed key lives in the session's arena until the
			// pipeline is answered; growing the arena leaves earlier keys
			// pointing at the old array, which stays valid.
			start := len(sess.keys)
			sess.keys = append(sess.keys, p.Prefix...)
			sess.keys = append(sess.keys, op.Key...)
			op.Key = sess.keys[start:len(sess.keys):len(sess.keys)]
			if len(op.Key) > s.cfg.MaxKeyBytes {
				return op, errKeyTooLong
			}
		}
		op.Limit = bucket.Limit{Capacity: p.Capacity, Rate: p.Rate}
		return op, ""
	}
	capacity, ok := parseNumber(args[2])
	switch {
	case !ok || !(capacity > 0):
		return op, errInvalidCapacity
	case capacity > maxParam:
		return op, errCapacityTooLarge
	}
	rate, ok := parseNumber(args[3])
	switch {
	case !ok || !(rate > 0):
		return op, errInvalidRate
	case rate > maxParam:
		return op, errRateTooLarge
	}
	op.Limit = bucket.Limit{Capacity: capacity, Rate: rate}
	return op, ""
}

func parseCost(b []byte) (float64, string) {
	cost, ok := parseNumber(b)
	switch {
	case !ok || !(cost >= 0):
		return 0, errInvalidCost
	case cost > maxParam:
		return 0, errCostTooLarge
	}
	return cost + 0, "" // + 0 turns -0 into 0
}

// flushPlan sends the planned bucket operations to the shards and writes
// every planned reply in order.
func (s *Server) flushPlan(c redcon.Conn, sess *session) {
	if len(sess.plan) == 0 {
		return
	}
	results, err := sess.caller.Run()
	next := 0
	for _, p := range sess.plan {
		if p.kind == planError {
			sess.tally.error(p.errKind)
			c.WriteError(p.err)
			continue
		}
		if err != nil {
			sess.tally.error(ErrUnavailable)
			c.WriteError(errShuttingDown)
			continue
		}
		rs := results[next : next+int(p.ops)]
		next += int(p.ops)
		if msg, kind := answerError(rs); msg != "" {
			sess.tally.error(kind)
			c.WriteError(msg)
			continue
		}
		switch p.kind {
		case planAcquire:
			if rs[0].Decision.Allowed {
				c.WriteInt(1)
			} else {
				c.WriteInt(0)
			}
		case planAcquireInfo, planPeek:
			writeDecision(c, rs[0].Decision)
		case planThrottle:
			r := rs[0].Throttle
			c.WriteArray(5)
			if r.Limited {
				c.WriteInt(1)
			} else {
				c.WriteInt(0)
			}
			c.WriteInt64(r.Limit)
			c.WriteInt64(r.Remaining)
			c.WriteInt64(r.RetryAfterSec)
			c.WriteInt64(r.ResetAfterSec)
		case planReset:
			removed := 0
			for _, r := range rs {
				if r.Removed {
					removed++
				}
			}
			c.WriteInt(removed)
		}
	}
	clear(sess.plan) // drop error strings
	sess.plan = sess.plan[:0]
	sess.keys = sess.keys[:0]
}

func writeDecision(c redcon.Conn, d bucket.Decision) {
	c.WriteArray(4)
	if d.Allowed {
		c.WriteInt(1)
	} else {
		c.WriteInt(0)
	}
	c.WriteInt64(d.Remaining)
	c.WriteInt64(d.RetryAfterMs)
	c.WriteInt64(d.ResetAfterMs)
}

// planThrottle parses CL.THROTTLE key max_burst count_per_period period
// [quantity], redis-cell's command, whose reply it reproduces exactly.
func (s *Server) planThrottle(sess *session, args [][]byte) {
	if len(args) < 5 || len(args) > 6 {
		sess.fail(errArity["cl.throttle"])
		return
	}
	key := args[1]
	if len(key) > s.cfg.MaxKeyBytes {
		sess.fail(errKeyTooLong)
		return
	}
	maxBurst, ok := parseInt(args[2])
	if !ok || maxBurst < 0 {
		sess.fail(errThrottleBurst)
		return
	}
	count, ok := parseInt(args[3])
	if !ok || count < 1 {
		sess.fail(errThrottleCount)
		return
	}
	period, ok := parseInt(args[4])
	if !ok || period < 1 {
		sess.fail(errThrottlePeriod)
		return
	}
	quantity := int64(1)
	if len(args) == 6 {
		if quantity, ok = parseInt(args[5]); !ok || quantity < 0 {
			sess.fail(errThrottleQuantity)
			return
		}
	}
	q, ok := bucket.NewGCRA(maxBurst, count, period, quantity)
	if !ok {
		sess.fail(errThrottleRange)
		return
	}
	sess.caller.Add(decide.Request{Kind: decide.Throttle, Key: key, Quota: q})
	sess.plan = append(sess.plan, planned{kind: planThrottle, ops: 1})
}
