package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// burstAcross fires total acquires at one key, split over the given
// bucketd addresses with 25 connections each, and returns how many were
// allowed.
func burstAcross(t *testing.T, addrs []string, key string, capacity, total int) int64 {
	t.Helper()
	var clients []*redis.Client
	for _, addr := range addrs {
		for range 25 {
			c := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { c.Close() })
			clients = append(clients, c)
		}
	}
	return testkit.Burst(t, clients, total/len(clients), "TB.ACQUIRE", key, capacity, "0.001")
}

// TestTwoStoreInstancesShareLimits: two bucketd processes in store mode on
// one Redis; a burst of 2 × capacity split across both allows exactly
// capacity.
func TestTwoStoreInstancesShareLimits(t *testing.T) {
	rs := redistest.Start(t)
	url := "redis://" + rs.Addr
	// A generous timeout: this test is about sharing limits, and a reply
	// that times out on a busy machine would be the policy's, not Redis's.
	a := startBinary(t, "--store", url, "--redis-timeout", "5s")
	b := startBinary(t, "--store", url, "--redis-timeout", "5s")
	if got := burstAcross(t, []string{a.addr, b.addr}, "shared", 100, 200); got != 100 {
		t.Fatalf("two store-mode instances allowed %d of 200 on capacity 100, want exactly 100", got)
	}
	c := a.client(t)
	ctx := context.Background()
	if v, err := c.Do(ctx, "TB.PEEK", "shared", "100", "0.001").Int64Slice(); err != nil || v[0] != 0 {
		t.Fatalf("peek after the burst: %v %v", v, err)
	}
	if info := c.Info(ctx, "store").Val(); !strings.Contains(info, "bucketd_mode:store") {
		t.Fatalf("INFO store: %q", info)
	}
	if n := rs.Client().Exists(ctx, "tb:shared").Val(); n != 1 {
		t.Fatal("the bucket is not in Redis under tb:")
	}
}

// TestStoreClusterSharesLimits: the same against a three-master Redis
// Cluster, with a {hash tag} key.
func TestStoreClusterSharesLimits(t *testing.T) {
	t.Parallel() // a Redis Cluster of its own, which takes 2 s to form
	cl := redistest.StartCluster(t, 3)
	nodes := strings.Join(cl.Addrs(), ",")
	a := startBinary(t, "--store-cluster", nodes, "--redis-timeout", "5s") // see TestTwoStoreInstancesShareLimits
	b := startBinary(t, "--store-cluster", nodes, "--redis-timeout", "5s")
	for _, key := range []string{"plain", "{user1}:api"} {
		if got := burstAcross(t, []string{a.addr, b.addr}, key, 50, 100); got != 50 {
			t.Fatalf("%s: cluster store allowed %d of 100 on capacity 50, want exactly 50", key, got)
		}
	}
}

// TestStoreUnreachableAnswersByPolicy: with Redis unreachable, answers come
// within the timeout: denied by default, allowed with --on-redis-error allow.
func TestStoreUnreachableAnswersByPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   int64
	}{{"deny", 0}, {"allow", 1}} {
		t.Run(tc.policy, func(t *testing.T) {
			p := startBinary(t, "--store", "redis://127.0.0.1:1", "--redis-timeout", "50ms", "--on-redis-error", tc.policy)
			c := p.client(t)
			ctx := context.Background()
			slowest := time.Duration(0)
			for range 20 {
				start := time.Now()
				v, err := c.Do(ctx, "TB.ACQUIRE", "k", "10", "1").Int64()
				slowest = max(slowest, time.Since(start))
				if err != nil || v != tc.want {
					t.Fatalf("answer %v, %v; want %d", v, err, tc.want)
				}
			}
			t.Logf("slowest answer with Redis unreachable: %v", slowest)
			// Bounded by the timeout, not by a dial or read timeout of the
			// Redis client (seconds); generous for a loaded -race build.
			if slowest > 2*time.Second {
				t.Fatalf("an answer took %v with a 50ms timeout", slowest)
			}
			if err := c.Do(ctx, "TB.RESET", "k").Err(); err == nil || !strings.Contains(err.Error(), "Redis store did not answer") {
				t.Fatalf("TB.RESET with Redis down: %v", err)
			}
			if info := c.Info(ctx, "store").Val(); strings.Contains(info, "store_degraded_decisions_total:0\r\n") {
				t.Fatalf("degraded decisions not counted:\n%s", info)
			}
		})
	}
}
