package main

import (
	"context"
	"log/slog"

	"github.com/bucketd/bucketd/internal/config"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/info"
	"github.com/bucketd/bucketd/internal/metrics"
	"github.com/bucketd/bucketd/internal/redisurl"
	"github.com/redis/go-redis/v9"
)

// mode is where the buckets live, and everything that comes with that
// place: the store the protocol front decides with, the parts that show in
// INFO and the metrics, the connections to Redis it opens, what it loads
// before serving, runs while serving and does at shutdown. One type per
// mode (memory.go: the shards, with snapshots and replication when
// configured; store.go: Redis); the daemon knows only this interface, so a
// new mode is one type, and a mode that lacks a part does not compile.
type mode interface {
	// name is the mode as the listening line says it: memory, replicate,
	// store or leases.
	name() string
	// limiter is the store the commands decide with.
	limiter() decide.Limiter
	// shards is the number of shards, 0 when the mode keeps no buckets
	// in bucketd's memory.
	shards() int
	// info returns the INFO sections of its parts; each part formats its
	// own.
	info() []func() info.Section
	// addMetrics fills in the metrics sources of the parts it has; the
	// metrics of a part it lacks are not exported at all.
	addMetrics(src *metrics.Sources)
	// redisConns is how many connections to Redis it may open, for the
	// descriptors resp.FitMaxClients keeps.
	redisConns() int
	// load runs once before serving, while /readyz says not ready: the
	// replicate mode's state from Redis, so that a restart hands no client
	// a fresh burst. It returns ctx's error when interrupted.
	load(ctx context.Context) error
	// start starts, with bg.run, the goroutines the mode runs while
	// serving (replication, periodic snapshots); bg.stop ends them.
	start(bg *background, cfg config.Config)
	// finish is the mode's part of the shutdown, once nothing decides any
	// more and the goroutines of start have returned: the last changes to
	// Redis, the final snapshot, then the shards. A failed final snapshot
	// is its error, saying what is lost: the process must not exit 0 then.
	finish(ctx context.Context) error
	// close releases what openMode built; after finish it is a no-op.
	close()
}

// openMode builds the mode cfg asks for and restores what it keeps on
// disk, if anything.
func openMode(ctx context.Context, cfg config.Config, logger *slog.Logger) (mode, error) {
	if cfg.StoreMode() && cfg.Leases {
		l, err := openLeases(ctx, cfg, logger)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	if cfg.StoreMode() {
		s, err := openStore(ctx, cfg, logger, "")
		if err != nil {
			return nil, err // not a mode holding a nil *store
		}
		return s, nil
	}
	m, err := openMemory(ctx, cfg, logger)
	if err != nil {
		return nil, err
	}
	return m, nil
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

// poolConns is what a go-redis client with these pool sizes may open: its
// pool and its pipeline pool (go-redis's default for 0, none when
// negative).
func poolConns(pool, pipeline int) int {
	switch {
	case pipeline < 0:
		return pool
	case pipeline == 0:
		return pool + redis.DefaultPipelinePoolSize
	}
	return pool + pipeline
}

// sentinelConns is what go-redis's failover client adds through n
// Sentinels: its Sentinel client's pool (as large as its own pool, pool),
// a subscription, and a connection to each Sentinel while it looks for
// the master.
func sentinelConns(pool, n int) int {
	if n == 0 {
		return 0
	}
	return pool + 1 + n
}
