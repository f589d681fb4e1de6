package replica

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Dial returns a Replicator that copies to the Redis at url (redis:// or
// rediss://, as --replicate takes it), with the client the replicator
// needs: it never retries on its own (the replicator retries whole batches
// with backoff), its socket waits end with the replicator's per-pipeline
// timeout, and it is fenced (see Fence) on its one connection: the
// replicator writes one pipeline at a time, and a single connection keeps
// the fence's kills few. cfg.Client and cfg.Fence are set here; the other
// fields are New's. An error comes from parsing url or from New.
func Dial(url string, cfg Config) (*Replicator, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opts.MaxRetries = -1
	opts.ContextTimeoutEnabled = true
	fence := &Fence{}
	opts.OnConnect = fence.OnConnect
	opts.PoolSize = 1
	cfg.Fence = fence
	cfg.Client = redis.NewClient(opts)
	return New(cfg)
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
