package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/bucketd/bucketd/internal/config"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/info"
	"github.com/bucketd/bucketd/internal/metrics"
	"github.com/bucketd/bucketd/internal/redisstore"
	"github.com/bucketd/bucketd/internal/redisurl"
	"github.com/redis/go-redis/v9"
)

// scriptLoadBound bounds the start-up SCRIPT LOAD of store mode; the
// script is loaded on first use when Redis is not there yet.
const scriptLoadBound = 5 * time.Second

// store is the store mode: Redis decides (--store, --store-cluster); no
// shards, nothing kept in bucketd's memory.
type store struct {
	store     *redisstore.Store
	client    redis.UniversalClient // the store's client, closed after it
	sentinels int                   // the Sentinels of --store's URL; 0 without
}

// openStore connects to Redis; instance, when not "", is lease mode's
// instance id, under which the Redis store names this process's lease
// records.
func openStore(ctx context.Context, cfg config.Config, logger *slog.Logger, instance string) (*store, error) {
	client, err := newStoreClient(cfg)
	if err != nil {
		return nil, err
	}
	rs, err := redisstore.New(redisstore.Config{
		Client:   client,
		Prefix:   cfg.ReplicatePrefix,
		Timeout:  cfg.RedisTimeout,
		FailOpen: cfg.OnRedisError == "allow",
		Logger:   logger,
		Instance: instance,
		LeaseTTL: cfg.LeaseTTL,
	})
	if err != nil {
		client.Close() //nolint:errcheck // the start failed already; err says why
		return nil, err
	}
	loadCtx, cancel := context.WithTimeout(ctx, scriptLoadBound)
	defer cancel()
	if err := rs.LoadScript(loadCtx); err != nil {
		logger.Warn("could not load the script into Redis yet; it is loaded on first use", "err", err)
	}
	return &store{store: rs, client: client, sentinels: sentinelCount(cfg.Store)}, nil
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

func (s *store) name() string                     { return "store" }
func (s *store) limiter() decide.Limiter          { return s.store }
func (s *store) shards() int                      { return 0 }
func (s *store) info() []func() info.Section      { return []func() info.Section{s.store.Info} }
func (s *store) addMetrics(src *metrics.Sources)  { src.Store = s.store.RedisStats }
func (s *store) load(context.Context) error       { return nil }
func (s *store) start(*background, config.Config) {}

// redisConns is the client's pool and pipeline pool (per seed node of a
// cluster, a lower bound when the cluster has more masters), and through
// Sentinel what the failover client adds.
func (s *store) redisConns() int {
	switch c := s.client.(type) {
	case *redis.Client:
		o := c.Options()
		return poolConns(o.PoolSize, o.PipelinePoolSize) + sentinelConns(o.PoolSize, s.sentinels)
	case *redis.ClusterClient:
		o := c.Options()
		return poolConns(o.PoolSize, o.PipelinePoolSize) * len(o.Addrs)
	}
	return 0
}

func (s *store) finish(context.Context) error { return nil }

func (s *store) close() {
	s.store.Close()
	s.client.Close() //nolint:errcheck // at exit; a close error changes nothing
}
