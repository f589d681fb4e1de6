// Package replica copies bucketd's bucket state to Redis, asynchronously,
// through the same Lua script that implements the math (bucket.Script), so
// that the Redis copy holds exactly the state memory holds, in the seeds'
// format (HASH tokens/ts with a PEXPIRE), readable by other programs and by
// a restarted bucketd.
//
// Memory decides; replication never slows a decision. The shards remember
// which keys changed (shard.Config.TrackChanges, bounded); the Replicator
// collects those keys every Interval and writes their current state with
// the script's "put" (or "del") operation, carrying bucketd's own timestamp
// and guarded so an older state never overwrites a newer one. A key changed
// a thousand times between two collections is written once: Redis runs the
// script several times slower than bucketd decides, so coalescing is what
// lets it keep up. When Redis is slow or down the writes wait, with backoff;
// the shards keep deciding and keep coalescing; changes beyond the tracking
// capacity are dropped and counted, and once Redis answers again the
// Replicator re-sends the whole live state so the copy converges.
//
// A Redis at its maxmemory (noeviction) refuses puts with OOM but never a
// DEL, which frees memory: deletions are written in script calls of their
// own, ahead of the puts, so they always go through; a refused put waits
// in the Replicator (bounded, superseded by a newer change of its key) and
// is retried with backoff, while everything else flows.
package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/info"
	"github.com/bucketd/bucketd/internal/ratelog"
	"github.com/bucketd/bucketd/internal/redisscript"
	"github.com/bucketd/bucketd/internal/shard"
	"github.com/redis/go-redis/v9"
)

// Config sets up a Replicator. Zero values pick the defaults in parentheses.
type Config struct {
	Client       redis.UniversalClient // where the copy lives; create it with MaxRetries: -1
	Group        *shard.Group          // with TrackChanges > 0
	Prefix       string                // put before every key in Redis ("tb:")
	Interval     time.Duration         // between collections (10ms)
	Batch        int                   // changes per pipeline (1024)
	Timeout      time.Duration         // for one pipeline (2s)
	Capacity     int                   // the tracking capacity, for Stats (0)
	RestartCheck time.Duration         // how often Redis's run_id is compared, to notice a restart (5s)
	Logger       *slog.Logger          // (slog.Default())
	// MaxKeyBytes is --max-key-bytes: Load leaves out a bucket whose key
	// (without Prefix) is longer, as every command refuses such a key. 0:
	// no bound.
	MaxKeyBytes int
	// Now returns the time on Group's clock: the load instant, which no
	// loaded last call may be later than (time.Now).
	Now func() time.Time
	// Fence, when set, kills connections abandoned on a failed write
	// before anything newer is written (see Fence); its OnConnect must be
	// the client's. Without it, or where Redis forbids CLIENT, failed
	// writes are followed by reconciles instead.
	Fence *Fence
}

// Stats are the replication figures for INFO and metrics.
type Stats struct {
	QueueDepth    int64   // changed keys not yet written
	QueueCapacity int64   // most changed keys tracked at once
	LagSeconds    float64 // age of the oldest unwritten change (0 when none)
	Applied       int64   // states and deletions written to Redis
	Dropped       int64   // changes not tracked because the capacity was full
	RedisErrors   int64   // failed pipelines, plus buckets Redis refused
	Resyncs       int64   // full re-sends after drops
	OOMRefusals   int64   // bucket writes Redis refused at its maxmemory (OOM)
	OOMWaiting    int64   // of QueueDepth: puts refused with OOM, waiting for room in Redis
}

// Replicator runs the copy. Run it with Run; Flush at shutdown.
type Replicator struct {
	cfg Config

	mu      sync.Mutex     // one writer at a time: Run's loop or Flush
	retry   []shard.Change // a failed batch, written first next time
	scratch []shard.Change
	batch   redisscript.Batch // the script calls of write
	sent    []int32           // of send: the index in changes of each call of batch
	oomWait                   // puts Redis refused for lack of memory

	applied   atomic.Int64
	errs      atomic.Int64
	resyncs   atomic.Int64
	retrying  atomic.Int64 // len(retry), readable without mu
	inflight  atomic.Int64 // changes collected and being written
	lastClean atomic.Int64 // Unix nanos of the last Flush that wrote everything
	droppedAt int64        // shard drop count at the last resync
	runID     string       // Redis's run_id when last checked
	checkedAt time.Time    // when run_id was last checked
	failing   bool
	// reconciles is how many reconciles are still due after a write
	// failed: a pipeline abandoned on a timeout may still reach Redis
	// later, and a late put of a key deleted since then would bring the key
	// back (the guard compares with a stored ts, and a deleted key has
	// none). See Flush.
	reconciles int
	loadLater  atomic.Bool // the start-up Load failed: Run retries it
	failLog    ratelog.Gate
	// refusalLog rate-limits refusedBuckets apart from failed.
	refusalLog ratelog.Gate
}

// New checks cfg and returns a Replicator.
func New(cfg Config) (*Replicator, error) {
	if cfg.Client == nil || cfg.Group == nil {
		return nil, errors.New("replica: Config.Client and Config.Group are required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "tb:"
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Millisecond
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1024
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RestartCheck <= 0 {
		cfg.RestartCheck = 5 * time.Second
	}
	r := &Replicator{cfg: cfg}
	r.waitCap = max(cfg.Capacity, cfg.Batch)
	r.lastClean.Store(time.Now().UnixNano())
	return r, nil
}

// Run collects and writes changes every Interval until ctx ends. Redis
// errors are logged at a bounded rate and retried with backoff.
func (r *Replicator) Run(ctx context.Context) {
	backoff := time.Duration(0)
	timer := time.NewTimer(r.cfg.Interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if r.loadLater.Load() {
			if n, err := r.Load(ctx); err == nil {
				r.loadLater.Store(false)
				r.cfg.Logger.Info("loaded bucket state from Redis after all; keys decided meanwhile kept their state", "buckets", n)
			}
		}
		err := r.flush(ctx, false)
		switch {
		case err == nil:
			backoff = 0
		case ctx.Err() != nil:
			return
		default:
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
		}
		timer.Reset(r.cfg.Interval + backoff)
	}
}

// Flush writes every change collected so far (and a pending retry, and
// the puts that wait for memory in Redis). It returns the first Redis
// error, or one wrapping ErrRedisOOM when puts still wait; what could not
// be written stays queued.
func (r *Replicator) Flush(ctx context.Context) error {
	if err := r.flush(ctx, true); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.waiting); n > 0 || r.waitLost {
		return fmt.Errorf("%w: %d bucket states wait for room there", ErrRedisOOM, n)
	}
	return nil
}

// flush is Flush for Run, which retries the puts waiting for memory in
// Redis only when their backoff is over (all, with all), and does not
// count them as a failure: the rest of the copy goes on.
func (r *Replicator) flush(ctx context.Context, all bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() { r.retrying.Store(int64(len(r.retry))) }()
	if err := r.fence(ctx); err != nil {
		return r.failed(err)
	}
	wroteBefore := r.applied.Load() > 0 // in earlier flushes
	if err := r.writeChanges(ctx); err != nil {
		return err
	}
	if err := r.retryWaiting(ctx, all); err != nil {
		return err
	}
	r.recovered()
	// After a failed write, remove what late writes of abandoned pipelines
	// brought back: once as soon as Redis answers again (a paused Redis
	// runs the commands it had buffered first) and once more an interval
	// later (for commands that were still travelling).
	if r.reconciles > 0 {
		if err := r.reconcile(ctx); err != nil {
			return r.failed(err)
		}
		r.reconciles--
	}
	if err := r.checkRestart(ctx, wroteBefore); err != nil {
		return err
	}
	if err := r.resyncAfterDrops(ctx); err != nil {
		return err
	}
	if len(r.waiting) == 0 && !r.waitLost {
		r.lastClean.Store(time.Now().UnixNano())
	}
	return nil
}

// fence has the Fence, if any, kill the connections of failed writes
// before anything newer is written.
func (r *Replicator) fence(ctx context.Context) error {
	if r.cfg.Fence == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	fenced, err := r.cfg.Fence.settle(ctx, r.cfg.Client)
	if err != nil {
		return err
	}
	if fenced {
		r.reconciles = 0 // nothing abandoned can run any more
	}
	return nil
}

// writeChanges writes the pending retry, then every change the shards
// collected, a batch at a time. A batch that fails becomes the retry and
// ends the Flush (counted and logged); closed shards end it too.
func (r *Replicator) writeChanges(ctx context.Context) error {
	if len(r.retry) > 0 {
		if err := r.write(ctx, r.retry); err != nil {
			r.writeFailed(err)
			return r.failed(err)
		}
		r.retry = r.retry[:0]
	}
	for i := range r.cfg.Group.Len() {
		for {
			changes, err := r.cfg.Group.Collect(i, r.scratch[:0], r.cfg.Batch)
			r.scratch = changes
			if err != nil {
				return err // shards closed: nothing more to collect
			}
			if len(changes) == 0 {
				break
			}
			r.supersede(changes)
			if err := r.write(ctx, changes); err != nil {
				r.retry = append(r.retry[:0], changes...)
				r.writeFailed(err)
				return r.failed(err)
			}
		}
	}
	return nil
}

// checkRestart re-sends the whole state when Redis restarted: one without
// persistence has lost the copy, and keys that do not change again would
// stay missing. A failover (Sentinel) is the same: the replica promoted
// may not have received the last writes. Its run_id tells, checked every
// RestartCheck. When the first run_id is learnt only after earlier
// flushes wrote (wroteBefore: Redis did not answer the first checks),
// nobody saw which Redis took those writes, which may be lost since: the
// whole state is re-sent then too, without a log line.
func (r *Replicator) checkRestart(ctx context.Context, wroteBefore bool) error {
	if time.Since(r.checkedAt) < r.cfg.RestartCheck {
		return nil
	}
	r.checkedAt = time.Now()
	id, err := runID(ctx, r.cfg.Client)
	if err != nil {
		return nil // checked again next time
	}
	changed := r.runID != "" && id != r.runID
	if changed || (r.runID == "" && wroteBefore) {
		r.resyncs.Add(1)
		if changed {
			r.cfg.Logger.Warn("the replicate Redis restarted (new run_id); re-sending the whole state")
		}
		if err := r.trackAll(); err != nil {
			return err
		}
	}
	r.runID = id
	return nil
}

// resyncAfterDrops re-sends the whole live state when changes were dropped
// while tracking was full: they are lost from the change sets, and only a
// full re-send makes the copy converge.
func (r *Replicator) resyncAfterDrops(ctx context.Context) error {
	dropped := r.cfg.Group.Stats().ChangesDropped
	if dropped == r.droppedAt {
		return nil
	}
	r.droppedAt = dropped
	r.resyncs.Add(1)
	r.cfg.Logger.Warn("replication dropped changes while Redis was behind; re-sending the whole state", "dropped_total", dropped)
	if err := r.trackAll(); err != nil {
		return err
	}
	// Dropped deletions cannot be re-sent from the live state: remove
	// what Redis holds and memory does not.
	if err := r.reconcile(ctx); err != nil {
		r.droppedAt = -1 // try the whole resync again next time
		return r.failed(err)
	}
	return nil
}

// runID reads the run_id of a standalone Redis (for a cluster, of the node
// go-redis picks; good enough to notice restarts of small deployments).
func runID(ctx context.Context, c redis.UniversalClient) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return v, nil
		}
	}
	return "", errors.New("replica: INFO server has no run_id")
}

// write sends the deletions of changes, then the puts, in one pipeline
// each, several buckets per script call on a standalone Redis
// (redisscript.KeysPerCall). Both are idempotent (the script keeps the
// newer of two states), so a batch that failed half way is simply written
// again. A bucket Redis refuses by itself (its key holds another type, or
// the script rejects an argument) is counted and logged but not retried:
// it would fail again. A put refused for lack of memory (OOM) waits for
// room (see oomWait). Anything else (READONLY, timeouts) fails the write,
// which is then retried.
//
// The deletions go first and in script calls of their own because Redis
// at maxmemory refuses a script at its first write that needs memory, and
// never a DEL: a call of deletions only always runs, and frees memory.
func (r *Replicator) write(ctx context.Context, changes []shard.Change) error {
	r.inflight.Store(int64(len(changes)))
	defer r.inflight.Store(0)
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	if err := r.send(ctx, changes, true); err != nil {
		return err
	}
	return r.send(ctx, changes, false)
}

// send writes the deletions of changes (or, with deletions false, the
// puts) in one pipeline and sorts out the replies, as write says.
func (r *Replicator) send(ctx context.Context, changes []shard.Change, deletions bool) error {
	b := &r.batch
	b.Reset(r.cfg.Prefix)
	r.sent = r.sent[:0]
	for i := range changes {
		c := &changes[i]
		switch {
		case c.Deleted != deletions:
			continue
		case c.Deleted:
			b.AddString(c.Key, redisscript.Call{Op: redisscript.Del, At: c.At})
		default:
			b.AddString(c.Key, redisscript.Call{Op: redisscript.Put, Limit: c.Limit, State: c.State})
		}
		r.sent = append(r.sent, int32(i))
	}
	if len(r.sent) == 0 {
		return nil
	}
	b.Build(ctx, redisscript.KeysPerCall(r.cfg.Client))
	b.Send(ctx, r.cfg.Client)
	refused, oom := 0, 0
	var refusal, oomErr error
	for j := range r.sent {
		switch _, err := b.Reply(j); redisscript.Classify(err) {
		case redisscript.None:
		case redisscript.WrongType, redisscript.Invalid:
			refused, refusal = refused+1, err
		case redisscript.OOM:
			oom, oomErr = oom+1, err
		default:
			return fmt.Errorf("replica: %w", err)
		}
	}
	if oom > 0 {
		for j, i := range r.sent {
			if _, err := b.Reply(j); redisscript.Classify(err) == redisscript.OOM {
				r.wait(changes[i])
			}
		}
		r.outOfMemory(oom, oomErr)
	}
	if refused > 0 {
		r.refusedBuckets(refused, refusal)
	}
	r.applied.Add(int64(len(r.sent) - refused - oom))
	return nil
}

// lateWriteReconciles is how many reconciles follow a failed write.
const lateWriteReconciles = 2

// writeFailed prepares for late writes of the failed pipeline: the Fence
// kills its connection before the next write (when the connection broke,
// rather than Redis answering an error), and reconciles are due in case
// it cannot.
func (r *Replicator) writeFailed(err error) {
	r.reconciles = lateWriteReconciles
	if r.cfg.Fence != nil && !redisscript.IsReply(err) {
		r.cfg.Fence.abandon()
	}
}

// refusedBuckets counts buckets Redis refused and logs them, at most one
// line a second.
func (r *Replicator) refusedBuckets(n int, err error) {
	r.errs.Add(int64(n))
	if _, ok := r.refusalLog.Allow(time.Now()); ok {
		r.cfg.Logger.Warn("Redis refused to store buckets; they are not replicated until the cause is removed (a key of another type: delete it)",
			"buckets", n, "err", err, "prefix", r.cfg.Prefix)
	}
}

// failed counts and logs a Redis error, at most one line a second.
func (r *Replicator) failed(err error) error {
	r.errs.Add(1)
	r.failing = true
	if suppressed, ok := r.failLog.Allow(time.Now()); ok {
		r.cfg.Logger.Warn("replication to Redis failing; bucketd keeps deciding from memory and will retry",
			"err", err, "suppressed", suppressed)
	}
	return err
}

func (r *Replicator) recovered() {
	if r.failing {
		r.failing = false
		r.cfg.Logger.Info("replication to Redis recovered")
	}
}

// Stats returns the replication figures.
func (r *Replicator) Stats() Stats {
	st := r.cfg.Group.Stats()
	waiting := r.waitCount.Load()
	depth := st.ChangesPending + r.retrying.Load() + r.inflight.Load() + waiting
	lag := 0.0
	if depth > 0 {
		lag = time.Since(time.Unix(0, r.lastClean.Load())).Seconds()
	}
	return Stats{
		QueueDepth:    depth,
		QueueCapacity: int64(r.cfg.Capacity),
		LagSeconds:    lag,
		Applied:       r.applied.Load(),
		Dropped:       st.ChangesDropped,
		RedisErrors:   r.errs.Load(),
		Resyncs:       r.resyncs.Load(),
		OOMRefusals:   r.oom.Load(),
		OOMWaiting:    waiting,
	}
}

// Info returns the "# Replication" section of INFO.
func (r *Replicator) Info() info.Section {
	st := r.Stats()
	return info.Section{Title: "Replication", Fields: []info.Field{
		info.Text("bucketd_mode", "replicate"),
		info.Text("replicate_prefix", r.cfg.Prefix),
		info.Int("replicate_queue_depth", st.QueueDepth),
		info.Int("replicate_queue_capacity", st.QueueCapacity),
		info.Seconds("replicate_lag_seconds", st.LagSeconds),
		info.Int("replicate_applied_total", st.Applied),
		info.Int("replicate_dropped_total", st.Dropped),
		info.Int("replicate_errors_total", st.RedisErrors),
		info.Int("replicate_resyncs_total", st.Resyncs),
		info.Int("replicate_oom_refusals_total", st.OOMRefusals),
		info.Int("replicate_oom_waiting", st.OOMWaiting),
	}}
}

// LoadLater makes Run retry Load until it succeeds: for a start-up load that
// failed because Redis was down. Load never overwrites a key decided since
// the start, so a late load only fills in keys nobody asked about yet.
func (r *Replicator) LoadLater() { r.loadLater.Store(true) }

// reconcile deletes from Redis every bucket under the prefix that memory
// does not hold (or holds full). The deletions carry a timestamp just before
// the check, so a state memory writes after the check is never removed.
func (r *Replicator) reconcile(ctx context.Context) error {
	return r.scanKeys(ctx, func(ctx context.Context, c redis.UniversalClient, keys []string) error {
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = strings.TrimPrefix(k, r.cfg.Prefix)
		}
		checked := time.Now().UnixMicro() - 1
		live, err := r.cfg.Group.Live(names)
		if err != nil {
			return err
		}
		var stale []shard.Change
		for i, name := range names {
			if !live[i] {
				stale = append(stale, shard.Change{Key: name, Deleted: true, At: checked})
			}
		}
		if len(stale) == 0 {
			return nil
		}
		return r.write(ctx, stale)
	})
}

// scanKeys calls fn with batches of the keys under the prefix, on every
// master of a cluster.
func (r *Replicator) scanKeys(ctx context.Context, fn func(context.Context, redis.UniversalClient, []string) error) error {
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		iter := c.Scan(ctx, 0, r.cfg.Prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
			if len(keys) == 1000 {
				if err := fn(ctx, c, keys); err != nil {
					return err
				}
				keys = keys[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if len(keys) == 0 {
			return nil
		}
		return fn(ctx, c, keys)
	}
	if cc, ok := r.cfg.Client.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, c)
		})
	}
	return scan(ctx, r.cfg.Client)
}

// Load reads every bucket under the prefix from Redis into the shards, for
// keys this process has no state for yet, so that a restart does not hand
// every client a fresh burst. It returns the number of buckets loaded.
//
// Redis stores tokens and ts but not the limit; the next call brings the
// limit. Until then the sweeper must know when the bucket is full, which
// the key's PTTL says, so a loaded bucket gets a stand-in limit that
// refills it exactly when Redis would expire it.
//
// What no command could have left is held to what they allow, as a
// snapshot's buckets are: a ts later than the load instant (a host whose
// clock was ahead wrote it, or this clock stepped back) is taken as the
// load instant, since a bucket never refills before its last call and
// would otherwise stay as it is, answering retry_after_ms it does not
// keep, until the clock got there; tokens above bucket.MaxValue, which no
// capacity allows, and keys longer than MaxKeyBytes, which every command
// refuses, are not loaded.
func (r *Replicator) Load(ctx context.Context) (int, error) {
	loaded := 0
	err := r.scanKeys(ctx, func(ctx context.Context, c redis.UniversalClient, keys []string) error {
		n, err := r.loadKeys(ctx, c, keys)
		loaded += n
		return err
	})
	if err != nil {
		return loaded, fmt.Errorf("replica: loading state from Redis: %w", err)
	}
	return loaded, nil
}

func (r *Replicator) loadKeys(ctx context.Context, c redis.UniversalClient, keys []string) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.HMGet(ctx, k, "tokens", "ts")
			p.PTTL(ctx, k)
		}
		return nil
	})
	now := r.now().UnixMicro()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	recs := make([]shard.Record, 0, len(keys))
	for i, k := range keys {
		vals, err1 := cmds[2*i].(*redis.SliceCmd).Result()
		pttl, err2 := cmds[2*i+1].(*redis.DurationCmd).Result()
		if err1 != nil || err2 != nil || len(vals) != 2 || pttl <= 0 {
			continue // gone, not a bucket, or without expiry: not ours
		}
		tokens, ok1 := parseFloat(vals[0])
		ts, ok2 := parseInt(vals[1])
		key := strings.TrimPrefix(k, r.cfg.Prefix)
		if !ok1 || !ok2 || tokens > bucket.MaxValue || (r.cfg.MaxKeyBytes > 0 && len(key) > r.cfg.MaxKeyBytes) {
			continue
		}
		recs = append(recs, standIn(key, tokens, min(ts, now), now, pttl))
	}
	return r.cfg.Group.Restore(recs)
}

// standIn is the record of a bucket loaded from Redis, with tokens at its
// last call ts (at or before now) and pttl left before Redis expires it:
// its stand-in limit is within what the commands allow and fills the
// bucket exactly when Redis would expire it (a bucket at bucket.MaxValue
// tokens is full already, and Restore leaves it out).
func standIn(key string, tokens float64, ts, now int64, pttl time.Duration) shard.Record {
	untilFull := float64(now-ts)/1e6 + pttl.Seconds()
	capacity := math.Min(tokens+1, bucket.MaxValue)
	return shard.Record{
		Key:   key,
		State: bucket.State{Tokens: tokens, Last: ts},
		Limit: bucket.Limit{Capacity: capacity, Rate: math.Max((capacity-tokens)/untilFull, math.SmallestNonzeroFloat64)},
	}
}

func (r *Replicator) now() time.Time {
	if r.cfg.Now == nil {
		return time.Now()
	}
	return r.cfg.Now()
}

func parseFloat(v any) (float64, bool) {
	s, ok := v.(string)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) && f >= 0
}

func parseInt(v any) (int64, bool) {
	s, ok := v.(string)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
