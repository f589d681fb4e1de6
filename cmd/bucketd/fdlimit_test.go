package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/testkit"
)

// startWithFileLimit runs bucketd with its open-file limit (soft and hard)
// set to limit, through a shell that sets it and execs the binary: the
// process keeps the shell's pid, so the test's cleanup stops it.
func startWithFileLimit(t *testing.T, limit int, args ...string) *process {
	t.Helper()
	wrapper := filepath.Join(t.TempDir(), "bucketd-ulimit")
	script := "#!/bin/sh\nulimit -n " + strconv.Itoa(limit) + " || exit 3\nexec '" + binary + "' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return startExecutable(t, wrapper, args...)
}

var effectiveLine = regexp.MustCompile(`level=WARN msg="[^"]*open-file limit[^"]*" .*effective_max_clients=(\d+).*`)

// TestOpenFileLimitBoundsClients is issue 10 item 7: --max-clients above
// what the open-file limit allows. bucketd says so at start and serves
// fewer clients; a client beyond them gets "-ERR max number of clients
// reached" instead of waiting in the backlog; accept errors, if any, are
// logged at a bounded rate; /metrics still answers.
func TestOpenFileLimitBoundsClients(t *testing.T) {
	testkit.SkipShort(t, "fault injection: the open-file limit exhausted, a second's wait per refused client")
	const limit, total = 128, 160
	p := startWithFileLimit(t, limit, "--max-clients", "1000")
	effective := -1
	if m := effectiveLine.FindStringSubmatch(p.stderr.String()); m == nil ||
		!strings.Contains(m[0], "max_clients=1000") || !strings.Contains(m[0], "open_file_limit="+strconv.Itoa(limit)) {
		t.Errorf("no start-up warning naming --max-clients 1000, the limit %d and the clients served:\n%s", limit, p.stderr)
	} else {
		effective, _ = strconv.Atoi(m[1])
	}

	replies := firstReplies(t, p.addr, total)
	var pong, refused int
	var other []string
	for _, r := range replies {
		switch r {
		case "+PONG\r\n":
			pong++
		case "-ERR max number of clients reached\r\n":
			refused++
		default:
			other = append(other, r)
		}
	}
	if len(other) > 0 {
		t.Errorf("%d of %d clients got neither PONG nor the max-clients refusal, e.g. %q", len(other), total, other[0])
	}
	if effective >= 0 && pong != effective {
		t.Errorf("%d clients served, the start-up line said %d", pong, effective)
	}

	// The clients served are still connected: the metrics port answers
	// beside them.
	hc := &http.Client{Timeout: 5 * time.Second}
	res, err := hc.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		t.Errorf("/metrics with %d clients connected: %v", pong, err)
	} else {
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		for _, want := range []string{
			"bucketd_connected_clients " + strconv.Itoa(pong) + "\n",
			"bucketd_rejected_connections_total " + strconv.Itoa(refused) + "\n",
		} {
			if !strings.Contains(string(body), want) {
				t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
			}
		}
	}
	if n := strings.Count(p.stderr.String(), "accept failed"); n > 3 {
		t.Errorf("%d 'accept failed' lines in a few seconds, want at most one a second", n)
	}
	p.stop(t)
}

// firstReplies opens n connections to addr, one after the other, and
// returns the first line each one read: a refused connection reads its
// refusal without sending anything; one that reads nothing within a
// second sends PING and reads the answer. A connection left in the
// listen backlog reads nothing at all and reports its error.
func firstReplies(t *testing.T, addr string, n int) []string {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	out := make([]string, n)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			r := bufio.NewReader(c)
			c.SetReadDeadline(time.Now().Add(time.Second)) //nolint:errcheck // a fresh conn
			line, err := r.ReadString('\n')
			if err == nil {
				out[i] = line
				return
			}
			c.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
			if _, err := c.Write([]byte("PING\r\n")); err != nil {
				out[i] = "write: " + err.Error()
				return
			}
			if line, err = r.ReadString('\n'); err != nil {
				line += " read: " + err.Error()
			}
			out[i] = line
		})
	}
	wg.Wait()
	return out
}
