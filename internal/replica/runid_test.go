package replica_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/replica"
	"github.com/bucketd/bucketd/internal/shard"
	"github.com/bucketd/bucketd/internal/testkit"
)

// TestRunIDKnownBeforeTheFirstWrite: the replicator learns Redis's run_id
// before it writes, so that a Redis that loses those writes (a restart
// without persistence, or a failover to a replica that had not received
// them yet) is noticed and gets the whole state again. Here Redis is down
// at the first write attempt (no run_id learnt), comes back, takes a
// write, and restarts empty; the key must come back.
func TestRunIDKnownBeforeTheFirstWrite(t *testing.T) {
	testkit.SkipShort(t, "Redis failure: kill -9 and restarts of Redis")
	const check = 2 * time.Second // longer than the steps below take
	srv := redistest.Start(t)
	group := shard.New(shard.Config{Shards: 2, TrackChanges: 1024})
	t.Cleanup(group.Close)
	rep, err := replica.New(replica.Config{Client: srv.Client(&redis.Options{MaxRetries: -1}), Group: group,
		RestartCheck: check, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	srv.Kill()
	if err := rep.Flush(ctx); err != nil {
		t.Fatalf("Flush with nothing to write: %v", err)
	}
	start := time.Now()
	srv.Restart()
	c := group.NewCaller()
	c.Add(decide.Request{Kind: decide.Acquire, Key: []byte("quiet"), Limit: bucket.Limit{Capacity: 5, Rate: 0.001}, Cost: 5})
	if _, err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if err := rep.Flush(ctx); err != nil {
		t.Fatalf("Flush after Redis came back: %v", err)
	}
	srv.Restart() // no persistence: the write is lost
	if took := time.Since(start); took > check {
		t.Logf("the steps took %v, longer than the run_id check interval %v; the test proves nothing this time", took, check)
	}
	client := srv.Client()
	back := testkit.Poll(3*check, func() bool {
		rep.Flush(ctx) //nolint:errcheck // only the key's return matters
		return client.Exists(ctx, "tb:quiet").Val() == 1
	})
	if !back {
		t.Fatalf("the key never came back after Redis lost it: %+v", rep.Stats())
	}
}
