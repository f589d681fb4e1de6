package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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
	// MaxKeyBytes is --max-key-bytes: a bucket of the snapshot whose key
	// is longer is left out at load, as every command refuses such a key
	// (the setting may have been lowered since the snapshot). 0: no bound
	// but the file format's.
	MaxKeyBytes int
	// UnixNow returns the time on the group's clock, in Unix microseconds:
	// the load instant, which no loaded time may be later than
	// (time.Now).
	UnixNow func() int64

	// mu makes each Save one step, from reading the shards to the rename:
	// two Saves never overlap, so the renames land in the order the
	// shards were read, and an older state never replaces a newer one.
	mu sync.Mutex
	// write is Write; tests slow it down to make Saves meet.
	write func(path string, takenUnixMicros int64, next func() (shard.Record, bool, error)) (int, error)

	lastGood atomic.Int64 // Unix microseconds; see Stats.LastSuccess
	failures atomic.Int64
}

// Stats are the keeper's figures, for metrics.
type Stats struct {
	// LastSuccess is when the newest snapshot in Dir was taken: the last
	// one this process wrote, or before that the one loaded at start, or
	// the start itself when there was none to load (nothing older can be
	// lost). Its age is what a crash now would lose. Zero before Restore.
	LastSuccess time.Time
	// Failures counts the snapshots that failed since the start, periodic
	// and final.
	Failures int64
}

// Stats returns the keeper's figures; safe to call at any time.
func (k *Keeper) Stats() Stats {
	st := Stats{Failures: k.failures.Load()}
	if us := k.lastGood.Load(); us != 0 {
		st.LastSuccess = time.UnixMicro(us)
	}
	return st
}

// Path is the snapshot file.
func (k *Keeper) Path() string { return filepath.Join(k.Dir, FileName) }

func (k *Keeper) unixNow() int64 {
	if k.UnixNow == nil {
		return time.Now().UnixMicro()
	}
	return k.UnixNow()
}

func (k *Keeper) logger() *slog.Logger {
	if k.Logger == nil {
		return slog.Default()
	}
	return k.Logger
}

// restoreChunk is how many records Load hands the shards at a time.
const restoreChunk = 4096

// Restore is the start-up policy: it creates Dir if needed, refuses a
// directory it cannot write (every snapshot would fail, the final one
// too, and the buckets would be lost at the next restart), removes the
// temporary files of a snapshot a crash interrupted, and loads the
// snapshot, logging what it found. No snapshot yet means no buckets. A
// corrupt or truncated snapshot stops the start with an error, because
// starting empty would hand every client a fresh burst, unless
// ignoreCorrupt (--ignore-corrupt-snapshot) says to start empty; the next
// snapshot then overwrites the file. When ctx ends first (a signal during
// the start) it stops loading and returns an error wrapping ctx's: the
// shards then hold part of the snapshot, and must not be served or saved.
func (k *Keeper) Restore(ctx context.Context, ignoreCorrupt bool) error {
	if err := os.MkdirAll(k.Dir, 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if err := checkWritable(k.Dir); err != nil {
		return fmt.Errorf("--data-dir %s is not writable, so no snapshot could be saved there (%w): make it writable for the user bucketd runs as, with room on its disk, or choose another --data-dir", k.Dir, err)
	}
	k.removeLeftovers()
	start := time.Now()
	k.lastGood.Store(start.UnixMicro())
	l, err := k.Load(ctx)
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
		k.lastGood.Store(l.Taken.UnixMicro())
		k.logger().Info("loaded snapshot", "path", k.Path(), "buckets", l.Stored-l.Evicted, "read", l.Read,
			"evicted", l.Evicted, "clamped", l.Clamped, "limits_capped", l.Capped, "long_keys", l.LongKeys,
			"age", time.Since(l.Taken).Round(time.Second), "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// probeName is the file Restore writes and removes to learn that the data
// directory takes a snapshot.
const probeName = ".bucketd-write-check"

// checkWritable writes a small file in dir, syncs it and removes it: what
// a snapshot does, so a read-only, full or foreign directory fails here.
func checkWritable(dir string) error {
	p := filepath.Join(dir, probeName)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(make([]byte, 4096))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if rerr := os.Remove(p); err == nil {
		err = rerr
	}
	return err
}

// removeLeftovers deletes the temporary files of snapshots that never
// finished (Write removes its own on an error; a crash or kill -9 in the
// middle leaves one behind, as large as a snapshot).
func (k *Keeper) removeLeftovers() {
	entries, err := os.ReadDir(k.Dir)
	if err != nil {
		return // the load that follows reports an unreadable directory
	}
	files, size := 0, int64(0)
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), FileName+".tmp-") {
			continue
		}
		info, err := e.Info()
		if err == nil {
			err = os.Remove(filepath.Join(k.Dir, e.Name()))
		}
		if err != nil {
			k.logger().Warn("could not remove a temporary snapshot file a previous run left behind", "err", err)
			continue
		}
		files++
		size += info.Size()
	}
	if files > 0 {
		k.logger().Warn("removed temporary snapshot files a previous run left behind (it stopped in the middle of a snapshot)",
			"dir", k.Dir, "files", files, "bytes", size)
	}
}

// Loaded is what Load found and did.
type Loaded struct {
	Taken time.Time // when the snapshot was taken
	Read  int       // records in the file
	// Stored is how many records the shards took: the others had refilled
	// during the downtime (or the shards held a newer state).
	Stored int
	// Evicted is how many buckets --max-buckets evicted while they were
	// stored: at start, stored ones, so Stored-Evicted are kept.
	Evicted int
	// Clamped is how many records had a time later than the load instant
	// allows, moved to it; Capped how many had a capacity or rate above
	// what the commands accept, capped; LongKeys how many had a key longer
	// than MaxKeyBytes, left out (see loadRules).
	Clamped, Capped, LongKeys int
}

// Load restores the snapshot into the shards, leaving out buckets that
// have refilled during the downtime (they would be full, which is the same
// as absent), after holding every record to what the commands allow at
// the load instant (loadRules). A missing file is an error for which errors.Is(err,
// os.ErrNotExist) holds; a corrupt one wraps ErrCorrupt, and nothing of it
// is loaded. Once ctx ends it hands the shards nothing more and returns
// ctx's error.
func (k *Keeper) Load(ctx context.Context) (l Loaded, err error) {
	evictedBefore := k.Group.Stats().Evicted
	chunk := make([]shard.Record, 0, restoreChunk)
	flush := func() {
		if err == nil {
			err = ctx.Err()
		}
		if len(chunk) > 0 && err == nil {
			var n int
			n, err = k.Group.Restore(chunk)
			l.Stored += n
			chunk = chunk[:0]
		}
	}
	rules := loadRules{nowUnixMicros: k.unixNow(), maxKeyBytes: k.MaxKeyBytes}
	taken, read, rerr := read(k.Path(), func(taken int64) func(shard.Record) {
		rules.takenUnixMicros = taken
		return func(r shard.Record) {
			if err != nil || !rules.admit(&r) {
				return // stopped (the rest of the file is only read through), or left out
			}
			if chunk = append(chunk, r); len(chunk) == restoreChunk {
				flush()
			}
		}
	})
	flush()
	if rerr != nil {
		return Loaded{}, rerr
	}
	l.Taken, l.Read = time.UnixMicro(taken), read
	l.Clamped, l.Capped, l.LongKeys = rules.clamped, rules.capped, rules.longKeys
	l.Evicted = int(k.Group.Stats().Evicted - evictedBefore)
	return l, err
}

// saveChunk is how many entries a Save takes from a shard at a time: a
// pause of that shard of some tens of microseconds, and all of the
// buckets a Save holds in memory at once.
const saveChunk = 1024

// Save writes a snapshot of every live bucket and returns how many it
// wrote. The snapshot is a cut (shard.Walk): every bucket as it was at
// one point in every shard's order of work, so a transaction or a
// TB.MACQUIRE group is in it for all its buckets or for none. It streams:
// shard after shard, a chunk at a time, each written before the next is
// taken, so the shards serve clients in between, and memory holds one
// chunk and the copies the shards keep of buckets changed before the walk
// reached them (until the next chunk takes them), never a copy of all
// buckets. A Save called while another
// runs waits for it. Save runs flat out, as the final snapshot does; the
// periodic ones are paced (see pace).
func (k *Keeper) Save() (int, error) { return k.save(nil) }

// save is Save, paced until pacedUntil is closed (never paced when it is
// nil): a periodic snapshot that a shutdown meets finishes flat out, so
// the final one is not kept waiting.
func (k *Keeper) save(pacedUntil <-chan struct{}) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	write := k.write
	if write == nil {
		write = Write
	}
	taken := time.Now() // at or just before the cut: the age of what a crash loses is not understated
	w, err := k.Group.Walk()
	if err != nil {
		k.failures.Add(1)
		return 0, fmt.Errorf("snapshot: %w", err)
	}
	src := &stream{walk: w, chunk: make([]shard.Record, 0, saveChunk), pacedUntil: pacedUntil}
	defer w.Stop() //nolint:errcheck // after the end it does nothing; it fails only once the group is closed, which ends the walk too
	n, err := write(k.Path(), taken.UnixMicro(), src.next)
	if err != nil {
		k.failures.Add(1)
		return 0, err
	}
	k.lastGood.Store(taken.UnixMicro())
	return n, nil
}

// stream hands Write the buckets of a walk a chunk at a time.
type stream struct {
	walk  *shard.Walk
	done  bool // the walk has handed out its last chunk
	chunk []shard.Record
	pos   int // the next record of chunk to hand out

	pacedUntil <-chan struct{} // see Keeper.save
	since      time.Time       // when the work not yet paid for started
	owed       time.Duration   // work done since the last pause
}

// paceQuantum is the work a paced snapshot does between two pauses.
const paceQuantum = 2 * time.Millisecond

// pace runs between two chunks of a periodic snapshot. It lets every
// goroutine that is ready run first (with GOMAXPROCS=1 the snapshot would
// otherwise hold the only P for the scheduler's 10 ms time slice), and it
// rests as long as the snapshot worked, in pauses of at least
// paceQuantum, so a snapshot takes at most half a core however large it
// is: on a busy machine or under a CPU limit, serving is not starved
// while it runs. A paced snapshot takes about twice as long as one flat
// out (about 1.6 s instead of 0.8 s at 4 million buckets).
func (s *stream) pace() {
	runtime.Gosched()
	now := time.Now()
	if !s.since.IsZero() {
		s.owed += now.Sub(s.since)
	}
	if s.owed >= paceQuantum {
		time.Sleep(s.owed) // the pause is the point: leave the CPU to serving
		s.owed, now = 0, time.Now()
	}
	s.since = now
}

func (s *stream) next() (shard.Record, bool, error) {
	for s.pos == len(s.chunk) {
		if s.done {
			return shard.Record{}, false, nil
		}
		if s.pacedUntil != nil {
			select {
			case <-s.pacedUntil:
				s.pacedUntil = nil
			default:
				s.pace()
			}
		}
		var err error
		s.chunk, s.done, err = s.walk.Next(s.chunk[:0], saveChunk)
		s.pos = 0
		if err != nil {
			return shard.Record{}, false, err
		}
	}
	s.pos++
	return s.chunk[s.pos-1], true, nil
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
			n, err := k.save(ctx.Done())
			if err != nil {
				k.logger().Error("snapshot failed; the previous one stays", "path", k.Path(), "err", err)
				continue
			}
			k.logger().Debug("snapshot written", "path", k.Path(), "buckets", n, "took", time.Since(start).Round(time.Millisecond))
		}
	}
}

// Final writes the shutdown snapshot and logs the outcome. Call it after
// Run has returned and once nothing changes the buckets any more. A
// failure leaves the previous snapshot in place, and the error says what
// is lost: the state of the live buckets, and which older snapshot the
// next start loads instead, if any.
func (k *Keeper) Final() error {
	start := time.Now()
	n, err := k.Save()
	if err != nil {
		k.logger().Error("final snapshot failed; the previous one stays", "path", k.Path(), "err", err)
		return k.lost(err)
	}
	k.logger().Info("snapshot written", "path", k.Path(), "buckets", n, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// lost turns a failed final snapshot into what it means for the next start.
func (k *Keeper) lost(err error) error {
	next := "there is no earlier snapshot there, so the next start begins with no buckets"
	if taken, terr := Taken(k.Path()); terr == nil {
		next = fmt.Sprintf("the next start loads the earlier snapshot there, taken %s ago", time.Since(taken).Round(time.Second))
	}
	return fmt.Errorf("final snapshot failed: the state of %d buckets was not saved to %s (%s): %w",
		k.Group.Stats().Buckets, k.Dir, next, err)
}
