package redistest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/testkit"
)

func TestStartAnswersAndRestartKeepsThePort(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, "--maxmemory", "10mb")
	rdb := s.Client()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	cfg, err := rdb.ConfigGet(ctx, "maxmemory").Result()
	if err != nil || cfg["maxmemory"] != "10485760" {
		t.Fatalf("extra argument not applied: CONFIG GET maxmemory = %v, %v", cfg, err)
	}
	cfg, err = rdb.ConfigGet(ctx, "save").Result()
	if err != nil || cfg["save"] != "" {
		t.Fatalf("persistence not off: CONFIG GET save = %v, %v", cfg, err)
	}
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	pid, addr := s.PID(), s.Addr
	s.Restart()
	if s.PID() == pid || s.Addr != addr {
		t.Fatalf("Restart: pid %d -> %d, addr %s -> %s; want a new process on the same address", pid, s.PID(), addr, s.Addr)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after restart: %v", err)
	}
	if n, err := rdb.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("data survived a restart without persistence: EXISTS = %d, %v", n, err)
	}

	s.Stop()
	if s.Running() {
		t.Fatal("still running after Stop")
	}
	s.Restart()
	s.Kill()
	if s.Running() {
		t.Fatal("still running after Kill")
	}
}

func TestPauseResume(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	rdb := s.Client(&redis.Options{ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	s.Pause()
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("a paused server answered PING")
	}
	s.Resume()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
	// Stop must also end a paused server (SIGTERM waits for SIGCONT).
	s.Pause()
	s.Stop()
	if s.Running() {
		t.Fatal("paused server still running after Stop")
	}
}

func TestTwoServersGetTwoPorts(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	if a.Port == b.Port || a.PID() == b.PID() {
		t.Fatalf("two servers share port %d or pid %d", a.Port, a.PID())
	}
}

func TestCluster(t *testing.T) {
	t.Parallel() // a cluster takes 2 s to form, mostly waiting
	ctx := context.Background()
	c := redistest.StartCluster(t, 3)
	if len(c.Nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(c.Nodes))
	}
	cc := c.Client()
	// Keys spread over the slots of all three masters.
	for i := range 30 {
		k := fmt.Sprintf("key:%d", i)
		if err := cc.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	for i := range 30 {
		k := fmt.Sprintf("key:%d", i)
		if v, err := cc.Get(ctx, k).Int(); err != nil || v != i {
			t.Fatalf("GET %s = %d, %v; want %d", k, v, err, i)
		}
	}
	for _, n := range c.Nodes {
		size, err := n.Client().DBSize(ctx).Result()
		if err != nil || size == 0 {
			t.Fatalf("node %s holds %d keys (%v); the keys should spread over every master", n.Addr, size, err)
		}
	}
}

func TestSentinelFailsOver(t *testing.T) {
	testkit.SkipShort(t, "Sentinel: a failover after kill -9 of the master")
	ctx := context.Background()
	start := time.Now()
	s := redistest.StartSentinel(t, 3)
	t.Logf("master, replica and 3 Sentinels ready in %v", time.Since(start).Round(time.Millisecond))
	old := s.Master()
	if old != s.Servers[0] {
		t.Fatalf("the Sentinels name %s master, want %s", old.Addr, s.Servers[0].Addr)
	}
	if err := old.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	old.Kill()
	next := s.WaitFailover(old)
	t.Logf("failover after kill -9 took %v", time.Since(killed).Round(time.Millisecond))
	if next != s.Servers[1] {
		t.Fatalf("new master %s, want the replica %s", next.Addr, s.Servers[1].Addr)
	}
	if err := next.Client().Set(ctx, "k2", "v", 0).Err(); err != nil {
		t.Fatalf("SET on the new master: %v", err)
	}
	if s.MasterAddr() != next.Addr {
		t.Fatalf("MasterAddr %s, want %s", s.MasterAddr(), next.Addr)
	}
	if !strings.HasPrefix(s.URL("db=1"), "redis-sentinel://127.0.0.1:") || !strings.HasSuffix(s.URL("db=1"), "/mymaster?db=1") {
		t.Fatalf("URL %s", s.URL("db=1"))
	}
}
