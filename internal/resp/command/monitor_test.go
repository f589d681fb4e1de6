package command_test

import (
	"context"
	"io"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// monitorLines reads lines from a monitor until one matches each of want,
// in order, and fails after 10 s.
func monitorLines(t *testing.T, m *testkit.Conn, want ...string) {
	t.Helper()
	m.SetReadDeadline(time.Now().Add(10 * time.Second))
	var seen []string
	for _, w := range want {
		re := regexp.MustCompile(`^\+\d{10}\.\d{6} \[0 127\.0\.0\.1:\d+\] ` + w + "\r\n$")
		for {
			l := m.Line(t)
			seen = append(seen, l)
			if re.MatchString(l) {
				break
			}
			if len(seen) > 100 {
				t.Fatalf("no line matches %s in %q", w, seen)
			}
		}
	}
}

// TestMonitorShowsCommands: a monitor sees every client's commands as
// Redis formats them, arguments quoted as sdscatrepr quotes them, AUTH
// redacted, admin commands not at all; what it sends itself is dropped,
// but QUIT, which closes it.
func TestMonitorShowsCommands(t *testing.T) {
	ts := startServer(t, nil)
	m := ts.Dial(t)
	if got := m.Do(t, "MONITOR"); got != "+OK\r\n" {
		t.Fatalf("MONITOR: %q", got)
	}
	ctx := context.Background()
	c := ts.Client(t, func(o *redis.Options) { o.Protocol = 2 })
	c.Do(ctx, "tb.acquire", "k", "10", "1")
	c.Do(ctx, "CONFIG", "GET", "save")
	c.Do(ctx, "ECHO", "a\"b\\\n\x01é")
	c.Do(ctx, "AUTH", "secret")
	c.Do(ctx, "PING")
	monitorLines(t, m,
		`"tb\.acquire" "k" "10" "1"`,
		`"ECHO" "a\\"b\\\\\\n\\x01\\xc3\\xa9"`, // CONFIG GET before it is not shown
		`"AUTH" "\(redacted\)"`,
		`"PING"`)
	m.Send(t, testkit.Command("PING")) // dropped: nothing comes back for it
	c.Do(ctx, "ECHO", "after")
	monitorLines(t, m, `"ECHO" "after"`)
	m.Send(t, testkit.Command("QUIT"))
	m.SetReadDeadline(time.Now().Add(10 * time.Second))
	if rest, err := io.ReadAll(m); err != nil || strings.Contains(string(rest), "PONG") {
		t.Errorf("after QUIT: %q, %v; want the connection closed, no PONG", rest, err)
	}
	testkit.Eventually(t, 5*time.Second, "the monitor to be forgotten", func() bool {
		list, _ := c.ClientList(ctx).Result()
		return !strings.Contains(list, "flags=O")
	})
}

// TestMonitorInMultiAndInfo: MONITOR inside EXEC is refused as Redis
// refuses it; a monitor shows in CLIENT LIST with flag O.
func TestMonitorInMultiAndInfo(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.Dial(t)
	c.Do(t, "MULTI")
	c.Do(t, "MONITOR")
	if got := c.Do(t, "EXEC"); got != "*1\r\n-ERR MONITOR isn't allowed for DENY BLOCKING client\r\n" {
		t.Errorf("MONITOR in EXEC: %q", got)
	}
	m := ts.Dial(t)
	m.Do(t, "MONITOR")
	testkit.Eventually(t, 5*time.Second, "CLIENT LIST to show the monitor", func() bool {
		return strings.Contains(c.Do(t, "CLIENT", "LIST"), "flags=O")
	})
}

// TestMonitorThatStopsReadingIsDropped: a monitor that reads nothing holds
// at most the pubsub class's hard output limit; past it the server closes
// it and counts it, its memory comes back, and the other clients go on at
// their speed meanwhile: nobody waits for a monitor.
func TestMonitorThatStopsReadingIsDropped(t *testing.T) {
	const hard = 1 << 20
	ts := startServer(t, func(c *frontConfig) {
		lim := resp.DefaultOutputLimits
		lim[resp.PubSubClient] = resp.OutputLimit{HardBytes: hard}
		c.OutputLimits = &lim
	})
	p := ts.Dial(t)
	p.SetDeadline(time.Now().Add(60 * time.Second))
	key := strings.Repeat("k", 1000) // each monitor line about 1 KB
	var batch string
	for range 64 {
		batch += testkit.Command("TB.ACQUIRE", key, "1e9", "1")
	}
	run := func(batches int) time.Duration {
		start := time.Now()
		for range batches {
			p.Send(t, batch)
			for range 64 {
				p.Reply(t)
			}
		}
		return time.Since(start)
	}
	run(20) // warm up
	base := run(100)
	heapBefore := heapAfterGC()

	m := ts.Dial(t)
	m.Do(t, "MONITOR") // and never reads again
	stuck := run(100)  // 6.4 MB of lines: past the kernel's buffers and the limit
	if stuck > 5*base+2*time.Second {
		t.Errorf("100 batches took %v with a monitor that does not read, %v without", stuck, base)
	}
	testkit.Eventually(t, 20*time.Second, "the monitor to be dropped", func() bool {
		run(10)
		return ts.Server.Stats().OutputLimitDisconnections[resp.PubSubClient] == 1
	})
	if grown := heapAfterGC() - heapBefore; grown > 4*hard {
		t.Errorf("the heap grew %d bytes with a monitor that does not read; its limit is %d", grown, hard)
	}
	m.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, m); err != nil {
		t.Errorf("the dropped monitor's connection: %v, want it closed (EOF)", err)
	}
	if after := run(100); after > 5*base+2*time.Second {
		t.Errorf("after the monitor was dropped 100 batches took %v, %v before", after, base)
	}
}

func heapAfterGC() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestKillingAStuckMonitor: CLIENT KILL closes a monitor at once even
// while its connection's write waits on a client that reads nothing.
func TestKillingAStuckMonitor(t *testing.T) {
	ts := startServer(t, nil) // the default limits: 32 MiB, far above what is sent
	m := ts.Dial(t)
	m.Do(t, "MONITOR")
	p := ts.Dial(t)
	p.SetDeadline(time.Now().Add(60 * time.Second))
	key := strings.Repeat("k", 1000)
	var batch string
	for range 100 {
		batch += testkit.Command("TB.PEEK", key, "1", "1")
	}
	for range 80 { // 8 MB of lines: more than the socket buffers hold
		p.Send(t, batch)
		for range 100 {
			p.Reply(t)
		}
	}
	start := time.Now()
	if got := p.Do(t, "CLIENT", "KILL", "ADDR", m.LocalAddr().String()); got != ":1\r\n" {
		t.Fatalf("CLIENT KILL ADDR of the monitor: %q", got)
	}
	m.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, m); err != nil {
		t.Errorf("the killed monitor: %v, want its connection closed", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the killed monitor took %v to close", took)
	}
	if ts.Server.Stats().OutputLimitDisconnections[resp.PubSubClient] != 0 {
		t.Errorf("a killed monitor was counted as over its output limit")
	}
}
