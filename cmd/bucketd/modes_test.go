package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/redistest"
)

var listeningAttrs = regexp.MustCompile(`msg=listening addr=127\.0\.0\.1:\d+ mode=(\w+) shards=(\d+) .* metrics=(127\.0\.0\.1:\d+)`)

// runGoroutines name the functions of the goroutines run starts (in a
// test binary, package main's functions carry its import path); none may
// be left once run has returned. redistest's are the test's own.
var runGoroutines = []string{
	"cmd/bucketd.run", "cmd/bucketd.(*daemon)", "cmd/bucketd.(*background)", "cmd/bucketd.(*reloader)",
	"bucketd/internal/snapshot.", "bucketd/internal/replica.", "bucketd/internal/resp.",
	"bucketd/internal/shard.", "bucketd/internal/redisstore.", "bucketd/internal/metrics.",
}

// lingering returns the goroutines in funcs that are still there after a
// second. A goroutine that signalled its end (closed a channel, called
// Done) may take a moment more to return; one that was never told to stop
// stays.
func lingering(funcs ...string) []string {
	deadline := time.Now().Add(time.Second)
	for {
		left := goroutinesIn(funcs...)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		runtime.Gosched()
	}
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	_, body := httpGet(t, "http://"+addr+"/metrics")
	return body
}

// httpGet GETs url and returns the status code and the body.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body)
}

// TestEachModeRunsItsPartsAndStopsThemAll runs bucketd in-process in each
// mode: store mode has no shards (the listening line says shards=0 and
// /metrics has no bucketd_shard_queue_depth series), the other modes have
// theirs; the shutdown steps come in order; and once run has returned, no
// goroutine it started is left: server, replication, snapshots, the
// SIGHUP loop, shards, store and metrics server have all been awaited.
func TestEachModeRunsItsPartsAndStopsThemAll(t *testing.T) {
	redisAddr := redistest.Start(t).Addr
	for _, tc := range []struct {
		mode        string
		args        []string
		shards      string
		replication bool
		steps       []string // the shutdown's log lines, in order
	}{
		{mode: "memory", args: []string{"--data-dir", "{dir}"}, shards: "2",
			steps: []string{`msg="shutting down"`, `msg="snapshot written"`, "msg=stopped"}},
		{mode: "replicate", args: []string{"--replicate", "redis://" + redisAddr, "--data-dir", "{dir}"}, shards: "2", replication: true,
			steps: []string{`msg="shutting down"`, `msg="replication flushed"`, `msg="snapshot written"`, "msg=stopped"}},
		{mode: "store", args: []string{"--store", "redis://" + redisAddr}, shards: "0",
			steps: []string{`msg="shutting down"`, "msg=stopped"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--shards", "2"}
			for _, a := range tc.args {
				args = append(args, strings.ReplaceAll(a, "{dir}", dir))
			}
			tap := newLogTap("")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- run(ctx, args, func(string) string { return "" }, tap) }()

			m := listeningAttrs.FindStringSubmatch(tap.waitLine(t, "msg=listening"))
			if m == nil || m[1] != tc.mode || m[2] != tc.shards {
				t.Fatalf("listening line %q, want mode=%s shards=%s", m, tc.mode, tc.shards)
			}
			body := scrape(t, m[3])
			if got, want := strings.Count(body, "\nbucketd_shard_queue_depth{"), map[string]int{"0": 0, "2": 2}[tc.shards]; got != want {
				t.Errorf("%d bucketd_shard_queue_depth series, want %d:\n%s", got, want, body)
			}
			if got := strings.Contains(body, "\nbucketd_replication_queue_depth "); got != tc.replication {
				t.Errorf("bucketd_replication_queue_depth exported: %v, want %v", got, tc.replication)
			}
			if !strings.Contains(body, "\nbucketd_buckets ") {
				t.Errorf("no bucketd_buckets in:\n%s", body)
			}

			cancel()
			for _, step := range tc.steps {
				tap.waitLine(t, step)
			}
			if err := <-done; err != nil {
				t.Fatalf("run: %v", err)
			}
			if left := lingering(runGoroutines...); len(left) > 0 {
				t.Fatalf("%d goroutines started by run are still running after it returned:\n%s", len(left), strings.Join(left, "\n\n"))
			}
		})
	}
}
