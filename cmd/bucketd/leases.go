package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"time"

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
// ahead of need as renewBelow says.
func leasePolicy(cfg config.Config) lease.Policy {
	ttl := cfg.LeaseTTL.Microseconds()
	return lease.Policy{
		Target:     cfg.LeaseTarget.Microseconds(),
		MaxShare:   cfg.LeaseMaxShare,
		TTL:        ttl,
		Margin:     ttl / 4,
		Idle:       ttl / 2,
		RenewBelow: renewBelow(cfg.LeaseTarget),
	}
}

// renewAhead is how much of a key's demand a lease still holds, in time,
// when it is renewed ahead of need: far more than a renewal takes (a round
// trip and the renewer's gathering, at most 10 ms), so a steady key does
// not run dry while it is out.
const renewAhead = 100 * time.Millisecond

// renewBelow is the share of a lease left when it is renewed: renewAhead's
// worth of the target, between a tenth and a quarter. Every renewal of a
// steady key is a Redis call that brings 1 - renewBelow of a lease, so a
// long target renews at a tenth (the default 1s: 0.9 of a lease per call
// instead of 0.75, a sixth fewer calls; docs/benchmarks.md), while a short
// one keeps a quarter, the share it had always renewed at.
func renewBelow(target time.Duration) float64 {
	return min(0.25, max(0.1, float64(renewAhead)/float64(max(target, 1))))
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
