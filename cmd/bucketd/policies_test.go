package main

import (
	"context"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/testkit"
)

// The binary serves policies with several limits and shadow policies from
// its file, at start and after a reload, in memory mode and store mode.
const (
	multiLimitPolicy = "policies:\n  llm:\n    limits: [{capacity: 2, rate: 2/hour}, {capacity: 3, rate: 3/day}]\n"
	shadowPolicy     = "policies:\n  llm:\n    shadow: true\n    limits: [{capacity: 2, rate: 2/hour}, {capacity: 3, rate: 3/day}]\n"
)

func TestMultiLimitAndShadowPolicies(t *testing.T) {
	for _, mode := range []string{"memory", "store"} {
		t.Run(mode, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "bucketd.yaml")
			write := func(s string) {
				t.Helper()
				if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			write(multiLimitPolicy)
			args := []string{"--config", file}
			if mode == "store" {
				args = append(args, "--store", "redis://"+redistest.Start(t).Addr, "--redis-timeout", "5s")
			}
			p := startBinary(t, args...)
			c := p.client(t)
			ctx := context.Background()
			acquire := func(want int64) {
				t.Helper()
				if v, err := c.Do(ctx, "TB.ACQUIRE", "u", "POLICY", "llm").Int64(); err != nil || v != want {
					t.Fatalf("TB.ACQUIRE u POLICY llm: %v, %v; want %d", v, err, want)
				}
			}
			acquire(1)
			acquire(1)
			acquire(0) // the hour's 2 are spent; the day keeps its 1
			if v, err := c.Do(ctx, "TB.MACQUIRE", 2, "{u}:x", 5, 0.001, "u", "POLICY", "llm").Int64(); err != nil || v != 0 {
				t.Fatalf("TB.MACQUIRE with llm: %v, %v; want 0", v, err)
			}
			write(shadowPolicy)
			if err := c.Do(ctx, "CONFIG", "RELOAD").Err(); err != nil {
				t.Fatal(err)
			}
			acquire(1) // shadow: would deny, says allowed
			if n, err := c.Do(ctx, "TB.RESET", "{u}:hour", "{u}:day", "{u}:x").Int64(); err != nil || n != 2 {
				t.Fatalf("TB.RESET of llm's buckets: %v, %v; want 2 ({u}:x was never charged)", n, err)
			}
			res, err := http.Get("http://" + p.metrics + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			for _, want := range []string{
				`bucketd_decisions_total{policy="",result="denied"} 1`,
				`bucketd_decisions_total{policy="llm",result="allowed"} 2`,
				`bucketd_decisions_total{policy="llm",result="denied"} 2`,
				`bucketd_decisions_total{policy="llm",result="shadow_denied"} 1`,
			} {
				if !strings.Contains(string(body), want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}
		})
	}
}

// TestGroupsReplicate: in replicate mode every bucket a TB.MACQUIRE or a
// policy of several limits charged reaches Redis, under its own key, and a
// denied group writes nothing.
func TestGroupsReplicate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bucketd.yaml")
	if err := os.WriteFile(file, []byte(multiLimitPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	rs := redistest.Start(t)
	p := startBinary(t, "--config", file, "--replicate", "redis://"+rs.Addr, "--replicate-interval", "100ms")
	c := p.client(t)
	ctx := context.Background()
	for _, step := range []struct {
		args []any
		want int64
	}{
		{[]any{"TB.MACQUIRE", 2, "a", 5, 0.001, "b", 3, 0.001, "COST", 2}, 1},
		{[]any{"TB.MACQUIRE", 2, "a", 5, 0.001, "c", 1, 0.001, "COST", 2}, 0}, // c is short: a keeps 3, c is not created
		{[]any{"TB.ACQUIRE", "u", "POLICY", "llm"}, 1},
	} {
		if v, err := c.Do(ctx, step.args...).Int64(); err != nil || v != step.want {
			t.Fatalf("%v: %v, %v; want %d", step.args, v, err, step.want)
		}
	}
	red := rs.Client()
	want := map[string]float64{"tb:a": 3, "tb:b": 1, "tb:{u}:hour": 1, "tb:{u}:day": 2}
	if !testkit.Poll(10*time.Second, func() bool {
		for key, tokens := range want {
			got, err := red.HGet(ctx, key, "tokens").Float64()
			if err != nil || math.Abs(got-tokens) > 0.01 {
				return false
			}
		}
		return true
	}) {
		keys, _ := red.Keys(ctx, "*").Result()
		t.Fatalf("Redis's copy never held %v (keys %v)", want, keys)
	}
	if n := red.Exists(ctx, "tb:c").Val(); n != 0 {
		t.Fatal("the denied group wrote tb:c")
	}
}
