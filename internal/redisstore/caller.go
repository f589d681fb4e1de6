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
	ops     []decide.Request
	results []decide.Answer
	// deadline is when the operations must be answered, set by Run before
	// the Caller is queued and read by the dispatcher and the workers.
	deadline time.Time
	// pending counts the operations of this Run not answered yet; whoever
	// answers the last one sends on done.
	pending atomic.Int32
	done    chan struct{} // buffer 1: the last answer never blocks
	local   int           // operations Run answered itself (not for Redis)
}

// Add queues r for the next Run. r.Key must stay valid until Run returns.
func (c *Caller) Add(r decide.Request) { c.ops = append(c.ops, r) }

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
	// CL.THROTTLE has no script on Redis: answered here.
	c.local = 0
	for i := range c.ops {
		if c.ops[i].Kind == decide.Throttle {
			c.results[i] = decide.Answer{Err: decide.ErrUnsupported}
			c.local++
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

// remote returns the number of operations of this Run that go to Redis.
func (c *Caller) remote() int { return len(c.ops) - c.local }

// submit hands c to an idle worker when nothing waits (one goroutine hop
// fewer when the store is not busy), or else queues it for the dispatcher,
// waiting while the queue is full.
func (s *Store) submit(c *Caller) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if len(s.queue) == 0 {
		select {
		case w := <-s.idle:
			w.in <- newPipe(c, c.remote()) // buffer 1, the worker is idle: never blocks
			return nil
		default:
		}
	}
	s.queue <- c
	return nil
}

// answer stores r as the result of operation i of c; the last answer of the
// Run wakes it. Each operation must be answered exactly once.
func (c *Caller) answer(i int32, r decide.Answer) {
	c.results[i] = r
	if c.pending.Add(-1) == 0 {
		c.done <- struct{}{}
	}
}
