package resp

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// scriptedListener returns its script's errors and connections in order,
// then net.ErrClosed.
type scriptedListener struct {
	net.Listener // nil: only Accept is called
	script       []any
}

func (l *scriptedListener) Accept() (net.Conn, error) {
	if len(l.script) == 0 {
		return nil, net.ErrClosed
	}
	next := l.script[0]
	l.script = l.script[1:]
	if err, ok := next.(error); ok {
		return nil, err
	}
	return next.(net.Conn), nil
}

// TestAcceptErrorsBackOffAndLogOnceASecond is issue 10 item 7: out of file
// descriptors, accept fails again and again. The listener pauses 5 ms,
// doubling to 1 s, and starts over after a success; it logs at most one
// line a second, saying how many it held back.
func TestAcceptErrorsBackOffAndLogOnceASecond(t *testing.T) {
	var logs bytes.Buffer
	s, err := NewServer(Config{Handler: nopHandler{}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	client, server := net.Pipe()
	defer client.Close()
	script := []any{}
	for range 12 {
		script = append(script, emfile)
	}
	script = append(script, server, emfile, emfile)
	now := time.Unix(1_700_000_000, 0) // the test's clock: each pause moves it
	var pauses []time.Duration
	l := &listener{
		Listener: &scriptedListener{script: script},
		s:        s,
		now:      func() time.Time { return now },
		pause:    func(d time.Duration) { pauses = append(pauses, d); now = now.Add(d) },
	}
	if c, err := l.Accept(); err != nil || c.raw != server {
		t.Fatalf("Accept after 12 failures = %v, %v; want the scripted connection", c, err)
	}
	if _, err := l.Accept(); err != net.ErrClosed {
		t.Fatalf("Accept at the end of the script: %v, want net.ErrClosed", err)
	}
	ms := time.Millisecond
	want := []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms,
		time.Second, time.Second, time.Second, time.Second, 5 * ms, 10 * ms}
	if !slices.Equal(pauses, want) {
		t.Fatalf("pauses %v, want %v", pauses, want)
	}
	// Failures at 0, 5, 15 … 635 ms are one line; the one at 1275 ms says
	// 7 were held back; from then on a failure comes every second or
	// more; after the success, the first failure passes and the next,
	// 5 ms later, does not.
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d log lines for 14 failures over 5.3 s, want 6:\n%s", len(lines), logs.String())
	}
	for i, want := range []string{"suppressed=0", "suppressed=7", "suppressed=0"} {
		if !strings.Contains(lines[i], `msg="accept failed"`) || !strings.Contains(lines[i], want) ||
			!strings.Contains(lines[i], "fix=") {
			t.Errorf("line %d = %s; want accept failed, %s and a fix", i, lines[i], want)
		}
	}
}

// TestFitClients: the clients served within an open-file limit.
func TestFitClients(t *testing.T) {
	for _, tc := range []struct {
		asked, reserved int
		soft            uint64
		want            int
		ok              bool
	}{
		{10000, 48, 20000, 10000, true}, // fits
		{10000, 48, 10048, 10000, true}, // just fits
		{10000, 48, 10047, 9999, true},  // one short
		{1000, 48, 128, 80, true},
		{0, 48, 128, 80, true},             // 0: as many as fit
		{0, 48, 1 << 40, 1<<31 - 49, true}, // a huge limit does not overflow int
		{1000, 48, 49, 1, true},
		{1000, 48, 48, 0, false}, // not one client
		{1000, 48, 0, 0, false},
	} {
		got, ok := fitClients(tc.asked, tc.reserved, tc.soft)
		if got != tc.want || ok != tc.ok {
			t.Errorf("fitClients(%d, %d, %d) = %d, %v; want %d, %v", tc.asked, tc.reserved, tc.soft, got, ok, tc.want, tc.ok)
		}
	}
}
