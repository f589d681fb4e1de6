package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bucketd/bucketd/internal/testkit"
)

// TestSnapshotRestartKeepsDrainedKey: drain a key, SIGTERM, restart with
// the same --data-dir: still drained. Truncate the snapshot: a clear error
// and no start, unless --ignore-corrupt-snapshot.
func TestSnapshotRestartKeepsDrainedKey(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	p := startBinary(t, "--data-dir", dir)
	c := p.client(t)
	for range 3 {
		c.Do(ctx, "TB.ACQUIRE", "drained", "3", "0.01")
	}
	c.Do(ctx, "CL.THROTTLE", "cell", "2", "1", "60")
	p.stop(t)
	if !strings.Contains(p.stderr.String(), "snapshot written") {
		t.Fatalf("no snapshot at shutdown:\n%s", p.stderr)
	}

	p2 := startBinary(t, "--data-dir", dir)
	if !strings.Contains(p2.stderr.String(), "loaded snapshot") || !strings.Contains(p2.stderr.String(), "buckets=2") {
		t.Fatalf("snapshot not loaded:\n%s", p2.stderr)
	}
	c2 := p2.client(t)
	if v, err := c2.Do(ctx, "TB.ACQUIRE", "drained", "3", "0.01").Int64(); err != nil || v != 0 {
		t.Fatalf("after restart the drained key answered %v, %v; want 0", v, err)
	}
	if v, err := c2.Do(ctx, "CL.THROTTLE", "cell", "2", "1", "60").Int64Slice(); err != nil || v[2] != 1 {
		t.Fatalf("after restart CL.THROTTLE remaining %v, %v; want 1", v, err)
	}
	p2.stop(t)

	// Truncate the snapshot: the next start refuses, with a clear message.
	path := filepath.Join(dir, "buckets.snapshot")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data[:len(data)-7], 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "--addr", "127.0.0.1:0", "--metrics-addr=", "--data-dir", dir).CombinedOutput()
	if err == nil {
		t.Fatalf("started with a truncated snapshot:\n%s", out)
	}
	for _, want := range []string{"snapshot is corrupt", "--ignore-corrupt-snapshot"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("error does not say %q:\n%s", want, out)
		}
	}
	p3 := startBinary(t, "--data-dir", dir, "--ignore-corrupt-snapshot")
	if !strings.Contains(p3.stderr.String(), "snapshot is corrupt; starting with no buckets") {
		t.Fatalf("--ignore-corrupt-snapshot did not say what it did:\n%s", p3.stderr)
	}
}

// rss returns the resident memory of the running binary in bytes.
func (p *process) rss(t *testing.T) int64 {
	t.Helper()
	m, err := testkit.ReadMemory(p.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return m.RSS
}

// TestMaxBucketsBoundsMemory: 500,000 distinct live buckets against
// --max-buckets 50000 keep at most 50,000 live, and the RSS of the server
// (built without the race detector) grows by less than 32 MiB, where
// 500,000 live buckets would need over 50 MiB; the evictions are counted.
func TestMaxBucketsBoundsMemory(t *testing.T) {
	testkit.SkipShort(t, "memory bound: creates 500,000 buckets")
	const budget = 32 << 20
	p := startPlainBinary(t, "--max-buckets", "50000")
	c := p.client(t)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	base := p.rss(t)
	peak := base
	for batch := range 500 {
		pipe := c.Pipeline()
		for i := range 1000 {
			pipe.Do(ctx, "TB.ACQUIRE", fmt.Sprintf("key:%08d", batch*1000+i), "10", "0.000001")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if batch%50 == 49 {
			peak = max(peak, p.rss(t))
		}
	}
	n, err := c.DBSize(ctx).Result()
	if err != nil || n > 50000 {
		t.Fatalf("DBSIZE %d, %v; want at most 50000", n, err)
	}
	info := c.Info(ctx, "bucketd").Val()
	if !strings.Contains(info, "evicted_total:450000") {
		t.Fatalf("evictions not counted:\n%s", info)
	}
	t.Logf("RSS %.1f MiB at start, peak %.1f MiB with 500,000 buckets created against --max-buckets 50000",
		float64(base)/(1<<20), float64(peak)/(1<<20))
	if peak-base > budget {
		t.Fatalf("RSS grew by %d bytes, over the %d budget", peak-base, budget)
	}
}
