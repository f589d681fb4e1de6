package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/redisstore"
	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/replica"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// TestSentinelURLsWithTheBinary: the binary takes redis-sentinel:// URLs
// in both Redis modes. Replicate mode copies to the master the Sentinels
// name, and a restarted bucketd loads the copy through them; store mode
// decides on that master, and after a failover (kill -9 of the master) on
// the new one. The failovers under load, with their figures, are tested
// in internal/replica and internal/redisstore.
func TestSentinelURLsWithTheBinary(t *testing.T) {
	testkit.SkipShort(t, "Sentinel: a failover after kill -9 of the master")
	sen := redistest.StartSentinel(t, 1)
	url := sen.URL("")
	old := sen.Master()
	ctx := context.Background()

	p := startBinary(t, "--replicate", url, "--replicate-interval", "10ms")
	c := p.client(t)
	for range 5 {
		if err := c.Do(ctx, "TB.ACQUIRE", "r:1", "5", "0.01").Err(); err != nil {
			t.Fatal(err)
		}
	}
	red := old.Client()
	if !testkit.Poll(10*time.Second, func() bool {
		tokens, err := red.HGet(ctx, "tb:r:1", "tokens").Float64()
		return err == nil && tokens < 1
	}) {
		t.Fatalf("the drained key never reached the master through Sentinel:\n%s", p.stderr)
	}
	p.stop(t)
	p = startBinary(t, "--replicate", url)
	if log := p.stderr.String(); !strings.Contains(log, "loaded bucket state from Redis") || !strings.Contains(log, "buckets=1") {
		t.Fatalf("no load through Sentinel logged:\n%s", log)
	}
	if v, err := p.client(t).Do(ctx, "TB.ACQUIRE", "r:1", "5", "0.01").Int64(); err != nil || v != 0 {
		t.Fatalf("loaded through Sentinel, the drained key answered %v, %v; want 0", v, err)
	}
	p.stop(t)

	s := startBinary(t, "--store", url)
	sc := s.client(t)
	if info := sc.Info(ctx, "store").Val(); !strings.Contains(info, "bucketd_mode:store") {
		t.Fatalf("INFO store: %q", info)
	}
	// drains acquires three times on a fresh key of capacity 2 and reports
	// whether Redis answered (allowed, allowed, denied: the default 50 ms
	// timeout may give the policy's answer on a busy machine) and the key
	// is empty on that server (but for the refill since).
	attempt := 0
	drains := func(on *redistest.Server) bool {
		attempt++
		key := fmt.Sprint("s:", attempt)
		var got []int64
		for range 3 {
			v, err := sc.Do(ctx, "TB.ACQUIRE", key, "2", "0.000001").Int64()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		tokens, err := on.Client().HGet(ctx, "tb:"+key, "tokens").Float64()
		return got[0] == 1 && got[1] == 1 && got[2] == 0 && err == nil && tokens < 0.001
	}
	testkit.Eventually(t, 10*time.Second, "a key to drain on the master through Sentinel", func() bool { return drains(old) })
	old.Kill()
	next := sen.WaitFailover(old)
	testkit.Eventually(t, 20*time.Second, "a key to drain on the new master after the failover", func() bool { return drains(next) })
	s.stop(t)
}

// TestRedisConnsCountsTheSentinels: through Sentinel the descriptors kept
// for Redis include the failover client's connections to the Sentinels.
func TestRedisConnsCountsTheSentinels(t *testing.T) {
	const url = "redis-sentinel://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/m?pool_size=5"
	opts, err := redisstore.FailoverOptions(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewFailoverClient(opts) // connects on first use only
	t.Cleanup(func() { c.Close() })
	st := &store{client: c, sentinels: sentinelCount(url)}
	if got, want := st.redisConns(), 5+redis.DefaultPipelinePoolSize+(5+1+3); got != want {
		t.Fatalf("store mode through 3 Sentinels: %d connections counted, want %d", got, want)
	}
	if got, want := (&memory{rep: &replica.Replicator{}, sentinels: 3}).redisConns(), 1+redis.DefaultPipelinePoolSize+(1+1+3); got != want {
		t.Fatalf("replicate mode through 3 Sentinels: %d connections counted, want %d", got, want)
	}
}
