package main

import (
	"github.com/bucketd/bucketd/internal/decide"

	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/bucketd/bucketd/internal/config"
	"github.com/bucketd/bucketd/internal/info"
	"github.com/bucketd/bucketd/internal/metrics"
	"github.com/bucketd/bucketd/internal/redisstore"
	"github.com/bucketd/bucketd/internal/redisurl"
	"github.com/bucketd/bucketd/internal/replica"
	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/resp/command"
	"github.com/bucketd/bucketd/internal/shard"
	"github.com/bucketd/bucketd/internal/snapshot"
	"github.com/redis/go-redis/v9"
)

// buckets is where the buckets live in the configured mode: the shards in
// memory, with a snapshot keeper (--data-dir) and a replicator
// (--replicate) when configured; or, in store mode, Redis, with no shards
// at all. Exactly one of group and store is set.
type buckets struct {
	mode    string // "memory", "replicate" or "store", for the listening line
	limiter decide.Limiter

	group  *shard.Group        // memory and replicate modes
	keeper *snapshot.Keeper    // with --data-dir
	rep    *replica.Replicator // with --replicate

	store  *redisstore.Store     // store mode
	client redis.UniversalClient // store mode: the store's client, closed after it

	sentinels int // the Sentinels of a redis-sentinel:// URL (either mode); 0 without
}

// openBuckets builds the buckets cfg's mode asks for and restores the
// snapshot, if any. The Redis copy of --replicate is loaded later, once
// /readyz can say "not ready" meanwhile (daemon.serve).
func openBuckets(ctx context.Context, cfg config.Config, logger *slog.Logger) (*buckets, error) {
	if cfg.StoreMode() {
		return openStore(ctx, cfg, logger)
	}
	return openMemory(ctx, cfg, logger)
}

func openMemory(ctx context.Context, cfg config.Config, logger *slog.Logger) (*buckets, error) {
	groupCfg := shard.Config{Shards: cfg.Shards, MaxBuckets: cfg.MaxBuckets}
	if cfg.Replicate != "" {
		groupCfg.TrackChanges = cfg.ReplicateQueue
	}
	b := &buckets{mode: "memory", group: shard.New(groupCfg)}
	b.limiter = b.group.Limiter()
	if cfg.DataDir != "" {
		b.keeper = &snapshot.Keeper{Dir: cfg.DataDir, Group: b.group, Logger: logger, MaxKeyBytes: cfg.MaxKeyBytes}
		if err := b.keeper.Restore(ctx, cfg.IgnoreCorruptSnapshot); err != nil {
			b.close()
			return nil, err
		}
	}
	if cfg.Replicate != "" {
		rep, err := replica.Dial(cfg.Replicate, replica.Config{
			Group:    b.group,
			Prefix:   cfg.ReplicatePrefix,
			Capacity: cfg.ReplicateQueue,
			Interval: cfg.ReplicateInterval,
			Logger:   logger,

			MaxKeyBytes: cfg.MaxKeyBytes,
		})
		if err != nil {
			b.close()
			return nil, fmt.Errorf("--replicate: %w", err)
		}
		b.rep, b.mode, b.sentinels = rep, "replicate", sentinelCount(cfg.Replicate)
	}
	return b, nil
}

// scriptLoadBound bounds the start-up SCRIPT LOAD of store mode; the
// script is loaded on first use when Redis is not there yet.
const scriptLoadBound = 5 * time.Second

func openStore(ctx context.Context, cfg config.Config, logger *slog.Logger) (*buckets, error) {
	client, err := newStoreClient(cfg)
	if err != nil {
		return nil, err
	}
	store, err := redisstore.New(redisstore.Config{
		Client:   client,
		Prefix:   cfg.ReplicatePrefix,
		Timeout:  cfg.RedisTimeout,
		FailOpen: cfg.OnRedisError == "allow",
		Logger:   logger,
	})
	if err != nil {
		client.Close() //nolint:errcheck // the start failed already; err says why
		return nil, err
	}
	loadCtx, cancel := context.WithTimeout(ctx, scriptLoadBound)
	defer cancel()
	if err := store.LoadScript(loadCtx); err != nil {
		logger.Warn("could not load the script into Redis yet; it is loaded on first use", "err", err)
	}
	return &buckets{mode: "store", limiter: store, store: store, client: client, sentinels: sentinelCount(cfg.Store)}, nil
}

// sentinelCount is the number of Sentinels a redis-sentinel:// URL lists,
// 0 for any other URL.
func sentinelCount(url string) int {
	if !redisurl.IsSentinel(url) {
		return 0
	}
	o, err := redisurl.Failover(url)
	if err != nil {
		return 0 // not reached: the client was built from this URL
	}
	return len(o.SentinelAddrs)
}

// newStoreClient connects store mode's Redis with the options the store
// requires: no automatic retries (a timed-out call must never be replayed)
// and context deadlines honoured. A redis-sentinel:// URL gets go-redis's
// failover client, which follows the master the Sentinels name.
func newStoreClient(cfg config.Config) (redis.UniversalClient, error) {
	if len(cfg.StoreCluster) > 0 {
		return redis.NewClusterClient(redisstore.ClusterClientOptions(cfg.StoreCluster)), nil
	}
	if redisurl.IsSentinel(cfg.Store) {
		opts, err := redisstore.FailoverOptions(cfg.Store)
		if err != nil {
			return nil, fmt.Errorf("--store: %w", err)
		}
		return redis.NewFailoverClient(opts), nil
	}
	opts, err := redisstore.ClientOptions(cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("--store: %w", err)
	}
	return redis.NewClient(opts), nil
}

// shards is the number of shards: 0 in store mode, which has none.
func (b *buckets) shards() int {
	if b.group == nil {
		return 0
	}
	return b.group.Len()
}

// info returns the INFO sections of the parts that have one; each part
// formats its own.
func (b *buckets) info() []func() info.Section {
	var sections []func() info.Section
	if b.rep != nil {
		sections = append(sections, b.rep.Info)
	}
	if b.store != nil {
		sections = append(sections, b.store.Info)
	}
	return sections
}

// metricSources are the metrics of the parts that exist in this mode:
// shard queues only with shards, replication only when replicating,
// snapshots only with --data-dir, Redis failures only in store mode.
func (b *buckets) metricSources(conns func() resp.Stats, cmds func() command.Stats) metrics.Sources {
	src := metrics.Sources{Buckets: b.limiter.Stats, Connections: conns, Commands: cmds}
	if b.group != nil {
		src.QueueDepths = b.group.QueueDepths
	}
	if b.rep != nil {
		src.Replication = b.rep.Stats
	}
	if b.keeper != nil {
		src.Snapshot = b.keeper.Stats
	}
	if b.store != nil {
		src.Store = b.store.RedisStats
	}
	return src
}

// finish is the buckets' part of the shutdown: the replication's last
// changes to Redis, then the final snapshot, then the shards, which answer
// what is queued and stop. Call it once nothing decides any more and the
// replicator's and keeper's Run have returned. A failed final snapshot is
// its error, saying what is lost: the process must not exit 0 then.
func (b *buckets) finish(ctx context.Context) error {
	if b.rep != nil {
		b.rep.FlushAtExit(ctx)
	}
	var err error
	if b.keeper != nil {
		err = b.keeper.Final()
	}
	if b.group != nil {
		b.group.Close()
	}
	return err
}

// close releases what openBuckets built; calling it after finish is fine.
func (b *buckets) close() {
	if b.group != nil {
		b.group.Close()
	}
	if b.store != nil {
		b.store.Close()
		b.client.Close() //nolint:errcheck // at exit; a close error changes nothing
	}
}
