package snapshot

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/bucketd/bucketd/internal/shard"
)

// FileName is the snapshot's name inside the data directory.
const FileName = "buckets.snapshot"

// Keeper snapshots a shard.Group into a data directory and restores it.
type Keeper struct {
	Dir    string
	Group  *shard.Group
	Logger *slog.Logger
}

// Path is the snapshot file.
func (k *Keeper) Path() string { return filepath.Join(k.Dir, FileName) }

// restoreChunk is how many records Load hands the shards at a time.
const restoreChunk = 4096

// Load restores the snapshot into the shards, leaving out buckets that
// have refilled during the downtime (they would be full, which is the same
// as absent). It returns how many buckets it stored. A missing file is an
// error for which errors.Is(err, os.ErrNotExist) holds; a corrupt one wraps
// ErrCorrupt, and nothing of it is loaded.
func (k *Keeper) Load() (loaded int, err error) {
	chunk := make([]shard.Record, 0, restoreChunk)
	flush := func() {
		if len(chunk) > 0 && err == nil {
			var n int
			n, err = k.Group.Restore(chunk)
			loaded += n
			chunk = chunk[:0]
		}
	}
	_, _, rerr := Read(k.Path(), func(r shard.Record) {
		if chunk = append(chunk, r); len(chunk) == restoreChunk {
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
	var all []shard.Record
	for i := range k.Group.Len() {
		var err error
		if all, err = k.Group.Dump(i, all); err != nil {
			return 0, err
		}
	}
	i := 0
	return Write(k.Path(), time.Now().UnixMicro(), func() (shard.Record, bool) {
		if i == len(all) {
			return shard.Record{}, false
		}
		i++
		return all[i-1], true
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
