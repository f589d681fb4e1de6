package snapshot

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/shard"
)

// FileName is the snapshot's name inside the data directory.
const FileName = "buckets.snapshot"

// Keeper snapshots a shard.Group into a data directory and restores it.
type Keeper struct {
	Dir   string
	Group *shard.Group
	// OffsetMicros turns the shards' clock into Unix microseconds:
	// unix = shard time + OffsetMicros.
	OffsetMicros int64
	Logger       *slog.Logger
}

// Path is the snapshot file.
func (k *Keeper) Path() string { return filepath.Join(k.Dir, FileName) }

// Load restores the snapshot into the shards, skipping buckets that have
// refilled during the downtime (they would be full, which is the same as
// absent). A missing file loads nothing and is no error; a corrupt one is
// an error wrapping ErrCorrupt.
func (k *Keeper) Load() (loaded int, err error) {
	now := time.Now().UnixMicro() - k.OffsetMicros
	caller := k.Group.NewCaller()
	pending := 0
	flush := func() {
		if pending > 0 && err == nil {
			_, err = caller.Run()
			pending = 0
		}
	}
	_, _, rerr := Read(k.Path(), func(r Record) {
		op := shard.Op{Kind: shard.Load, Key: []byte(r.Key), LoadGCRA: r.GCRA}
		if r.GCRA {
			op.State = bucket.State{Last: r.Last - k.OffsetMicros*1000}
			if op.State.Last <= now*1000 {
				return
			}
		} else {
			op.State = bucket.State{Tokens: r.Tokens, Last: r.Last - k.OffsetMicros}
			op.Limit = bucket.Limit{Capacity: r.Capacity, Rate: r.Rate}
			if op.State.IsFull(op.Limit, now) {
				return
			}
		}
		caller.Add(op)
		loaded++
		if pending++; pending == 4096 {
			flush()
		}
	})
	flush()
	if rerr != nil {
		return 0, rerr
	}
	return loaded, err
}

// Save writes a snapshot of every live bucket.
func (k *Keeper) Save() (int, error) {
	var all []shard.Change
	for i := range k.Group.Len() {
		var err error
		if all, err = k.Group.Dump(i, all); err != nil {
			return 0, err
		}
	}
	i := 0
	return Write(k.Path(), time.Now().UnixMicro(), func() (Record, bool) {
		if i == len(all) {
			return Record{}, false
		}
		c := &all[i]
		i++
		if c.GCRA {
			return Record{Key: c.Key, GCRA: true, Last: c.State.Last + k.OffsetMicros*1000}, true
		}
		return Record{Key: c.Key, Tokens: c.State.Tokens, Capacity: c.Limit.Capacity, Rate: c.Limit.Rate, Last: c.State.Last + k.OffsetMicros}, true
	})
}

// Run saves a snapshot every interval until ctx ends; failures are logged.
func (k *Keeper) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			start := time.Now()
			n, err := k.Save()
			if err != nil {
				k.Logger.Error("snapshot failed; the previous one stays", "path", k.Path(), "err", err)
				continue
			}
			k.Logger.Debug("snapshot written", "path", k.Path(), "buckets", n, "took", time.Since(start).Round(time.Millisecond))
		}
	}
}
