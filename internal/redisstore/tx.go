package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

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
		if c.ops[i].Kind == decide.Throttle {
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
func (s *Store) transact(ops []decide.Request, remote []int, results []decide.Answer) error {
	b := new(redisscript.Batch)
	b.Reset(s.cfg.Prefix)
	for _, i := range remote {
		b.Add(ops[i].Key, scriptCall(ops[i]))
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
			s.count(k, results[i], context.DeadlineExceeded)
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
	for j, i := range remote {
		v, err := b.Reply(j)
		k := ops[i].Kind
		a, err := s.outcome(k, v, err)
		s.count(k, a, err)
		results[i] = a
		if err != nil {
			failed++
			lastErr = err
		}
	}
	if failed > 0 {
		s.logError("Redis transaction failed", lastErr, failed, "")
	}
	return nil
}

// scriptCall is the script call that answers op, at Redis TIME.
func scriptCall(op decide.Request) redisscript.Call {
	switch op.Kind {
	case decide.Peek:
		return redisscript.Call{Op: redisscript.Peek, Limit: op.Limit, Cost: op.Cost, At: redisscript.RedisTime}
	case decide.Reset:
		return redisscript.Call{Op: redisscript.Reset}
	}
	return redisscript.Call{Op: redisscript.Acquire, Limit: op.Limit, Cost: op.Cost, At: redisscript.RedisTime}
}
