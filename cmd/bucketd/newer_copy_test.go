package main

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/shard"
	"github.com/bucketd/bucketd/internal/snapshot"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// The key every combination drains: 10 tokens, one back every 1,000 s, so
// the refill during a test run stays far below one token.
const (
	drainKey      = "drain:me"
	drainCapacity = "10"
	drainRate     = "0.001"
)

// snapshotTokens returns the tokens the snapshot in dir holds for key, and
// false when it holds none (or there is no snapshot yet).
func snapshotTokens(t *testing.T, dir, key string) (float64, bool) {
	t.Helper()
	tokens, found := 0.0, false
	_, _, err := snapshot.Read(filepath.Join(dir, snapshot.FileName), func(r shard.Record) {
		if r.Key == key {
			tokens, found = r.State.Tokens, true
		}
	})
	if err != nil {
		return 0, false
	}
	return tokens, found
}

// redisTokens returns the tokens the Redis copy holds for key.
func redisTokens(t *testing.T, red *redis.Client, key string) (float64, bool) {
	t.Helper()
	st, ok := redistest.StoredBucket(t, red, "tb:"+key)
	return st.Tokens, ok
}

// drain spends the key's remaining tokens and checks that exactly want of
// the calls were allowed.
func drain(t *testing.T, c *redis.Client, calls, want int) {
	t.Helper()
	allowed := 0
	for range calls {
		v, err := c.Do(context.Background(), "TB.ACQUIRE", drainKey, drainCapacity, drainRate).Int64()
		if err != nil {
			t.Fatal(err)
		}
		allowed += int(v)
	}
	if allowed != want {
		t.Fatalf("%d of %d acquires allowed, want %d", allowed, calls, want)
	}
}

func kill9(t *testing.T, p *process) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
}

// TestDrainedKeyStaysDrainedInEveryCombination: with --data-dir and
// --replicate together, the newer of the two copies of a bucket wins at
// load, whichever copy that is and however bucketd ended (SIGTERM or
// kill -9). Every case starts from the same history: 1 of 10 tokens
// taken, SIGTERM, so the snapshot and Redis both hold 9. Then a second run
// drains the key and ends so that one copy, or both, hold the drained
// state; the third run must find the key drained: TB.PEEK says 0 left and
// 10 acquires are all denied. Under -short only the case without a fault
// runs (both copies drained, SIGTERM).
func TestDrainedKeyStaysDrainedInEveryCombination(t *testing.T) {
	t.Parallel() // its own Redis servers and data directories
	type run2 struct {
		interval  string // --snapshot-interval of the draining run
		redisDown bool   // Redis is stopped while the key drains (its copy stays at 9)
		sigterm   bool   // the draining run ends with SIGTERM; otherwise kill -9
	}
	for _, tc := range []struct {
		name string
		run2
	}{
		// The snapshot still holds 9 (no periodic snapshot since), Redis 0.
		{"snapshot older, Redis newer, kill -9", run2{interval: "1h"}},
		// Both copies hold the drained state.
		{"both drained, kill -9", run2{interval: "1s"}},
		// Redis was down while the key drained: it still holds 9.
		{"snapshot newer, Redis older, kill -9", run2{interval: "1s", redisDown: true}},
		{"snapshot newer, Redis older, SIGTERM", run2{interval: "1h", redisDown: true, sigterm: true}},
		{"both drained, SIGTERM", run2{interval: "1h", sigterm: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.redisDown || !tc.sigterm {
				testkit.SkipShort(t, "fault injection: kill -9 of bucketd or Redis stopped")
			}
			// Redis keeps its data across a restart (AOF), so a copy left
			// behind while it was down is still there afterwards.
			rs := redistest.Start(t, "--appendonly", "yes")
			red := rs.Client()
			dir := t.TempDir()
			args := func(interval string) []string {
				return []string{"--data-dir", dir, "--snapshot-interval", interval,
					"--replicate", "redis://" + rs.Addr, "--shutdown-timeout", "2s"}
			}

			// Run 1: 9 tokens left in both copies.
			p1 := startBinary(t, args("1h")...)
			drain(t, p1.client(t), 1, 1)
			p1.stop(t)
			if tok, ok := snapshotTokens(t, dir, drainKey); !ok || tok != 9 {
				t.Fatalf("after run 1 the snapshot holds %v, %v; want 9", tok, ok)
			}
			if tok, ok := redisTokens(t, red, drainKey); !ok || tok != 9 {
				t.Fatalf("after run 1 Redis holds %v, %v; want 9", tok, ok)
			}

			// Run 2: drain, and end with the copies the case wants.
			p2 := startBinary(t, args(tc.interval)...)
			if tc.redisDown {
				rs.Stop()
			}
			drain(t, p2.client(t), 12, 9)
			if !tc.redisDown {
				testkit.Eventually(t, 10*time.Second, "the drained state in Redis", func() bool {
					tok, ok := redisTokens(t, red, drainKey)
					return ok && tok < 1
				})
			}
			if tc.interval == "1s" {
				testkit.Eventually(t, 10*time.Second, "the drained state in a periodic snapshot", func() bool {
					tok, ok := snapshotTokens(t, dir, drainKey)
					return ok && tok < 1
				})
			}
			if tc.sigterm {
				p2.stop(t)
			} else {
				kill9(t, p2)
			}
			if tc.redisDown {
				rs.Restart()
				if tok, ok := redisTokens(t, red, drainKey); !ok || tok != 9 {
					t.Fatalf("Redis came back with %v, %v; want the older 9", tok, ok)
				}
			}

			// Run 3: the key is drained.
			p3 := startBinary(t, args("1h")...)
			c3 := p3.client(t)
			info, err := c3.Do(context.Background(), "TB.PEEK", drainKey, drainCapacity, drainRate).Int64Slice()
			if err != nil || len(info) != 4 || info[1] != 0 {
				t.Fatalf("TB.PEEK after the restart: %v, %v; want 0 remaining\n%s", info, err, p3.stderr)
			}
			drain(t, c3, 10, 0)
			for _, want := range []string{`msg="loaded snapshot"`, `msg="loaded bucket state from Redis"`} {
				if !strings.Contains(p3.stderr.String(), want) {
					t.Fatalf("no %s line:\n%s", want, p3.stderr)
				}
			}
		})
	}
}
