package replica_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/replica"
	"github.com/bucketd/bucketd/internal/shard"
	"github.com/bucketd/bucketd/internal/testkit"
)

// drained is a key the test empties before the failover; with its limit
// it stays empty for over an hour.
var (
	drained      = []byte("drained")
	drainedLimit = bucket.Limit{Capacity: 5, Rate: 0.001}
)

// TestSentinelFailoverResumesReplication: replicate mode through Redis
// Sentinel (three Sentinels, a master and its replica) with the settings
// bucketd runs with by default (a write a second, a 2 s timeout per write,
// run_id checked every 5 s) and decisions going on all along. The master
// is killed (kill -9); the Sentinels promote the replica; replication
// resumes on it by itself, re-sends the whole state (its run_id is new),
// and the copy there equals memory. A bucketd started afterwards loads the
// state through the Sentinels too. The figures (failover, first write on
// the new master, full copy) are logged; docs/history.md quotes them.
func TestSentinelFailoverResumesReplication(t *testing.T) {
	testkit.SkipShort(t, "Sentinel: a failover under replication")
	sen := redistest.StartSentinel(t, 3)
	old := sen.Master()
	group := shard.New(shard.Config{Shards: 4, TrackChanges: 1 << 16})
	t.Cleanup(group.Close)
	rep, err := replica.Dial(sen.URL(""), replica.Config{Group: group, Prefix: "tb:", Capacity: 1 << 16,
		Interval: time.Second, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	c := group.NewCaller()
	for range 5 {
		c.Add(decide.Request{Kind: decide.Acquire, Key: drained, Limit: drainedLimit, Cost: 1})
	}
	if _, err := c.Run(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); rep.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	stopDriving := driveUntilStopped(t, group)
	defer stopDriving()

	testkit.Eventually(t, 10*time.Second, "the first writes on the master", func() bool {
		return rep.Stats().Applied > 0 && old.Client().Exists(context.Background(), "tb:drained").Val() == 1
	})
	applied := rep.Stats().Applied
	killed := time.Now()
	old.Kill()
	next := sen.WaitFailover(old)
	failover := time.Since(killed)
	testkit.Eventually(t, 30*time.Second, "a write on the new master", func() bool { return rep.Stats().Applied > applied })
	resumed := time.Since(killed)
	testkit.Eventually(t, 30*time.Second, "the new run_id noticed and the whole state queued again", func() bool {
		return rep.Stats().Resyncs > 0
	})
	resync := time.Since(killed)
	decisions := stopDriving()
	cancel()
	<-ran
	if err := rep.Flush(context.Background()); err != nil {
		t.Fatalf("Flush on the new master: %v", err)
	}
	t.Logf("kill -9 of the master: Sentinels named the new master after %v; first write on it after %v; "+
		"new run_id noticed (whole state queued again) after %v; %d decisions meanwhile; stats %+v",
		failover.Round(time.Millisecond), resumed.Round(time.Millisecond), resync.Round(time.Millisecond), decisions, rep.Stats())
	f := &fixture{group: group, rep: rep, client: next.Client()}
	compare(t, f.memoryState(t), f.redisState(t))
	checkFencedConnection(t, f)
	checkLoadThroughSentinel(t, sen)
}

// driveUntilStopped makes decisions on a few hundred keys in the
// background (acquires, peeks and resets, as drive does, with slower
// refills), a batch of 16
// every few milliseconds, until the returned function is called; that
// returns how many were made.
func driveUntilStopped(t *testing.T, g *shard.Group) func() int {
	t.Helper()
	stop, done := make(chan struct{}), make(chan int, 1)
	go func() {
		rng := rand.New(rand.NewPCG(11, 12))
		c := g.NewCaller()
		n := 0
		for {
			select {
			case <-stop:
				done <- n
				return
			default:
			}
			for range 16 {
				key := []byte(fmt.Sprint("k", rng.IntN(300)))
				// Slow refills: no bucket refills (and expires in Redis)
				// while the test runs, so the copy compares exactly.
				lim := bucket.Limit{Capacity: float64(1 + rng.IntN(20)), Rate: []float64{0.001, 0.01}[rng.IntN(2)]}
				switch r := rng.IntN(10); {
				case r < 7:
					c.Add(decide.Request{Kind: decide.Acquire, Key: key, Limit: lim, Cost: float64(rng.IntN(4))})
				case r < 9:
					c.Add(decide.Request{Kind: decide.Peek, Key: key, Limit: lim, Cost: 1})
				default:
					c.Add(decide.Request{Kind: decide.Reset, Key: key})
				}
			}
			if _, err := c.Run(); err != nil {
				t.Errorf("deciding: %v", err)
				done <- n
				return
			}
			n += 16
			time.Sleep(5 * time.Millisecond) // a steady trickle of decisions, in real time
		}
	}()
	var total int
	stopped := false
	return func() int {
		if !stopped {
			stopped = true
			close(stop)
			total = <-done
		}
		return total
	}
}

// checkFencedConnection: the replicator's connection to the new master
// carries the Fence's name, so after a failed write there the Fence can
// find and kill what is left of it.
func checkFencedConnection(t *testing.T, f *fixture) {
	t.Helper()
	list, err := f.client.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(list, "name=bucketd-replica-") {
		t.Fatalf("no connection named by the Fence on the new master:\n%s", list)
	}
}

// checkLoadThroughSentinel: a bucketd started now loads the state from the
// new master through the Sentinels; the key drained before the failover is
// still drained.
func checkLoadThroughSentinel(t *testing.T, sen *redistest.Sentinel) {
	t.Helper()
	group := shard.New(shard.Config{Shards: 2, TrackChanges: 1024})
	t.Cleanup(group.Close)
	rep, err := replica.Dial(sen.URL(""), replica.Config{Group: group, Capacity: 1024,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.LoadAtStart(context.Background(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	c := group.NewCaller()
	c.Add(decide.Request{Kind: decide.Acquire, Key: drained, Limit: drainedLimit, Cost: 1})
	res, err := c.Run()
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Decision.Allowed {
		t.Fatalf("loaded through Sentinel, %s is full again: %+v", drained, res[0].Decision)
	}
	if st := group.Stats(); st.Buckets < 2 {
		t.Fatalf("only %d buckets loaded", st.Buckets)
	}
}
