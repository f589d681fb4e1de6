package command_test

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/bucketd/bucketd/internal/testkit/testserver"
)

// limitedServer runs a server with limits as its output limits, logging
// to the buffer it returns.
func limitedServer(t *testing.T, limits resp.OutputLimits) (*testserver.Server, *testkit.SyncBuffer) {
	t.Helper()
	logs := &testkit.SyncBuffer{}
	ts := startServer(t, func(cfg *frontConfig) {
		cfg.OutputLimits = &limits
		cfg.serverConfig.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	return ts, logs
}

// expectClosedSilently reads c to its end: the server must close it
// without writing anything more, within 5 s.
func expectClosedSilently(t *testing.T, c *testkit.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if len(got) > 0 || isTimeout(err) {
		t.Fatalf("%s: read %d bytes (%.60q…), %v; want the connection closed with nothing written", what, len(got), got, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestOutputHardLimitWhileRepliesAreBuilt is issue 19 item 1: replies
// that pass the hard limit while one read's commands are answered close
// the connection before any of them is written; the commands after the one
// that passed it do not run; the close is counted and logged; and EXEC is
// held to the limit inside its one reply.
func TestOutputHardLimitWhileRepliesAreBuilt(t *testing.T) {
	ts, logs := limitedServer(t, resp.OutputLimits{resp.NormalClient: {HardBytes: 1 << 20}})
	name := strings.Repeat("n", 300_000)
	c := ts.Dial(t)
	if got := c.Do(t, "CLIENT", "SETNAME", name); got != "+OK\r\n" {
		t.Fatal(got)
	}
	getname := testkit.Command("CLIENT", "GETNAME")
	c.Send(t, strings.Repeat(getname, 3)+testkit.Command("TB.ACQUIRE", "after", "1", "1")) // 900 KB: within
	for range 3 {
		if r := c.Reply(t); len(r) != 300_011 {
			t.Fatalf("a reply of %d bytes", len(r))
		}
	}
	if got := c.Reply(t); got != ":1\r\n" {
		t.Fatalf("TB.ACQUIRE = %q", got)
	}
	c.Send(t, strings.Repeat(getname, 4)+testkit.Command("TB.ACQUIRE", "later", "1", "1")) // 1.2 MB: over
	expectClosedSilently(t, c, "four replies of 300 KB with a hard limit of 1 MiB")
	if got := ts.Dial(t).Do(t, "TB.ACQUIRE", "later", "1", "1"); got != ":1\r\n" {
		t.Errorf("TB.ACQUIRE after the command that passed the limit ran: a fresh call = %q, want :1", got)
	}

	tx := ts.Dial(t)
	tx.Send(t, testkit.Command("CLIENT", "SETNAME", name)+"MULTI\r\n"+strings.Repeat(getname, 10))
	for range 12 {
		tx.Reply(t)
	}
	tx.Send(t, "EXEC\r\n")
	expectClosedSilently(t, tx, "EXEC of ten replies of 300 KB with a hard limit of 1 MiB")

	st := ts.Server.Stats()
	if st.OutputLimitDisconnections != [resp.NumOutputClasses]int64{2, 0} {
		t.Errorf("output limit disconnections by class %v, want [2 0]", st.OutputLimitDisconnections)
	}
	testkit.Eventually(t, 3*time.Second, "the held-back log line written", func() bool {
		return strings.Count(logs.String(), "closed a client connection over its output buffer limit") == 2
	})
	if l := logs.String(); !strings.Contains(l, "class=normal limit=hard limit_bytes=1048576 pending_bytes=900033 suppressed=0") ||
		!strings.Contains(l, "suppressed=0\n") {
		t.Errorf("log:\n%s", l)
	}
}

// TestOutputSoftLimitForAClientThatDoesNotRead: replies above the soft
// limit must be read within its time; a client that does not read is
// closed then, one that reads is not.
func TestOutputSoftLimitForAClientThatDoesNotRead(t *testing.T) {
	testkit.SkipShort(t, "a client that does not read for 2 s")
	const soft = time.Second
	ts, logs := limitedServer(t, resp.OutputLimits{resp.NormalClient: {SoftBytes: 256 << 10, SoftTime: soft}})
	setName := testkit.Command("CLIENT", "SETNAME", strings.Repeat("n", 1<<20))
	getNames := strings.Repeat(testkit.Command("CLIENT", "GETNAME"), 8) // 8 MiB of replies

	reader := ts.Dial(t)
	reader.Send(t, setName+getNames)
	if got := reader.Reply(t); got != "+OK\r\n" {
		t.Fatal(got)
	}
	for range 8 {
		if r := reader.Reply(t); len(r) != 1<<20+12 {
			t.Fatalf("a reply of %d bytes", len(r))
		}
	}

	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error { // a small window: the replies wait in bucketd
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) }) //nolint:errcheck // a default buffer only makes the test slower
	}}
	c, err := d.Dial("tcp", ts.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := io.WriteString(c, setName+getNames); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * soft) // real time is the point: the client does not read
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	t.Logf("a client that does not read: %d bytes of 8 MiB of replies readable after %v, then %v", len(got), time.Since(start).Round(time.Millisecond), err)
	if isTimeout(err) || len(got) >= 8<<20 {
		t.Fatalf("read %d bytes, %v; want the connection closed before all of 8 MiB", len(got), err)
	}
	if st := ts.Server.Stats(); st.OutputLimitDisconnections != [resp.NumOutputClasses]int64{1, 0} {
		t.Errorf("output limit disconnections by class %v, want [1 0]", st.OutputLimitDisconnections)
	}
	if l := logs.String(); !strings.Contains(l, "class=normal limit=soft limit_bytes=262144") {
		t.Errorf("log:\n%s", l)
	}
}

// TestOutputLimitOfTrackingClients: a connection with CLIENT TRACKING on
// gets pushes, and is held to the pubsub class's limits until it turns
// tracking off.
func TestOutputLimitOfTrackingClients(t *testing.T) {
	ts, _ := limitedServer(t, resp.OutputLimits{resp.NormalClient: {HardBytes: 1 << 20}, resp.PubSubClient: {HardBytes: 256 << 10}})
	c := ts.Dial(t)
	echo := testkit.Command("ECHO", strings.Repeat("e", 300_000))
	for _, cmd := range []string{echo, testkit.Command("CLIENT", "TRACKING", "ON"), testkit.Command("CLIENT", "TRACKING", "OFF"), echo} {
		c.Send(t, cmd)
		if r := c.Reply(t); len(r) != 300_011 && r != "+OK\r\n" {
			t.Fatalf("a reply of %d bytes", len(r))
		}
	}
	if r := c.Do(t, "CLIENT", "TRACKING", "ON"); r != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING ON = %q", r)
	}
	c.Send(t, echo)
	expectClosedSilently(t, c, "an ECHO of 300 KB with tracking on and a pubsub hard limit of 256 KiB")
	if st := ts.Server.Stats(); st.OutputLimitDisconnections != [resp.NumOutputClasses]int64{0, 1} {
		t.Errorf("output limit disconnections by class %v, want [0 1]", st.OutputLimitDisconnections)
	}
}
