package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/lease"
	"github.com/bucketd/bucketd/internal/redisscript"
)

// pipe is one pipeline: the operations of one or more Callers, answered
// together. It is made per pipeline and never reused, so a timer or a
// worker that finishes late can only touch its own pipe. Its commands are
// in the worker's redisscript.Batch, call i for refs[i].
//
// The pipeline's context ends at the latest deadline of its operations,
// so that an operation that joined late still gets Redis's reply when it
// comes in its own time; the timer answers each operation with the policy
// at its own deadline.
type pipe struct {
	deadline time.Time // the latest of the refs' deadlines
	refs     []ref
	// answered[i] goes from 0 to 1 when refs[i] is answered: by the worker
	// with Redis's reply, or by the timer with the policy's answer,
	// whichever comes first.
	answered []atomic.Uint32
}

// ref is one operation in a pipe. The members of an all-or-nothing group
// follow each other; the group is answered, once, through its first ref
// (its answered flag is the group's).
type ref struct {
	c        *Caller
	i        int32       // index in c.ops and c.results
	kind     decide.Kind // copied: c.ops is the connection's once answered
	deadline time.Time   // copied: c.deadline is the next Run's once answered
	span     int32       // copied: op.span
	group    bool        // copied: op.group
	// lease is a lease call's exchange (op.Lease), written with Redis's
	// reply only by whoever answers the operation, before answering it.
	lease *decide.LeaseOp
}

// newPipe returns a pipe with the operations of part for Redis, with room
// for size operations.
func newPipe(part *part, size int) *pipe {
	p := &pipe{refs: make([]ref, 0, size)}
	p.add(part)
	return p
}

// add puts the operations of part into p.
func (p *pipe) add(part *part) {
	c := part.c
	if len(p.refs) == 0 || c.deadline.After(p.deadline) {
		p.deadline = c.deadline
	}
	for _, i := range part.ops {
		o := &c.ops[i]
		p.refs = append(p.refs, ref{c: c, i: i, kind: o.Kind, deadline: c.deadline, span: o.span, group: o.group, lease: o.Lease})
	}
}

// worker sends its lane's pipelines to Redis, one at a time. Its batch
// holds the commands of the pipe it works on, from build to the last
// answer.
type worker struct {
	l     *lane
	in    chan *pipe
	batch redisscript.Batch
}

func (w *worker) run() {
	for p := range w.in {
		w.execute(p)
		w.l.idle <- w // room for every worker: never blocks
	}
}

// dispatch takes parts off the lane's queue, waits for a free worker
// (until the oldest part's deadline, after which that part is answered by
// the policy without being sent) and hands the worker everything that
// waits, up to MaxBatch operations, as one pipe. When the queue is closed
// and drained it stops the workers.
func (l *lane) dispatch() {
	s := l.s
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	var next *part // taken off the queue, not in a pipe yet
	open := true
	for open || next != nil {
		if next == nil {
			p, ok := l.take(idle)
			if !ok {
				break
			}
			next = p
		}
		w := l.freeWorker(next.c.deadline, timer)
		if w == nil {
			s.expireOps(next.c, next.ops, context.DeadlineExceeded, l.addr)
			next = nil
			continue
		}
		p := newPipe(next, min(s.cfg.MaxBatch, max(len(next.ops), len(l.queue)+1)))
		next = nil
		open, next = l.gather(p)
		w.in <- p // buffer 1, and the worker is idle: never blocks
	}
	for range s.cfg.Pipelines {
		w := <-l.idle
		close(w.in)
	}
}

// gather adds to p the parts waiting in the queue, up to MaxBatch
// operations, answering those whose deadline has passed. It returns false
// when the queue is closed, and the part that did not fit, if any.
func (l *lane) gather(p *pipe) (open bool, next *part) {
	s := l.s
	now := time.Now()
	for len(p.refs) < s.cfg.MaxBatch {
		select {
		case part, ok := <-l.queue:
			switch {
			case !ok:
				return false, nil
			case !part.c.deadline.After(now):
				s.expireOps(part.c, part.ops, context.DeadlineExceeded, l.addr)
			case len(p.refs)+len(part.ops) > s.cfg.MaxBatch:
				return true, part
			default:
				p.add(part)
			}
		default:
			return true, nil
		}
	}
	return true, nil
}

// freeWorker returns an idle worker of the lane, waiting for one until
// deadline; nil when the deadline passes first.
func (l *lane) freeWorker(deadline time.Time, timer *time.Timer) *worker {
	wait := time.Until(deadline)
	if wait <= 0 {
		return nil
	}
	select {
	case w := <-l.idle:
		return w
	default:
	}
	timer.Reset(wait)
	select {
	case w := <-l.idle:
		timer.Stop()
		return w
	case <-timer.C:
		return nil
	}
}

// expireOps answers the operations ops of c with the policy, nothing sent:
// their deadline passed before a pipeline to their Redis server (node, ""
// for a standalone Redis) was free, or, with err other than
// context.DeadlineExceeded, they could not be routed to one.
func (s *Store) expireOps(c *Caller, ops []int32, err error, node string) {
	for _, i := range ops {
		k := c.ops[i].Kind
		if c.ops[i].span > 0 { // a group is one decision, counted at its first
			s.count(k, s.failResult(k), err)
		}
		c.answer(i, s.failResult(k))
	}
	msg := "no pipeline to Redis free within the timeout; answered without sending"
	if err != context.DeadlineExceeded {
		msg = "no Redis node to send to; answered without sending"
	}
	s.logError(msg, err, len(ops), node)
}

// due is when the timer answers ref r of p if Redis has not: at its
// deadline, or, for the operations whose deadline ends the pipeline's
// context, a grace period later, so that the Redis client's own answer at
// the deadline comes first.
func (s *Store) due(p *pipe, r *ref) time.Time {
	if r.deadline.Before(p.deadline) {
		return r.deadline
	}
	return p.deadline.Add(s.grace)
}

// guard arms the timer that answers the operations of p still unanswered
// when they are due (the safety net: whatever the Redis client does, every
// operation is answered shortly after its deadline). The timer of a pipe
// whose operations have different deadlines fires once per deadline, each
// time answering those due and arming the next; a worker that finishes
// first stops only the first one, and the others find their operations
// answered.
func (s *Store) guard(p *pipe, at time.Time, node string) *time.Timer {
	return time.AfterFunc(time.Until(at), func() {
		if next, ok := s.expirePipe(p, node); ok {
			s.guard(p, next, node)
		}
	})
}

// expirePipe answers the operations of p that are still unanswered and
// due with the policy, and returns when the next unanswered one is due,
// false when none is left.
func (s *Store) expirePipe(p *pipe, node string) (next time.Time, left bool) {
	now := time.Now()
	n := 0
	for i := range p.refs {
		if p.refs[i].span == 0 || p.answered[i].Load() != 0 {
			continue // a group's other members are answered with its first
		}
		if due := s.due(p, &p.refs[i]); due.After(now) {
			if !left || due.Before(next) {
				next, left = due, true
			}
			continue
		}
		if s.settlePolicy(p, i, context.DeadlineExceeded) {
			n += int(p.refs[i].span)
		}
	}
	if n > 0 {
		s.logError("no reply from Redis within the timeout", context.DeadlineExceeded, n, node)
	}
	return next, left
}

// failResult is the policy's answer to an operation Redis could not
// answer, for the kinds the policy answers (decide.Spec.Policy); the others
// learn that it may not have been applied.
func (s *Store) failResult(k decide.Kind) decide.Answer {
	if !k.Spec().Policy {
		return decide.Answer{Err: decide.ErrNotApplied}
	}
	return s.fail
}

// settle answers operation i of p with r, unless it has been answered
// already; a non-nil err says r is the policy's, and why. It reports
// whether it answered.
func (s *Store) settle(p *pipe, i int, r decide.Answer, err error) bool {
	if !p.answered[i].CompareAndSwap(0, 1) {
		return false
	}
	ref := &p.refs[i]
	s.count(ref.kind, r, err)
	ref.c.answer(ref.i, r)
	return true
}

// count adds one answer to the counters; a non-nil failed is the Redis
// error that made r the policy's answer.
func (s *Store) count(k decide.Kind, r decide.Answer, failed error) {
	if failed != nil {
		s.countError(failed)
		s.countPolicy(k)
	}
	if r.Err != nil {
		return
	}
	switch k.Spec().Counts {
	case decide.CountsDecisions:
		if r.Decision.Allowed {
			s.allowed.Add(1)
		} else {
			s.denied.Add(1)
		}
	case decide.CountsPeeks:
		s.peeks.Add(1)
	case decide.CountsResets:
		if r.Removed {
			s.resets.Add(1)
		}
	}
}

// execute sends p to the lane's Redis server and answers its operations.
func (w *worker) execute(p *pipe) {
	l := w.l
	s := l.s
	ctx, cancel := context.WithDeadline(context.Background(), p.deadline)
	defer cancel()
	w.build(ctx, p)
	first := p.deadline.Add(s.grace)
	for i := range p.refs {
		if due := s.due(p, &p.refs[i]); due.Before(first) {
			first = due
		}
	}
	defer s.guard(p, first, l.addr).Stop()

	s.scriptLoads.Add(int64(l.send(ctx, &w.batch)))
	var lastErr error
	failed, lost := 0, 0
	for i := range p.refs {
		var err error
		n := 1
		switch r := &p.refs[i]; {
		case r.span == 0:
			continue // answered with its group's first
		case r.group:
			n, err = s.settleGroup(p, i, &w.batch)
		default:
			err = s.settleReply(p, i, &w.batch)
		}
		if err != nil {
			failed += n
			lastErr = err
			if redisscript.Classify(err) == redisscript.Transport {
				lost++
			}
		}
	}
	if failed > 0 {
		s.logError("Redis call failed", lastErr, failed, l.addr)
	}
	if lost > 0 && s.cluster != nil {
		s.reloadSlotMap() // the master may have been replaced by a replica
	}
}

// build puts p's operations into the worker's batch and makes their
// commands: after it, p no longer refers to any connection's buffers, so a
// Caller answered by the timer may reuse them while Redis still reads the
// commands. Every acquire and peek decides at Redis TIME.
func (w *worker) build(ctx context.Context, p *pipe) {
	b := &w.batch
	b.Reset(w.l.s.cfg.Prefix)
	for j := range p.refs {
		r := &p.refs[j]
		o := &r.c.ops[r.i]
		b.Add(o.Key, w.l.s.scriptCall(o))
	}
	p.answered = make([]atomic.Uint32, len(p.refs))
	b.Build(ctx, w.l.s.perCall)
}

// settleReply answers ref i of p, an operation alone, with its reply in b
// (or the policy's answer when the reply is a failure), unless the timer
// answered it; it returns the failure that made it the policy's answer.
//
// A lease call's reply goes into its exchange (decide.LeaseOp) only when
// this answers it: once the timer has answered, the Caller may have
// returned and its owner reads the exchange as "no reply".
func (s *Store) settleReply(p *pipe, i int, b *redisscript.Batch) error {
	v, err := b.Reply(i)
	ref := &p.refs[i]
	r, lr, replied, err := s.leaseOutcome(ref.kind, v, err)
	if !p.answered[i].CompareAndSwap(0, 1) {
		return nil // the timer answered it
	}
	if replied {
		ref.lease.Reply, ref.lease.Replied = lr, true
	}
	s.count(ref.kind, r, err)
	ref.c.answer(ref.i, r)
	return err
}

// leaseOutcome is outcome that also returns, for a lease call the script
// answered, its reply and true: the call's own decision is the answer's.
// Any other outcome of a lease call (no reply, an error reply) leaves the
// call unreplied, and the answer is the policy's (WRONGTYPE: the error).
func (s *Store) leaseOutcome(k decide.Kind, v any, err error) (decide.Answer, lease.Reply, bool, error) {
	if k != decide.Lease || err != nil {
		a, err := s.outcome(k, v, err)
		return a, lease.Reply{}, false, err
	}
	r, err := redisscript.ParseLease(v)
	if err != nil {
		return s.failResult(k), lease.Reply{}, false, err
	}
	return decide.Answer{Decision: r.Decision}, lease.Reply{Decision: r.Decision, Epoch: r.Epoch, Held: r.Held}, true, nil
}

// outcome turns the reply to an operation into its answer, or the policy's
// answer and the error.
func (s *Store) outcome(k decide.Kind, v any, err error) (decide.Answer, error) {
	switch redisscript.Classify(err) {
	case redisscript.None:
	case redisscript.WrongType:
		if scriptOps[k] != redisscript.Reset {
			// The key holds something else than a bucket: the client's
			// answer, not a Redis failure.
			return decide.Answer{Err: decide.ErrWrongType}, nil
		}
		return s.failResult(k), err
	default:
		return s.failResult(k), err
	}
	if scriptOps[k] == redisscript.Reset {
		n, ok := v.(int64)
		if !ok {
			return s.failResult(k), fmt.Errorf("%w: DEL answered %T", redisscript.ErrBadReply, v)
		}
		return decide.Answer{Removed: n > 0}, nil
	}
	d, err := redisscript.ParseDecision(v)
	if err != nil {
		return s.failResult(k), err
	}
	return decide.Answer{Decision: d}, nil
}
