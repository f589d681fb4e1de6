package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// TestKill9AndRestartKeepsADrainedKeyDrained: replicate mode, drain a key,
// kill -9 bucketd once the copy has it, restart with --replicate: the key is
// still drained.
func TestKill9AndRestartKeepsADrainedKeyDrained(t *testing.T) {
	testkit.SkipShort(t, "kill -9 of bucketd and a restart")
	rs := redistest.Start(t)
	url := "redis://" + rs.Addr
	p := startBinary(t, "--replicate", url)
	c := p.client(t)
	ctx := context.Background()
	for range 5 {
		if err := c.Do(ctx, "TB.ACQUIRE", "user:9", "5", "0.01").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if v, _ := c.Do(ctx, "TB.ACQUIRE", "user:9", "5", "0.01").Int64(); v != 0 {
		t.Fatal("the key is not drained")
	}
	red := rs.Client()
	var tokens float64
	var err error
	if !testkit.Poll(10*time.Second, func() bool {
		tokens, err = red.HGet(ctx, "tb:user:9", "tokens").Float64()
		return err == nil && tokens < 1
	}) {
		t.Fatalf("the drained state never reached Redis: %v %v", tokens, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	p2 := startBinary(t, "--replicate", url)
	if !strings.Contains(p2.stderr.String(), "loaded bucket state from Redis") || !strings.Contains(p2.stderr.String(), "buckets=1") {
		t.Fatalf("no load logged:\n%s", p2.stderr)
	}
	c2 := p2.client(t)
	if v, err := c2.Do(ctx, "TB.ACQUIRE", "user:9", "5", "0.01").Int64(); err != nil || v != 0 {
		t.Fatalf("after kill -9 and restart the drained key answered %v, %v; want 0", v, err)
	}
	info := c2.Info(ctx, "replication").Val()
	if !strings.Contains(info, "bucketd_mode:replicate") {
		t.Fatalf("INFO replication: %q", info)
	}
}

// load is clients hammering a bucketd with TB.ACQUIRE until stopped,
// counting errors and the slowest reply.
type load struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	calls   int
	errs    int
	slowest time.Duration
}

// hammer starts clients goroutines calling TB.ACQUIRE prefix<w>:<i%keys>
// capacity rate on addr.
func hammer(addr string, clients, keys int, prefix, capacity, rate string) *load {
	l := &load{stop: make(chan struct{})}
	ctx := context.Background()
	for w := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				start := time.Now()
				err := c.Do(ctx, "TB.ACQUIRE", fmt.Sprint(prefix, w, ":", i%keys), capacity, rate).Err()
				d := time.Since(start)
				l.mu.Lock()
				l.calls++
				if err != nil {
					l.errs++
				}
				l.slowest = max(l.slowest, d)
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// end stops the clients and returns calls, errors and the slowest reply.
func (l *load) end() (calls, errs int, slowest time.Duration) {
	close(l.stop)
	l.wg.Wait()
	return l.calls, l.errs, l.slowest
}

// checkConverged waits until p's replication queue is empty, then checks
// that every bucket under pattern in Redis means, refilled to now, what
// bucketd answers (within a token: the two reads are not simultaneous).
func checkConverged(t *testing.T, p *process, red *redis.Client, pattern string, capacity, rate float64) {
	t.Helper()
	ctx := context.Background()
	c := p.client(t)
	var info string
	if !testkit.Poll(30*time.Second, func() bool {
		info = c.Info(ctx, "replication").Val()
		return strings.Contains(info, "replicate_queue_depth:0\r\n") && len(red.Keys(ctx, pattern).Val()) > 0
	}) {
		t.Fatalf("replication did not converge:\n%s", info)
	}
	keys := red.Keys(ctx, pattern).Val()
	for _, k := range keys[:min(len(keys), 200)] {
		h := red.HGetAll(ctx, k).Val()
		tokens, _ := strconv.ParseFloat(h["tokens"], 64)
		ts, _ := strconv.ParseInt(h["ts"], 10, 64)
		nowTokens := min(capacity, tokens+float64(time.Now().UnixMicro()-ts)/1e6*rate)
		v, err := c.Do(ctx, "TB.PEEK", strings.TrimPrefix(k, "tb:"), capacity, rate, "0").Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		if d := float64(v[1]) - nowTokens; d > 1 || d < -1 {
			t.Fatalf("%s: Redis's copy means %.3f tokens now, bucketd says %d", k, nowTokens, v[1])
		}
	}
}

// TestReplicateSurvivesRedisStoppedUnderLoad: Redis is SIGSTOPped while 20
// clients hammer bucketd: no errors, no slow replies; after SIGCONT the copy
// converges to bucketd's state.
func TestReplicateSurvivesRedisStoppedUnderLoad(t *testing.T) {
	testkit.SkipShort(t, "Redis failure: Redis paused under load")
	rs := redistest.Start(t)
	p := startBinary(t, "--replicate", "redis://"+rs.Addr)
	l := hammer(p.addr, 20, 50, "w", "100", "1")
	red := rs.Client()
	testkit.Eventually(t, 10*time.Second, "replication under load writing to Redis", func() bool {
		return len(red.Keys(context.Background(), "tb:w*").Val()) > 0
	})
	rs.Pause()
	// Real time is the point: Redis stays stopped for longer than the
	// replicator's write timeout while the clients keep calling.
	time.Sleep(2500 * time.Millisecond)
	rs.Resume()
	// Real time is the point: the clients keep calling while the replicator
	// reconnects and writes its backlog, and their replies must stay fast.
	time.Sleep(300 * time.Millisecond)
	_, errs, slowest := l.end()
	if errs != 0 || slowest > time.Second {
		t.Fatalf("with Redis stopped: %d errors, slowest reply %v", errs, slowest)
	}
	t.Logf("slowest reply while Redis was stopped: %v", slowest)
	checkConverged(t, p, red, "tb:w*", 100, 1)
}
