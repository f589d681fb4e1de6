package replica

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/bucketd/bucketd/internal/ratelog"
	"github.com/bucketd/bucketd/internal/shard"
)

// ErrRedisOOM is wrapped by Flush's error when bucket states still wait
// because Redis refused them for lack of memory (OOM at its maxmemory).
var ErrRedisOOM = errors.New("replica: Redis is out of memory (maxmemory)")

// The backoff of the retries of puts waiting for memory in Redis.
const (
	waitMinBackoff = 100 * time.Millisecond
	waitMaxBackoff = 5 * time.Second
)

// oomWait holds the puts Redis refused for lack of memory, by key, until
// it has room. Holding them apart, rather than retrying the whole batch,
// is what keeps the copy going: deletions and the puts Redis still takes
// flow past them. A key's newer change supersedes what waits for it (a
// deletion must never be followed by an older put, which would bring the
// key back); a resync drops them all, as it re-sends the whole state.
//
// At most waitCap puts wait, so a Redis that stays full cannot make the
// Replicator hold a copy of every bucket; a put beyond that is counted
// and dropped, and once Redis has room the whole state is re-sent
// (waitLost). Owned by the Replicator's mu, except the atomics.
type oomWait struct {
	waiting     map[string]shard.Change
	waitCap     int
	waitLost    bool          // puts were dropped while waiting was full: resync once Redis has room
	waitNext    time.Time     // when the waiting puts are tried again
	waitBackoff time.Duration // doubles each time they are refused again
	waitTake    []shard.Change
	waitCount   atomic.Int64 // len(waiting), for Stats
	oom         atomic.Int64 // bucket writes refused with OOM, for Stats
	oomLog      ratelog.Gate
	oomFailing  bool // refused since the last time everything waiting was written
}

// wait keeps c, which Redis refused with OOM, unless a newer change of its
// key waits already.
func (r *Replicator) wait(c shard.Change) {
	if r.waiting == nil {
		r.waiting = make(map[string]shard.Change)
	}
	old, ok := r.waiting[c.Key]
	switch {
	case ok && old.At > c.At:
		return
	case !ok && len(r.waiting) >= r.waitCap:
		r.waitLost = true
		return
	}
	r.waiting[c.Key] = c
	r.waitCount.Store(int64(len(r.waiting)))
}

// supersede drops what waits for the keys of changes, which are newer.
func (r *Replicator) supersede(changes []shard.Change) {
	if len(r.waiting) == 0 {
		return
	}
	for i := range changes {
		delete(r.waiting, changes[i].Key)
	}
	r.waitCount.Store(int64(len(r.waiting)))
}

// trackAll starts a resync: every live bucket is re-sent, which replaces
// whatever waits for memory.
func (r *Replicator) trackAll() error {
	clear(r.waiting)
	r.waitLost = false
	r.waitCount.Store(0)
	return r.cfg.Group.TrackAll()
}

// retryWaiting writes the waiting puts again, a batch at a time, when
// their backoff is over (or now, with now). A batch refused again puts
// the rest off for twice as long (100 ms to 5 s): probing a full Redis
// costs it one refused script call per 64 buckets. Once everything that
// waited is written, Redis has room again; a resync follows if puts were
// dropped meanwhile.
func (r *Replicator) retryWaiting(ctx context.Context, now bool) error {
	if len(r.waiting) == 0 && !r.waitLost {
		return nil
	}
	if !now && time.Now().Before(r.waitNext) {
		return nil
	}
	for len(r.waiting) > 0 {
		batch := r.takeWaiting(r.cfg.Batch)
		refused := r.oom.Load()
		if err := r.write(ctx, batch); err != nil {
			r.retry = append(r.retry[:0], batch...)
			r.writeFailed(err)
			return r.failed(err)
		}
		if r.oom.Load() > refused {
			r.waitBackoff = min(max(2*r.waitBackoff, waitMinBackoff), waitMaxBackoff)
			r.waitNext = time.Now().Add(r.waitBackoff)
			return nil
		}
	}
	r.waitBackoff = 0
	if r.waitLost {
		r.resyncs.Add(1)
		r.oomFailing = false
		r.cfg.Logger.Warn("Redis has room again; re-sending the whole state, as some bucket states could not be kept while it was out of memory")
		return r.trackAll()
	}
	if r.oomFailing {
		r.oomFailing = false
		r.cfg.Logger.Info("Redis has room again; the bucket states that waited for it are written")
	}
	return nil
}

// takeWaiting removes up to n waiting puts and returns them.
func (r *Replicator) takeWaiting(n int) []shard.Change {
	batch := r.waitTake[:0]
	for key, c := range r.waiting {
		if len(batch) == n {
			break
		}
		batch = append(batch, c)
		delete(r.waiting, key)
	}
	r.waitTake = batch
	r.waitCount.Store(int64(len(r.waiting)))
	return batch
}

// outOfMemory counts n puts Redis refused with OOM (in the errors too) and
// logs them, at most one line a second.
func (r *Replicator) outOfMemory(n int, err error) {
	r.oom.Add(int64(n))
	r.errs.Add(int64(n))
	r.oomFailing = true
	if suppressed, ok := r.oomLog.Allow(time.Now()); ok {
		r.cfg.Logger.Warn("Redis is out of memory (maxmemory) and refused bucket states; they wait in bucketd and are retried, deletions still go through: give Redis more memory or an eviction policy (docs/redis.md)",
			"refused", n, "waiting", len(r.waiting), "suppressed", suppressed, "prefix", r.cfg.Prefix, "err", err)
	}
}
