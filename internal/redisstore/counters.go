package redisstore

import (
	"context"
	"errors"
	"net"
	"sync/atomic"

	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/redisscript"
)

// RedisStats are the store's counters of what went wrong with Redis, totals
// since New, for the metrics (internal/metrics reads them at scrape time).
// INFO's "# Store" section shows their sums.
type RedisStats struct {
	// ErrorReplies, Timeouts and TransportErrors split Errors by what
	// happened: Redis answered with an error (a script error, READONLY,
	// OOM, a reply of the wrong shape); nothing came within the timeout
	// (operations the timer answered, those that waited the whole timeout
	// for a free pipeline, and calls that ended at their deadline); or the
	// connection failed (refused, reset, no node to route to).
	ErrorReplies, Timeouts, TransportErrors int64
	// PolicyAcquires and PolicyPeeks split Degraded: TB.ACQUIRE and TB.PEEK
	// answers that came from the fail-open or fail-closed policy.
	PolicyAcquires, PolicyPeeks int64
	// ScriptLoads is ScriptLoads.
	ScriptLoads int64
	// FailOpen is Config.FailOpen: the policy's answer is "allowed".
	FailOpen bool
}

// errorCounts are the atomics behind RedisStats' error and policy counts.
type errorCounts struct {
	replies, timeouts, transport atomic.Int64
	policyAcquires, policyPeeks  atomic.Int64
}

// RedisStats returns the counters; safe for concurrent use. The three error
// kinds add up to Errors, the two policy counts to Degraded.
func (s *Store) RedisStats() RedisStats {
	return RedisStats{
		ErrorReplies:    s.kinds.replies.Load(),
		Timeouts:        s.kinds.timeouts.Load(),
		TransportErrors: s.kinds.transport.Load(),
		PolicyAcquires:  s.kinds.policyAcquires.Load(),
		PolicyPeeks:     s.kinds.policyPeeks.Load(),
		ScriptLoads:     s.ScriptLoads(),
		FailOpen:        s.cfg.FailOpen,
	}
}

// countError counts one failed Redis operation or command in Errors and
// under its kind. Only failures pay for the classification.
func (s *Store) countError(err error) {
	s.errs.Add(1)
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		s.kinds.timeouts.Add(1)
	case redisscript.IsReply(err) || errors.Is(err, redisscript.ErrBadReply):
		s.kinds.replies.Add(1)
	default:
		s.kinds.transport.Add(1)
	}
}

// countPolicy counts one answer of kind k that came from the policy.
func (s *Store) countPolicy(k decide.Kind) {
	if !k.Spec().Policy {
		return // TB.RESET gets an error reply, not the policy's answer
	}
	if k.Spec().Counts == decide.CountsPeeks {
		s.kinds.policyPeeks.Add(1)
	} else {
		s.kinds.policyAcquires.Add(1)
	}
	s.degraded.Add(1)
}
