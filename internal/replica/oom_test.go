package replica_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/info"
	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/replica"
	"github.com/bucketd/bucketd/internal/shard"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// acquireAll takes a token from each of n buckets named prefix<i>, whose
// slow refill keeps them in memory for the whole test.
func acquireAll(t *testing.T, g *shard.Group, prefix string, n int) {
	t.Helper()
	c := g.NewCaller()
	lim := bucket.Limit{Capacity: 10, Rate: 0.001}
	for i := range n {
		c.Add(decide.Request{Kind: decide.Acquire, Key: fmt.Appendf(nil, "%s%d", prefix, i), Limit: lim, Cost: 1})
		if i%256 == 255 || i == n-1 {
			if _, err := c.Run(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// resetAll resets the n buckets named prefix<i>.
func resetAll(t *testing.T, g *shard.Group, prefix string, n int) {
	t.Helper()
	c := g.NewCaller()
	for i := range n {
		c.Add(decide.Request{Kind: decide.Reset, Key: fmt.Appendf(nil, "%s%d", prefix, i)})
		if i%256 == 255 || i == n-1 {
			if _, err := c.Run(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// logLines counts the lines of a logger that contain a text.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) count(text string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), text)
}

// TestRedisOutOfMemoryNeitherBlocksDeletionsNorStalls (issue 10, item 6):
// a Redis at maxmemory with noeviction refuses the puts (OOM) but never a
// DEL, which frees memory. Filled past its memory, then every bucket reset:
// the deletions reach Redis and the queue drains (the unchanged code retried
// the first refused batch forever, with every change behind it, deletions
// included). Filled again past its memory: the refusals are counted (Stats,
// INFO) and logged at most once a second; once Redis has room (CONFIG SET
// maxmemory 0) the copy converges to memory: from the puts that waited, or,
// where more were refused than the Replicator keeps, by a resync.
func TestRedisOutOfMemoryNeitherBlocksDeletionsNorStalls(t *testing.T) {
	testkit.SkipShort(t, "OOM: Redis at its maxmemory for seconds")
	for _, tc := range []struct {
		name     string
		capacity int // Config.Capacity: how many refused puts wait
	}{
		{"every refused put waits", 1 << 16},
		{"more refused puts than wait", 4096},
	} {
		t.Run(tc.name, func(t *testing.T) { testOutOfMemory(t, tc.capacity) })
	}
}

func testOutOfMemory(t *testing.T, capacity int) {
	srv := redistest.Start(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
	group := shard.New(shard.Config{Shards: 4, TrackChanges: 1 << 16})
	t.Cleanup(group.Close)
	logs := &logLines{}
	rep, err := replica.New(replica.Config{Client: srv.Client(&redis.Options{MaxRetries: -1, ContextTimeoutEnabled: true}),
		Group: group, Capacity: capacity, Timeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{group: group, rep: rep, client: srv.Client()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.rep.Run(ctx) }()
	defer func() { cancel(); <-done }()
	started := time.Now()
	stored := func() int64 { // buckets in Redis
		n, err := f.client.Eval(ctx, "return #redis.call('KEYS', 'tb:*')", nil).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// 30,000 buckets are several times what 2 MB hold.
	const n = 30000
	acquireAll(t, f.group, "a", n)
	testkit.Eventually(t, 20*time.Second, "Redis to refuse writes (OOM)", func() bool {
		return f.rep.Stats().RedisErrors > 0
	})
	full := stored()
	st := f.rep.Stats()
	t.Logf("Redis full: %d of %d buckets stored; %+v", full, n, st)
	if full >= n {
		t.Fatalf("Redis stored all %d buckets within 2 MB: the test needs more", n)
	}
	if st.OOMRefusals == 0 || st.OOMWaiting == 0 || st.OOMWaiting > int64(capacity) {
		t.Fatalf("stats %+v: want OOM refusals counted and between 1 and %d puts waiting", st, capacity)
	}
	inf := string(info.Append(nil, f.rep.Info()))
	for _, field := range []string{"replicate_oom_refusals_total:", "replicate_oom_waiting:"} {
		if !strings.Contains(inf, field) {
			t.Fatalf("INFO has no %s:\n%s", field, inf)
		}
	}

	resetAll(t, f.group, "a", n)
	if !testkit.Poll(20*time.Second, func() bool { return stored() == 0 && f.rep.Stats().QueueDepth == 0 }) {
		t.Fatalf("after resetting every bucket, Redis still holds %d and the queue is %+v: an OOM blocked the deletions",
			stored(), f.rep.Stats())
	}

	refused := f.rep.Stats().OOMRefusals
	acquireAll(t, f.group, "b", n)
	testkit.Eventually(t, 30*time.Second, "every put tried: stored, or refused and waiting", func() bool {
		st := f.rep.Stats()
		return st.OOMRefusals > refused && st.QueueDepth == st.OOMWaiting
	})
	// The waiting puts are retried in the background, and one that fits
	// (a key Redis expired meanwhile freed room) moves from waiting to
	// stored between two reads: compare the two until they agree.
	var want int64
	agree := testkit.Poll(10*time.Second, func() bool {
		st = f.rep.Stats()
		want = min(int64(capacity), n-stored())
		return st.OOMWaiting == want
	})
	if !agree {
		t.Fatalf("%d puts waiting, want %d (the refused ones, at most %d): %+v", st.OOMWaiting, want, capacity, st)
	}
	if err := f.client.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if !testkit.Poll(30*time.Second, func() bool { return f.rep.Stats().QueueDepth == 0 && stored() == n }) {
		t.Fatalf("with room in Redis the copy did not converge: %d of %d stored, %+v", stored(), n, f.rep.Stats())
	}
	cancel()
	<-done
	if err := f.rep.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	st = f.rep.Stats()
	t.Logf("converged: %+v", st)
	if st.OOMWaiting != 0 || st.LagSeconds != 0 {
		t.Fatalf("after converging: %+v", st)
	}
	if capacity < n && st.Resyncs == 0 {
		t.Fatalf("puts were dropped from the wait, but no resync followed: %+v", st)
	}
	lines, limit := logs.count("Redis is out of memory"), int(time.Since(started)/time.Second)+1
	if lines == 0 || lines > limit {
		t.Fatalf("%d OOM log lines in %v; want 1 to %d (one a second at most)", lines, time.Since(started), limit)
	}
	compare(t, f.memoryState(t), f.redisState(t))
}
