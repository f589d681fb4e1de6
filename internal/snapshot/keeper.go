package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/bucketd/bucketd/internal/shard"
)

// FileName is the snapshot's name inside the data directory.
const FileName = "buckets.snapshot"

// Keeper snapshots a shard.Group into a data directory and restores it:
// Restore at start, Run for the periodic snapshots, Final at shutdown.
// Its methods are safe for concurrent use. Set the exported fields before
// the first call and do not copy a Keeper after it.
type Keeper struct {
	Dir    string
	Group  *shard.Group
	Logger *slog.Logger // (slog.Default())

	// mu makes each Save one step, from reading the shards to the rename:
	// two Saves never overlap, so the renames land in the order the
	// shards were read, and an older state never replaces a newer one.
	mu sync.Mutex
	// write is Write; tests slow it down to make Saves meet.
	write func(path string, takenUnixMicros int64, next func() (shard.Record, bool)) (int, error)
}

// Path is the snapshot file.
func (k *Keeper) Path() string { return filepath.Join(k.Dir, FileName) }

func (k *Keeper) logger() *slog.Logger {
	if k.Logger == nil {
		return slog.Default()
	}
	return k.Logger
}

// restoreChunk is how many records Load hands the shards at a time.
const restoreChunk = 4096

// Restore is the start-up policy: it creates Dir if needed and loads the
// snapshot in it, logging what it found. No snapshot yet means no buckets.
// A corrupt or truncated snapshot stops the start with an error, because
// starting empty would hand every client a fresh burst, unless
// ignoreCorrupt (--ignore-corrupt-snapshot) says to start empty; the next
// snapshot then overwrites the file. When ctx ends first (a signal during
// the start) it stops loading and returns an error wrapping ctx's: the
// shards then hold part of the snapshot, and must not be served or saved.
func (k *Keeper) Restore(ctx context.Context, ignoreCorrupt bool) error {
	if err := os.MkdirAll(k.Dir, 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	start := time.Now()
	n, err := k.Load(ctx)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("loading the snapshot %s: %w", k.Path(), ctx.Err())
	case errors.Is(err, os.ErrNotExist):
		k.logger().Info("no snapshot yet; starting with no buckets", "path", k.Path())
	case errors.Is(err, ErrCorrupt) && ignoreCorrupt:
		k.logger().Warn("snapshot is corrupt; starting with no buckets as --ignore-corrupt-snapshot says (the file is overwritten by the next snapshot)", "err", err)
	case err != nil:
		return fmt.Errorf("%w; refusing to start with a fresh burst for every client: fix or remove the file, or start with --ignore-corrupt-snapshot to start with no buckets", err)
	default:
		k.logger().Info("loaded snapshot", "path", k.Path(), "buckets", n, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// Load restores the snapshot into the shards, leaving out buckets that
// have refilled during the downtime (they would be full, which is the same
// as absent). It returns how many buckets it stored. A missing file is an
// error for which errors.Is(err, os.ErrNotExist) holds; a corrupt one wraps
// ErrCorrupt, and nothing of it is loaded. Once ctx ends it hands the
// shards nothing more and returns ctx's error.
func (k *Keeper) Load(ctx context.Context) (loaded int, err error) {
	chunk := make([]shard.Record, 0, restoreChunk)
	flush := func() {
		if err == nil {
			err = ctx.Err()
		}
		if len(chunk) > 0 && err == nil {
			var n int
			n, err = k.Group.Restore(chunk)
			loaded += n
			chunk = chunk[:0]
		}
	}
	_, _, rerr := Read(k.Path(), func(r shard.Record) {
		if err != nil {
			return // stopped: the rest of the file is only read through
		}
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

// Save writes a snapshot of every live bucket and returns how many it
// wrote. A Save called while another runs waits for it.
func (k *Keeper) Save() (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var all []shard.Record
	for i := range k.Group.Len() {
		var err error
		if all, err = k.Group.Dump(i, all); err != nil {
			return 0, err
		}
	}
	write := k.write
	if write == nil {
		write = Write
	}
	i := 0
	return write(k.Path(), time.Now().UnixMicro(), func() (shard.Record, bool) {
		if i == len(all) {
			return shard.Record{}, false
		}
		i++
		return all[i-1], true
	})
}

// Run saves a snapshot every interval until ctx ends; failures are logged.
// It returns once ctx has ended and no Save of its own is in progress, so
// a caller that waits for Run and then calls Final knows that no periodic
// snapshot lands after the final one.
func (k *Keeper) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if ctx.Err() != nil {
				return // both were ready: stopping wins over one more snapshot
			}
			start := time.Now()
			n, err := k.Save()
			if err != nil {
				k.logger().Error("snapshot failed; the previous one stays", "path", k.Path(), "err", err)
				continue
			}
			k.logger().Debug("snapshot written", "path", k.Path(), "buckets", n, "took", time.Since(start).Round(time.Millisecond))
		}
	}
}

// Final writes the shutdown snapshot and logs the outcome; a failure
// leaves the previous snapshot in place. Call it after Run has returned
// and once nothing changes the buckets any more.
func (k *Keeper) Final() {
	start := time.Now()
	n, err := k.Save()
	if err != nil {
		k.logger().Error("final snapshot failed; the previous one stays", "path", k.Path(), "err", err)
		return
	}
	k.logger().Info("snapshot written", "path", k.Path(), "buckets", n, "took", time.Since(start).Round(time.Millisecond))
}
