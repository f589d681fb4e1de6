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
	key   string
	limit bucket.Limit
	req   lease.Request
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
	r.mu.Lock()
	ok := !r.closed && len(r.queue) < maxRenewQueue
	if ok {
		r.queue = append(r.queue, call{key: key, limit: limit, req: req})
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
		closing := r.closed
		closed := closing && len(r.queue) == 0
		r.mu.Unlock()
		if n > 0 {
			answered := r.send(!lost)
			lost = lost || closing && !answered
			continue
		}
		if closed {
			return
		}
		<-r.wake
		r.gather()
	}
}

// renewGather is how long the renewer lets calls gather after the first
// one wakes it: renewals are sent ahead of need, so a millisecond costs no
// client anything, and Redis pays its per-call cost once for all the calls
// of one script command (redisscript.BatchKeys) instead of once for every
// few (at 1,000 hot keys, 8 calls a command without it).
const renewGather = time.Millisecond

// gather waits renewGather unless the renewer is closing or a full batch
// is waiting already.
func (r *renewer) gather() {
	r.mu.Lock()
	wait := !r.closed && len(r.queue) < maxRenewBatch
	r.mu.Unlock()
	if wait {
		time.Sleep(renewGather)
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
