package redisstore

import (
	"sync/atomic"
	"time"

	"github.com/bucketd/bucketd/internal/decide"
)

// Caller gathers one connection's operations and has the store answer them
// in one Run. It reuses its slices and its completion channel, so a steady
// stream of calls allocates nothing on the bucketd side beyond the
// pipeline's own allocations. Not safe for concurrent use: each connection
// owns one.
type Caller struct {
	s       *Store
	ops     []op
	results []decide.Answer
	// deadline is when the operations must be answered, set by Run before
	// the Caller's parts are queued and read by the dispatchers and the
	// workers.
	deadline time.Time
	// pending counts the operations of this Run not answered yet; whoever
	// answers the last one sends on done.
	pending atomic.Int32
	done    chan struct{} // buffer 1: the last answer never blocks
	local   int           // operations Run answered itself (not for Redis)
	// parts are the Run's Redis operations by lane: one part on a
	// standalone Redis, one per master involved on a cluster. Each part's
	// ops slice is kept for the next Run.
	parts []part
	// unrouted are operations no lane could take (a cluster whose slot map
	// is not known), answered by the policy with routeErr.
	unrouted []int32
	routeErr error
	// keyBuf holds a group's key with the prefix while its slot is
	// computed (sameSlot).
	keyBuf []byte
}

// op is one operation of a Run: the request, and how it is answered.
type op struct {
	decide.Request
	// span is how many operations, from this one on, are answered as one:
	// 1 for an operation alone, n for the first of an all-or-nothing group
	// of n (AddAll), 0 for the group's other members, which are routed,
	// sent, answered and counted with the first.
	span int32
	// group marks a member of an all-or-nothing group (sent as the
	// script's acquireall, even a group of one).
	group bool
	// local marks an operation Run answered itself (CL.THROTTLE, a group
	// whose keys span Redis Cluster slots): it is never sent.
	local bool
}

// part is the operations of one Run for one lane, in the order they were
// added: a connection's operations on one key are always in one part, so
// they reach Redis in order.
type part struct {
	c    *Caller
	lane *lane
	ops  []int32 // indexes in c.ops and c.results
}

// Add queues r for the next Run. r.Key must stay valid until Run returns.
func (c *Caller) Add(r decide.Request) { c.ops = append(c.ops, op{Request: r, span: 1}) }

// Run has every operation added since the last Run answered, and returns
// the results in the order the operations were added, within the store's
// Timeout. The slice is valid until the next Run. After Close it returns
// ErrClosed and no results.
func (c *Caller) Run() ([]decide.Answer, error) {
	n := len(c.ops)
	if cap(c.results) < n {
		c.results = make([]decide.Answer, n, max(n, 2*cap(c.results)))
	}
	c.results = c.results[:n]
	if n == 0 {
		return c.results, nil
	}
	// CL.THROTTLE has no script on Redis, and a group whose keys span
	// cluster slots cannot be one script call: answered here.
	c.local = 0
	for i := range c.ops {
		o := &c.ops[i]
		switch {
		case o.span > 1 && c.s.cluster != nil && !c.sameSlot(i):
			c.answerLocal(i, int(o.span), decide.ErrCrossSlot)
		case !o.group && !c.s.scripted(o):
			c.answerLocal(i, 1, decide.ErrUnsupported)
		}
	}
	var err error
	if c.local < n {
		c.pending.Store(int32(n - c.local))
		c.deadline = time.Now().Add(c.s.cfg.Timeout)
		if err = c.s.submit(c); err == nil {
			<-c.done
		}
	}
	clear(c.ops) // drop references to the connection's buffers
	c.ops = c.ops[:0]
	if err != nil {
		return nil, err
	}
	return c.results, nil
}

// answerLocal answers the n operations from i with err, before anything
// is sent: they are local, and route skips them.
func (c *Caller) answerLocal(i, n int, err error) {
	for j := i; j < i+n; j++ {
		c.results[j] = decide.Answer{Err: err}
		c.ops[j].local = true
	}
	c.local += n
}

// resetParts empties c's parts for a new routing; part reuses their
// slices.
func (c *Caller) resetParts() {
	for i := range c.parts {
		c.parts[i].lane = nil
	}
	c.parts = c.parts[:0]
	c.unrouted = c.unrouted[:0]
	c.routeErr = nil
}

// part returns c's part for lane l, adding it (reusing a kept slice) if
// this Run has none yet.
func (c *Caller) part(l *lane) *part {
	for i := range c.parts {
		if c.parts[i].lane == l {
			return &c.parts[i]
		}
	}
	if len(c.parts) < cap(c.parts) {
		c.parts = c.parts[:len(c.parts)+1]
	} else {
		c.parts = append(c.parts, part{})
	}
	p := &c.parts[len(c.parts)-1]
	p.c, p.lane, p.ops = c, l, p.ops[:0]
	return p
}

// submit routes c's operations to their lanes and hands each part to an
// idle worker of its lane when nothing waits there (one goroutine hop
// fewer when the store is not busy), or else queues it for the lane's
// dispatcher, waiting while that queue is full. Operations that cannot be
// routed are answered by the policy.
func (s *Store) submit(c *Caller) error {
	if s.cluster != nil && !s.slotsKnown.Load() {
		s.learnSlots(c.deadline)
	}
	s.mu.RLock()
	for {
		if s.closed {
			s.mu.RUnlock()
			return ErrClosed
		}
		missing, ok := s.route(c)
		if ok {
			break
		}
		s.mu.RUnlock()
		s.addLane(missing)
		s.mu.RLock()
	}
	defer s.mu.RUnlock()
	if len(c.unrouted) > 0 {
		s.expireOps(c, c.unrouted, c.routeErr, "")
	}
	for i := range c.parts {
		s.enqueue(&c.parts[i])
	}
	return nil
}

// enqueue hands p to an idle worker of its lane or queues it. Called under
// the store's mu (shared), so the lane's queue is open.
func (s *Store) enqueue(p *part) {
	l := p.lane
	if len(l.queue) == 0 {
		select {
		case w := <-l.idle:
			w.in <- newPipe(p, len(p.ops)) // buffer 1, the worker is idle: never blocks
			return
		default:
		}
	}
	l.queue <- p
}

// answer stores r as the result of operation i of c; the last answer of the
// Run wakes it. Each operation must be answered exactly once.
func (c *Caller) answer(i int32, r decide.Answer) {
	c.results[i] = r
	if c.pending.Add(-1) == 0 {
		c.done <- struct{}{}
	}
}
