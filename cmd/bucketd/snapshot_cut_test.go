package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/snapshot"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// The hot keys of TestKill9SnapshotIsACutOfEveryUnit: a capacity no run
// can spend and a refill far below one token over a run, so a key's takes
// are its capacity less what TB.PEEK says remains.
const (
	cutKeys     = 16
	cutCapacity = 1_000_000_000
	cutRate     = "0.000001"
)

// TestKill9SnapshotIsACutOfEveryUnit: the check. 300,000 idle
// buckets, 24 writers that only ever take from 16 keys together (a
// 16-key TB.MACQUIRE or a MULTI of 16 TB.ACQUIRE, alternately), periodic
// snapshots every second, kill -9 after 3.5 s, restart: the 16 keys must
// come back with equal takes, since no unit ever took from some of them
// and not the others. Ten runs, each from the same snapshot of the idle
// buckets.
func TestKill9SnapshotIsACutOfEveryUnit(t *testing.T) {
	testkit.SkipShort(t, "kill -9 during periodic snapshots: ten runs of 3.5 s over 300,000 buckets")
	const idle, runs, writers = 300_000, 10, 24
	seed := t.TempDir()
	p := startPlainBinary(t, "--data-dir", seed, "--snapshot-interval", "1h")
	fill(t, p.addr, idle)
	p.stop(t)
	idleSnapshot, err := os.ReadFile(filepath.Join(seed, snapshot.FileName))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range cutKeys {
		keys = append(keys, fmt.Sprintf("hot:%02d", k))
	}

	var broken []string
	for run := range runs {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, snapshot.FileName), idleSnapshot, 0o600); err != nil {
			t.Fatal(err)
		}
		p := startPlainBinary(t, "--data-dir", dir, "--snapshot-interval", "1s", "--log-level", "debug")
		units := writeUnits(t, p, keys, writers, 3500*time.Millisecond)
		written := strings.Count(p.stderr.String(), `msg="snapshot written"`)

		p2 := startPlainBinary(t, "--data-dir", dir, "--snapshot-interval", "1h")
		takes := restoredTakes(t, p2, keys)
		kill9(t, p2)
		lo, hi := takes[0], takes[0]
		for _, n := range takes {
			lo, hi = min(lo, n), max(hi, n)
		}
		t.Logf("run %d: %d units before kill -9, %d periodic snapshots written; restored takes %d to %d (spread %d)",
			run, units, written, lo, hi, hi-lo)
		if written == 0 || hi == 0 {
			t.Fatalf("run %d: no snapshot taken while the writers ran (%d written, takes up to %d): the check would prove nothing", run, written, hi)
		}
		if lo != hi {
			broken = append(broken, fmt.Sprintf("run %d: %v", run, takes))
		}
	}
	if len(broken) > 0 {
		t.Fatalf("in %d of %d runs the 16 keys came back with different takes, though every unit took from all of them:\n%s",
			len(broken), runs, strings.Join(broken, "\n"))
	}
}

// writeUnits runs writers clients against p, each taking from all keys
// in one unit per call (TB.MACQUIRE and MULTI in turn), for d; then it
// kills p with SIGKILL and returns how many units were answered. An error
// before the kill fails the test.
func writeUnits(t *testing.T, p *process, keys []string, writers int, d time.Duration) int64 {
	t.Helper()
	ctx := context.Background()
	macquire := []any{"TB.MACQUIRE", len(keys)}
	for _, k := range keys {
		macquire = append(macquire, k, cutCapacity, cutRate)
	}
	var units atomic.Int64
	var killed atomic.Bool
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		c := redis.NewClient(&redis.Options{Addr: p.addr, PoolSize: 1, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		wg.Go(func() {
			for i := w; !killed.Load(); i++ {
				var err error
				if i%2 == 0 {
					err = c.Do(ctx, macquire...).Err()
				} else {
					_, err = c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
						for _, k := range keys {
							pipe.Do(ctx, "TB.ACQUIRE", k, cutCapacity, cutRate)
						}
						return nil
					})
				}
				if err != nil {
					if !killed.Load() {
						errs <- err
					}
					return
				}
				units.Add(1)
			}
		})
	}
	// Real time is the point: the periodic snapshots run meanwhile.
	time.Sleep(d)
	killed.Store(true)
	kill9(t, p)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a writer failed before the kill: %v", err)
	}
	return units.Load()
}

// restoredTakes returns how many tokens each key has given, from what
// TB.PEEK with cost 0 says remains.
func restoredTakes(t *testing.T, p *process, keys []string) []int64 {
	t.Helper()
	c := p.client(t)
	var takes []int64
	for _, k := range keys {
		v, err := c.Do(context.Background(), "TB.PEEK", k, cutCapacity, cutRate, 0).Int64Slice()
		if err != nil || len(v) != 4 {
			t.Fatalf("TB.PEEK %s: %v, %v", k, v, err)
		}
		takes = append(takes, cutCapacity-v[1])
	}
	return takes
}
