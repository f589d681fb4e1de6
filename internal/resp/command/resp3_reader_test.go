package command_test

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/bucketd/bucketd/internal/testkit"
)

// readRESP3 reads one reply of any RESP2 or RESP3 type and returns its
// bytes exactly as they came: simple types (+ - : _ , # ( and the RESP2
// nulls), blobs ($ = !) and aggregates (* ~ > and %, whose count is of
// pairs). testkit.ReadReply reads RESP2 only; the replies a RESP3
// connection gets need this one. It checks the framing as ReadReply does.
func readRESP3(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return line, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return line, fmt.Errorf("line %q not ended by CRLF", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+', '-', '_', ',', '#', '(':
		return line, nil
	case ':':
		if _, err := strconv.ParseInt(body, 10, 64); err != nil {
			return line, fmt.Errorf("integer %q", line)
		}
		return line, nil
	case '$', '=', '!':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > 64<<20 {
			return line, fmt.Errorf("blob header %q", line)
		}
		if n == -1 {
			return line, nil
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(r, data); err != nil {
			return line, err
		}
		if data[n] != '\r' || data[n+1] != '\n' {
			return line + string(data), fmt.Errorf("blob not ended by CRLF")
		}
		return line + string(data), nil
	case '*', '~', '>', '%':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > 1<<20 {
			return line, fmt.Errorf("aggregate header %q", line)
		}
		if line[0] == '%' {
			n *= 2
		}
		out := line
		for range n {
			elem, err := readRESP3(r)
			out += elem
			if err != nil {
				return out, err
			}
		}
		return out, nil
	}
	return line, fmt.Errorf("unknown type in %q", line)
}

// conn3 is a raw connection that reads RESP3 replies.
type conn3 struct {
	*testkit.Conn
	r *bufio.Reader
}

// dial3 opens a raw connection to addr for RESP3 replies.
func dial3(t testing.TB, addr string) *conn3 {
	t.Helper()
	c := testkit.Dial(t, addr)
	return &conn3{Conn: c, r: bufio.NewReader(c)}
}

// reply returns the raw bytes of the next reply.
func (c *conn3) reply(t testing.TB) string {
	t.Helper()
	r, err := readRESP3(c.r)
	if err != nil {
		t.Fatalf("reading a reply: %v (got %q)", err, r)
	}
	return r
}

// do sends args as one command and returns the raw bytes of its reply.
func (c *conn3) do(t testing.TB, args ...string) string {
	t.Helper()
	c.Send(t, testkit.Command(args...))
	return c.reply(t)
}

// expectReplies reads one reply per want and fails on the first that
// differs, with HELLO's id masked in both (see maskID).
func (c *conn3) expectReplies(t testing.TB, what string, want ...string) {
	t.Helper()
	for i, w := range want {
		if got := maskID(c.reply(t)); got != maskID(w) {
			t.Fatalf("%s, reply %d:\n got %q\nwant %q", what, i+1, got, maskID(w))
		}
	}
}

// helloIDValue matches the connection id in a HELLO reply, which depends
// on how many connections the server has accepted.
var helloIDValue = regexp.MustCompile(`\$2\r\nid\r\n:[0-9]+\r\n`)

// maskID replaces the connection id of a HELLO reply with "<id>".
func maskID(reply string) string {
	return helloIDValue.ReplaceAllString(reply, "$$2\r\nid\r\n:<id>\r\n")
}

// hello3 is the map HELLO 3 answers with, id masked; hello2 the flat array
// of HELLO 2. The server's version is "dev" in tests.
const (
	hello3 = "%7\r\n$6\r\nserver\r\n$7\r\nbucketd\r\n$7\r\nversion\r\n$3\r\ndev\r\n$5\r\nproto\r\n:3\r\n" +
		"$2\r\nid\r\n:<id>\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
	hello2 = "*14\r\n$6\r\nserver\r\n$7\r\nbucketd\r\n$7\r\nversion\r\n$3\r\ndev\r\n$5\r\nproto\r\n:2\r\n" +
		"$2\r\nid\r\n:<id>\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
)

// commands encodes several commands as one write, as a pipelining client
// sends them.
func commands(cmds ...[]string) string {
	var b strings.Builder
	for _, c := range cmds {
		b.WriteString(testkit.Command(c...))
	}
	return b.String()
}
