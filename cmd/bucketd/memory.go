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
	"github.com/bucketd/bucketd/internal/replica"
	"github.com/bucketd/bucketd/internal/shard"
	"github.com/bucketd/bucketd/internal/snapshot"
)

// replicateLoadBound is how long a replicating bucketd waits, at start,
// for its state from Redis before it serves anyway.
const replicateLoadBound = 60 * time.Second

// memory is the memory mode: the buckets in the shards, with a snapshot
// keeper (--data-dir) and a replicator (--replicate, the replicate mode)
// when configured.
type memory struct {
	group     *shard.Group
	keeper    *snapshot.Keeper    // nil without --data-dir
	rep       *replica.Replicator // nil without --replicate
	sentinels int                 // the Sentinels of --replicate's URL; 0 without
}

// openMemory starts the shards and restores the snapshot, if any. The
// Redis copy of --replicate is loaded later (load), once /readyz can say
// "not ready" meanwhile.
func openMemory(ctx context.Context, cfg config.Config, logger *slog.Logger) (*memory, error) {
	groupCfg := shard.Config{Shards: cfg.Shards, MaxBuckets: cfg.MaxBuckets}
	if cfg.Replicate != "" {
		groupCfg.TrackChanges = cfg.ReplicateQueue
	}
	m := &memory{group: shard.New(groupCfg)}
	if cfg.DataDir != "" {
		m.keeper = &snapshot.Keeper{Dir: cfg.DataDir, Group: m.group, Logger: logger, MaxKeyBytes: cfg.MaxKeyBytes}
		if err := m.keeper.Restore(ctx, cfg.IgnoreCorruptSnapshot); err != nil {
			m.close()
			return nil, err
		}
	}
	if cfg.Replicate != "" {
		rep, err := replica.Dial(cfg.Replicate, replica.Config{
			Group:       m.group,
			Prefix:      cfg.ReplicatePrefix,
			Capacity:    cfg.ReplicateQueue,
			Interval:    cfg.ReplicateInterval,
			Logger:      logger,
			MaxKeyBytes: cfg.MaxKeyBytes,
		})
		if err != nil {
			m.close()
			return nil, fmt.Errorf("--replicate: %w", err)
		}
		m.rep, m.sentinels = rep, sentinelCount(cfg.Replicate)
	}
	return m, nil
}

func (m *memory) name() string {
	if m.rep != nil {
		return "replicate"
	}
	return "memory"
}

func (m *memory) limiter() decide.Limiter { return m.group.Limiter() }
func (m *memory) shards() int             { return m.group.Len() }

func (m *memory) info() []func() info.Section {
	if m.rep == nil {
		return nil
	}
	return []func() info.Section{m.rep.Info}
}

// addMetrics adds the shard queues, and replication and snapshots when
// they run.
func (m *memory) addMetrics(src *metrics.Sources) {
	src.QueueDepths = m.group.QueueDepths
	if m.rep != nil {
		src.Replication = m.rep.Stats
	}
	if m.keeper != nil {
		src.Snapshot = m.keeper.Stats
	}
}

// redisConns is the replicator's one connection and its pipeline pool,
// and through Sentinel what the failover client adds.
func (m *memory) redisConns() int {
	if m.rep == nil {
		return 0
	}
	return poolConns(1, 0) + sentinelConns(1, m.sentinels)
}

// load takes the replicated state back from Redis before bucketd answers
// anyone.
func (m *memory) load(ctx context.Context) error {
	if m.rep == nil {
		return nil
	}
	return m.rep.LoadAtStart(ctx, replicateLoadBound)
}

func (m *memory) start(bg *background, cfg config.Config) {
	if m.rep != nil {
		bg.run(m.rep.Run)
	}
	if m.keeper != nil {
		bg.run(func(ctx context.Context) { m.keeper.Run(ctx, cfg.SnapshotInterval) })
	}
}

// finish writes the replication's last changes to Redis, then the final
// snapshot, then stops the shards, which answer what is queued.
func (m *memory) finish(ctx context.Context) error {
	if m.rep != nil {
		m.rep.FlushAtExit(ctx)
	}
	var err error
	if m.keeper != nil {
		err = m.keeper.Final()
	}
	m.group.Close()
	return err
}

func (m *memory) close() { m.group.Close() }
