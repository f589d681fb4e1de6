package main

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/testkit"
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
	testkit.SkipShort(t, "chaos: Redis paused, cut off and restarted under load for seconds")
	rs := redistest.Start(t)
	px := redistest.StartProxy(t, rs.Addr)
	p := startBinary(t, "--replicate", "redis://"+px.Addr)

	l := hammer(p.addr, 10, 40, "chaos", "50", "2")
	// The baseline is taken under load: every client connected (and the
	// INFO connection) and calling.
	c := p.client(t)
	testkit.Eventually(t, 10*time.Second, "10 clients connected and calling", func() bool {
		return infoField(t, c, "clients", "connected_clients") >= 11 && infoField(t, c, "bucketd", "acquire_allowed_total") >= 100
	})
	baseGoroutines := p.goroutines(t)
	baseRSS := p.rss(t)

	phase := func(name string, d time.Duration, begin, end func()) {
		t.Logf("phase: %s", name)
		begin()
		time.Sleep(d) // real time is the point: how long the fault lasts under load
		end()
	}
	phase("Redis slowed by 300 ms per chunk", time.Second, func() { px.SetDelay(300 * time.Millisecond) }, func() { px.SetDelay(0) })
	phase("Redis black-holed", 2500*time.Millisecond, func() { px.SetDrop(true) }, func() { px.SetDrop(false); px.CloseConnections() })
	phase("Redis killed, then restarted empty", time.Second, rs.Kill, rs.Restart)
	phase("Redis paused", 2500*time.Millisecond, rs.Pause, rs.Resume)
	phase("connections cut", 500*time.Millisecond, px.CloseConnections, func() {})
	// Real time is the point: the clients keep calling for a second while
	// the replicator recovers from the last fault.
	time.Sleep(time.Second)
	calls, errs, slowest := l.end()

	t.Logf("%d calls, %d errors, slowest %v", calls, errs, slowest)
	if errs != 0 || slowest > time.Second {
		t.Fatalf("bucketd did not keep answering: %d errors in %d calls, slowest %v", errs, calls, slowest)
	}
	checkConverged(t, p, rs.Client(), "tb:chaos*", 50, 2)

	// Nothing piled up, once the stopped clients' connections have closed.
	var goroutines int
	testkit.Poll(5*time.Second, func() bool {
		goroutines = p.goroutines(t)
		return goroutines <= baseGoroutines+10
	})
	rss := p.rss(t)
	t.Logf("goroutines %d before the chaos, %d after; RSS %.1f MiB before, %.1f MiB after (race build)",
		baseGoroutines, goroutines, float64(baseRSS)/(1<<20), float64(rss)/(1<<20))
	if goroutines > baseGoroutines+10 {
		t.Fatalf("goroutines piled up: %d before, %d after", baseGoroutines, goroutines)
	}
	if rss > baseRSS+128<<20 {
		t.Fatalf("memory piled up: RSS %d before, %d after", baseRSS, rss)
	}
}
