package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"

	"github.com/bucketd/bucketd/internal/config"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/info"
	"github.com/bucketd/bucketd/internal/lease"
	"github.com/bucketd/bucketd/internal/leasestore"
	"github.com/bucketd/bucketd/internal/metrics"
	"github.com/bucketd/bucketd/internal/shard"
)

// leases is lease mode (--leases): store mode's Redis keeps every bucket,
// and this instance answers most TB.ACQUIREs from leases of tokens it
// holds in its shards' memory (internal/leasestore). It is store mode plus
// the lease shards: the Redis client, its connections and its start are
// store mode's.
type leases struct {
	*store
	lstore *leasestore.Store
	nshard int
}

// openLeases opens store mode's Redis under a new instance id, then the
// lease shards and their renewer over it.
func openLeases(ctx context.Context, cfg config.Config, logger *slog.Logger) (*leases, error) {
	s, err := openStore(ctx, cfg, logger, newInstanceID())
	if err != nil {
		return nil, err
	}
	ls := leasestore.New(leasestore.Config{
		Shards: shard.Config{Shards: cfg.Shards},
		Redis:  s.store,
		Policy: leasePolicy(cfg),
	})
	return &leases{store: s, lstore: ls, nshard: cfg.Shards}, nil
}

// leasePolicy is lease.Policy from the settings (docs/configuration.md):
// an instance stops spending a quarter of the TTL before Redis may let the
// lease lapse, gives an unused lease back after half of it, and renews
// ahead of need when a quarter of the lease is left.
func leasePolicy(cfg config.Config) lease.Policy {
	ttl := cfg.LeaseTTL.Microseconds()
	return lease.Policy{
		Target:     cfg.LeaseTarget.Microseconds(),
		MaxShare:   cfg.LeaseMaxShare,
		TTL:        ttl,
		Margin:     ttl / 4,
		Idle:       ttl / 2,
		RenewBelow: 0.25,
	}
}

// newInstanceID names this process's lease records in Redis: new at every
// start, so a restarted instance never takes the records of its previous
// life for its own (they lapse after --lease-ttl).
func newInstanceID() string {
	var b [6]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b[:])
}

func (l *leases) name() string            { return "leases" }
func (l *leases) limiter() decide.Limiter { return l.lstore }
func (l *leases) shards() int             { return l.nshard }
func (l *leases) info() []func() info.Section {
	return []func() info.Section{l.store.store.Info, l.lstore.Info}
}

func (l *leases) addMetrics(src *metrics.Sources) {
	l.store.addMetrics(src)
	src.Leases = l.lstore.LeaseStats
}

// finish gives every lease back to Redis (within --redis-timeout), so the
// other instances can use those tokens at once.
func (l *leases) finish(context.Context) error {
	l.lstore.Close()
	return nil
}

func (l *leases) close() {
	l.lstore.Close()
	l.store.close()
}
