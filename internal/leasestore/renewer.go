package leasestore

import (
	"sync"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/lease"
)

// maxRenewBatch is how many lease calls the renewer sends in one Run.
const maxRenewBatch = 256

// maxRenewQueue bounds the calls waiting for the renewer. A key has at
// most one call out, so the queue is bounded by the keys anyway; past this
// the shard drops the lease instead (its lease rule 2), which costs only
// under-grant.
const maxRenewQueue = 1 << 16

// renewer sends the lease calls the shards start by themselves, renewals
// ahead of need and leases given back, in batches, without making any
// client wait, and hands every reply (or its absence) back to the shards
// before it takes the next batch (invariant 1).
type renewer struct {
	s      *Store
	mu     sync.Mutex
	queue  []call
	sendBy time.Time // the earliest sendBy of the queue's calls; zero: none
	closed bool
	wake   chan struct{} // one signal: calls are waiting, or the renewer closed
	done   chan struct{} // closed when the loop has sent everything and ended
	shards decide.Caller
	redis  decide.Caller
	batch  []call
	ops    []decide.LeaseOp
}

// call is one lease call a shard started.
type call struct {
	key    string
	limit  bucket.Limit
	req    lease.Request
	sendBy time.Time // the renewer sends it by then (see gather)
}

func newRenewer(s *Store) *renewer {
	return &renewer{s: s, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// start begins the loop; the shards exist by then.
func (r *renewer) start() {
	r.shards, r.redis = r.s.group.NewCaller(), r.s.redis.NewCaller()
	go r.loop()
}

// post takes a call from a shard's goroutine (shard.LeaseConfig.Outbox):
// it never blocks, and refuses when the renewer is closed or full.
func (r *renewer) post(key string, limit bucket.Limit, req lease.Request) bool {
	by := time.Now().Add(time.Duration(min(req.Slack/4, int64(renewGather/time.Microsecond))) * time.Microsecond)
	r.mu.Lock()
	ok := !r.closed && len(r.queue) < maxRenewQueue
	if ok {
		r.queue = append(r.queue, call{key: key, limit: limit, req: req, sendBy: by})
		if r.sendBy.IsZero() || by.Before(r.sendBy) {
			r.sendBy = by
		}
	}
	r.mu.Unlock()
	if ok {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	return ok
}

// close sends what is queued and ends the loop.
func (r *renewer) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	<-r.done
}

// loop sends the queue batch by batch. Once closed, a batch to which
// Redis replied nothing means Redis is not answering: the rest of the
// queue goes back to the shards as failed without being sent, so Close
// waits about one Redis timeout, not one per batch (invariant 2).
func (r *renewer) loop() {
	defer close(r.done)
	lost := false // closed, and Redis replied nothing to a batch since
	for {
		r.mu.Lock()
		n := min(len(r.queue), maxRenewBatch)
		r.batch = append(r.batch[:0], r.queue[:n]...)
		r.queue = append(r.queue[:0], r.queue[n:]...)
		r.sendBy = time.Time{}
		for _, c := range r.queue {
			if r.sendBy.IsZero() || c.sendBy.Before(r.sendBy) {
				r.sendBy = c.sendBy
			}
		}
		closing := r.closed
		closed := closing && len(r.queue) == 0
		r.mu.Unlock()
		if n > 0 {
			answered := r.send(!lost)
			lost = lost || closing && !answered
			r.gather()
			continue
		}
		if closed {
			return
		}
		<-r.wake
		r.gather()
	}
}

// renewGather is the longest a call waits in the queue for others to
// join it: Redis pays its per-command cost (the script's set-up, the round
// trip) once for all the calls of one script command
// (redisscript.BatchKeys) instead of once for every few, and a renewal,
// sent when 100 ms of the key's demand is left in the lease (a tenth of
// it at --lease-target 1s; a quarter of a shorter target: cmd/bucketd's
// renewBelow), can mostly wait that long. A call waits at most a
// quarter of its Slack, so a lease that would run dry sooner is renewed
// sooner; a client's own lease call does not come through here.
const renewGather = 10 * time.Millisecond

// renewStep is how often gather looks whether a call posted since it
// began must be sent sooner.
const renewStep = time.Millisecond

// gather waits until the queue's earliest sendBy (each call's post plus a
// quarter of its Slack, at most renewGather), unless the renewer is
// closing or a full batch is waiting already.
func (r *renewer) gather() {
	for {
		r.mu.Lock()
		wait := !r.closed && len(r.queue) > 0 && len(r.queue) < maxRenewBatch
		by := r.sendBy
		r.mu.Unlock()
		d := time.Until(by)
		if !wait || d <= 0 {
			return
		}
		time.Sleep(min(d, renewStep))
	}
}

// send sends one batch to Redis (unless toRedis is false: then every call
// fails unsent) and its replies to the shards, and reports whether Redis
// replied to any call of it.
func (r *renewer) send(toRedis bool) bool {
	if cap(r.ops) < len(r.batch) {
		r.ops = make([]decide.LeaseOp, len(r.batch))
	}
	r.ops = r.ops[:len(r.batch)]
	for i, c := range r.batch {
		r.ops[i] = decide.LeaseOp{Call: c.req}
	}
	var err error
	if toRedis {
		for i, c := range r.batch {
			r.redis.Add(decide.Request{Kind: decide.Lease, Key: []byte(c.key), Limit: c.limit, Lease: &r.ops[i]})
		}
		r.s.n.leaseCalls.Add(int64(len(r.batch)))
		_, err = r.redis.Run()
	}
	answered := false
	for i, c := range r.batch {
		k := decide.LeaseApply
		if err != nil || !r.ops[i].Replied {
			k = decide.LeaseFail
			r.s.n.failed.Add(1)
		} else {
			answered = true
		}
		r.shards.Add(decide.Request{Kind: k, Key: []byte(c.key), Lease: &r.ops[i]})
	}
	r.shards.Run() //nolint:errcheck // the shards close after the renewer
	clear(r.batch)
	return answered
}
