package redisstore

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/redisscript"
)

// RunIsolated answers the operations added since the last Run as one unit
// (EXEC of a client's MULTI): they go to Redis as one transaction of their
// own, MULTI ... EXEC, so Redis runs them with no other command in between,
// whichever bucketd instance sent that command. It answers within the
// store's Timeout, as Run does, with the policy's answer where Redis did
// not answer; the pipelines (Config.Pipelines) are not used: the
// transaction goes out at once on a pooled connection of the Redis client.
//
// On a Redis Cluster the keys (prefix included) must share a hash slot, as
// Redis requires of a transaction: use a {hash tag}. Otherwise nothing is
// sent, and it returns decide.ErrCrossSlot and no answers.
func (c *Caller) RunIsolated() ([]decide.Answer, error) {
	n := len(c.ops)
	if cap(c.results) < n {
		c.results = make([]decide.Answer, n, max(n, 2*cap(c.results)))
	}
	c.results = c.results[:n]
	defer func() {
		clear(c.ops) // drop references to the connection's buffers
		c.ops = c.ops[:0]
	}()
	remote := make([]int, 0, n) // indexes of the operations for Redis
	for i := range c.ops {
		if !c.s.scripted(&c.ops[i]) {
			c.results[i] = decide.Answer{Err: decide.ErrUnsupported} // no script on Redis, as in Run
		} else {
			remote = append(remote, i)
		}
	}
	if len(remote) == 0 {
		return c.results, nil
	}
	c.s.mu.RLock()
	closed := c.s.closed
	c.s.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if err := c.s.transact(c.ops, remote, c.results); err != nil {
		return nil, err
	}
	return c.results, nil
}

// txResult is what the goroutine that sends a transaction reports.
type txResult struct {
	evals int
	err   error
}

// transact sends ops[remote...] as one transaction and puts their answers
// in results. The transaction runs on a goroutine of its own with a Batch
// of its own, so that the answers come within Timeout (plus grace) even if
// the Redis client overruns its context: then every operation gets the
// policy's answer, and the late transaction touches nothing of the Caller.
func (s *Store) transact(ops []op, remote []int, results []decide.Answer) error {
	b := new(redisscript.Batch)
	b.Reset(s.cfg.Prefix)
	for _, i := range remote {
		b.Add(ops[i].Key, s.scriptCall(&ops[i]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	b.Build(ctx, s.perCall) // one key per command on a cluster: go-redis checks the slots
	done := make(chan txResult, 1)
	go func() {
		evals, err := b.SendTx(ctx, s.client)
		done <- txResult{evals, err}
	}()
	timer := time.NewTimer(s.cfg.Timeout + s.grace)
	defer timer.Stop()
	var r txResult
	select {
	case r = <-done:
	case <-timer.C:
		for _, i := range remote {
			k := ops[i].Kind
			results[i] = s.failResult(k)
			if ops[i].span > 0 { // a group is one decision, counted at its first
				s.count(k, results[i], context.DeadlineExceeded)
			}
		}
		s.logError("no reply from Redis to a transaction within the timeout", context.DeadlineExceeded, len(remote), "")
		return nil
	}
	if errors.Is(r.err, redis.ErrCrossSlot) {
		return decide.ErrCrossSlot
	}
	s.scriptLoads.Add(int64(r.evals))
	var lastErr error
	failed := 0
	for j := 0; j < len(remote); j++ {
		n, err := s.txAnswer(ops, remote, j, b, results)
		if err != nil {
			failed += n
			lastErr = err
		}
		j += n - 1
	}
	if failed > 0 {
		s.logError("Redis transaction failed", lastErr, failed, "")
	}
	return nil
}

// txAnswer puts the answer to the operation remote[j] of a transaction in
// results, from its reply in b: an operation alone, or, when it starts an
// all-or-nothing group, the whole group (every member the policy's answer
// if any member's reply is a failure), counted as one decision. It returns
// how many operations it answered and the failure, if any.
func (s *Store) txAnswer(ops []op, remote []int, j int, b *redisscript.Batch, results []decide.Answer) (int, error) {
	first := &ops[remote[j]]
	n := max(int(first.span), 1)
	var failure error
	all := true
	for k := j; k < j+n; k++ {
		v, err := b.Reply(k)
		o := &ops[remote[k]]
		a, lr, replied, err := s.leaseOutcome(o.Kind, v, err)
		if replied {
			o.Lease.Reply, o.Lease.Replied = lr, true
		}
		results[remote[k]] = a
		failure = cmp.Or(failure, err)
		all = all && a.Err == nil && a.Decision.Allowed
	}
	switch {
	case failure != nil:
		for k := j; k < j+n; k++ {
			results[remote[k]] = s.failResult(ops[remote[k]].Kind)
		}
		s.count(first.Kind, results[remote[j]], failure)
	case first.group:
		s.count(decide.Acquire, decide.Answer{Decision: bucket.Decision{Allowed: all}}, nil)
	default:
		s.count(first.Kind, results[remote[j]], nil)
	}
	return n, failure
}

// scripted reports whether the script answers o: its kind's Spec says so
// (not CL.THROTTLE), and a lease call needs lease mode (Config.Leases) and
// its exchange.
func (s *Store) scripted(o *op) bool {
	if o.Kind == decide.Lease {
		return s.cfg.Leases && o.Lease != nil
	}
	return o.Kind.Spec().Scripted
}

// scriptOps is the script's operation for each kind the script answers
// (decide.Spec.Scripted).
var scriptOps = [decide.NumKinds]redisscript.Op{
	decide.Acquire: redisscript.Acquire,
	decide.Peek:    redisscript.Peek,
	decide.Reset:   redisscript.Reset,
	decide.Lease:   redisscript.Lease,
}

// scriptCall is the script call that answers o, at Redis TIME: its own, or
// its part of an all-or-nothing group (the first member carries the size).
// In lease mode a reset is the script's reset op, which keeps live lease
// records, and a lease call is the script's lease op for this instance's
// record of the key's generation.
func (s *Store) scriptCall(o *op) redisscript.Call {
	c := redisscript.Call{Op: scriptOps[o.Kind], Limit: o.Limit, Cost: o.Cost, At: redisscript.RedisTime}
	switch {
	case o.group:
		c.Op = redisscript.AcquireAll
		if o.span > 0 {
			c.Group = int(o.span)
		}
	case c.Op == redisscript.Reset && s.cfg.Leases:
		c = redisscript.Call{Op: redisscript.LeaseReset, At: redisscript.RedisTime}
	case c.Op == redisscript.Reset:
		c = redisscript.Call{Op: redisscript.Reset}
	case c.Op == redisscript.Lease:
		r := &o.Lease.Call
		c.Limit, c.Cost = r.Limit, r.Cost
		c.Lease = bucket.LeaseCall{
			Holder: s.cfg.Instance + "-" + strconv.FormatUint(uint64(r.Gen), 10),
			Epoch:  r.Epoch, Consumed: r.Consumed, Returned: r.Returned, Want: r.Want,
			TTL: s.cfg.LeaseTTL.Microseconds(),
		}
	}
	return c
}
