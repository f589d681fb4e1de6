package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// goroutines reads go_goroutines from the binary's /metrics.
func (p *process) goroutines(t *testing.T) int {
	t.Helper()
	res, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no go_goroutines in /metrics")
	return 0
}

// TestChaosReplicate: while 10 clients hammer a replicating bucketd, its
// Redis is slowed, black-holed, killed, restarted, paused and cut off.
// bucketd keeps answering with no error and bounded latency, its goroutines
// and memory do not pile up, and the copy converges afterwards.
func TestChaosReplicate(t *testing.T) {
	rs := redistest.Start(t)
	px := redistest.StartProxy(t, rs.Addr)
	p := startBinary(t, "--replicate", "redis://"+px.Addr)
	ctx := context.Background()

	var mu sync.Mutex
	var slowest time.Duration
	calls, errs := 0, 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := redis.NewClient(&redis.Options{Addr: p.addr})
			defer c.Close()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				err := c.Do(ctx, "TB.ACQUIRE", fmt.Sprint("chaos", w, ":", i%40), "50", "2").Err()
				d := time.Since(start)
				mu.Lock()
				calls++
				if err != nil {
					errs++
				}
				slowest = max(slowest, d)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	baseGoroutines := p.goroutines(t)
	baseRSS := rssBytes(t, p.cmd.Process.Pid)

	phase := func(name string, d time.Duration, begin, end func()) {
		t.Logf("phase: %s", name)
		begin()
		time.Sleep(d)
		end()
	}
	phase("Redis slowed by 300 ms per chunk", time.Second, func() { px.SetDelay(300 * time.Millisecond) }, func() { px.SetDelay(0) })
	phase("Redis black-holed", 2500*time.Millisecond, func() { px.SetDrop(true) }, func() { px.SetDrop(false); px.CloseConnections() })
	phase("Redis killed, then restarted empty", time.Second, rs.Kill, rs.Restart)
	phase("Redis paused", 2500*time.Millisecond, rs.Pause, rs.Resume)
	phase("connections cut", 500*time.Millisecond, px.CloseConnections, func() {})
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()

	t.Logf("%d calls, %d errors, slowest %v", calls, errs, slowest)
	if errs != 0 || slowest > time.Second {
		t.Fatalf("bucketd did not keep answering: %d errors in %d calls, slowest %v", errs, calls, slowest)
	}

	// The copy converges: queue empty, and Redis agrees with bucketd.
	c := p.client(t)
	red := rs.Client()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info := c.Info(ctx, "replication").Val()
		keys := red.Keys(ctx, "tb:chaos*").Val()
		if strings.Contains(info, "replicate_queue_depth:0\r\n") && len(keys) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replication did not converge:\n%s", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, k := range red.Keys(ctx, "tb:chaos*").Val() {
		h := red.HGetAll(ctx, k).Val()
		tokens, _ := strconv.ParseFloat(h["tokens"], 64)
		ts, _ := strconv.ParseInt(h["ts"], 10, 64)
		nowTokens := min(50, tokens+float64(time.Now().UnixMicro()-ts)/1e6*2)
		v, err := c.Do(ctx, "TB.PEEK", strings.TrimPrefix(k, "tb:"), "50", "2", "0").Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		if d := float64(v[1]) - nowTokens; d > 1 || d < -1 {
			t.Fatalf("%s: Redis's copy means %.3f tokens now, bucketd says %d", k, nowTokens, v[1])
		}
	}

	// Nothing piled up.
	time.Sleep(200 * time.Millisecond)
	goroutines := p.goroutines(t)
	rss := rssBytes(t, p.cmd.Process.Pid)
	t.Logf("goroutines %d before the chaos, %d after; RSS %.1f MiB before, %.1f MiB after (race build)",
		baseGoroutines, goroutines, float64(baseRSS)/(1<<20), float64(rss)/(1<<20))
	if goroutines > baseGoroutines+10 {
		t.Fatalf("goroutines piled up: %d before, %d after", baseGoroutines, goroutines)
	}
	if rss > baseRSS+128<<20 {
		t.Fatalf("memory piled up: RSS %d before, %d after", baseRSS, rss)
	}
}
