package replica

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/redisurl"
)

// Dial returns a Replicator that copies to the Redis at url (redis:// or
// rediss://, as --replicate takes it, or redis-sentinel:// for the master
// that Redis Sentinel names: see redisurl), with the client the replicator
// needs: it never retries on its own (the replicator retries whole batches
// with backoff), its socket waits end with the replicator's per-pipeline
// timeout, and it is fenced (see Fence) on its one connection: the
// replicator writes one pipeline at a time, and a single connection keeps
// the fence's kills few. cfg.Client and cfg.Fence are set here; the other
// fields are New's. An error comes from parsing url or from New.
func Dial(url string, cfg Config) (*Replicator, error) {
	fence := &Fence{}
	client, err := newClient(url, fence)
	if err != nil {
		return nil, err
	}
	cfg.Fence = fence
	cfg.Client = client
	return New(cfg)
}

// newClient builds Dial's client. Through Sentinel it is go-redis's
// failover client: it asks the Sentinels for the master at every new
// connection and drops its connections when they announce a new master
// (+switch-master). The replicator needs nothing more to follow a
// failover: the write that fails is retried on the new master, the Fence
// finds nothing to kill there (the old connections were to the old
// master), and the new master's run_id makes checkRestart re-send the
// whole state, which covers the writes the old master had not passed on
// to its replica. The failover client runs OnConnect on its connections to
// the Sentinels as well; naming them is harmless (a Sentinel that refused
// CLIENT SETNAME would turn fencing off, as such a Redis does).
func newClient(url string, fence *Fence) (*redis.Client, error) {
	if redisurl.IsSentinel(url) {
		opts, err := redisurl.Failover(url)
		if err != nil {
			return nil, err
		}
		opts.MaxRetries = -1
		opts.ContextTimeoutEnabled = true
		opts.OnConnect = fence.OnConnect
		opts.PoolSize = 1
		return redis.NewFailoverClient(opts), nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opts.MaxRetries = -1
	opts.ContextTimeoutEnabled = true
	opts.OnConnect = fence.OnConnect
	opts.PoolSize = 1
	return redis.NewClient(opts), nil
}

// LoadAtStart is the start-up policy: take the bucket state back from
// Redis before anyone is answered, so a restart does not hand every client
// a fresh burst, but wait at most bound (or until ctx ends). When the load
// fails, bucketd serves anyway (keys not loaded start full) and Run retries
// the load in the background (LoadLater). It logs the outcome.
//
// When ctx ends first (SIGINT or SIGTERM during the start) it abandons the
// load at once and returns an error wrapping ctx's; the Replicator must
// not be used after that. It closes the client to do so: go-redis ends a
// read that waits for Redis at its deadline, not when the context is
// cancelled.
func (r *Replicator) LoadAtStart(ctx context.Context, bound time.Duration) error {
	loadCtx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	closed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(closed)
		r.cfg.Client.Close() //nolint:errcheck // abandoning the load; its error says enough
	})
	defer func() {
		if !stop() {
			<-closed
		}
	}()
	start := time.Now()
	n, err := r.Load(loadCtx)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("loading bucket state from Redis: %w", ctx.Err())
	case err != nil:
		r.cfg.Logger.Error("could not load bucket state from Redis; serving anyway (keys not loaded start full) and retrying the load in the background",
			"loaded", n, "err", err)
		r.LoadLater()
	default:
		r.cfg.Logger.Info("loaded bucket state from Redis", "buckets", n, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// FlushAtExit is the shutdown step: write the last changes to Redis within
// ctx and log the outcome. Call it after Run has returned and once nothing
// decides any more, so that nothing changes after it.
func (r *Replicator) FlushAtExit(ctx context.Context) {
	if err := r.Flush(ctx); err != nil {
		r.cfg.Logger.Warn("replication could not flush every change before exit", "err", err)
		return
	}
	r.cfg.Logger.Info("replication flushed")
}
