package testkit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Command encodes args as one RESP command: an array of bulk strings.
func Command(args ...string) string {
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	return b.String()
}

// ErrBadFrame marks a reply that is not well-framed RESP2, as opposed to an
// I/O error such as the connection closing mid-reply.
var ErrBadFrame = errors.New("testkit: malformed RESP reply")

// Bounds on what ReadReply accepts: a bulk or an array announced larger is
// a framing error rather than a reason to allocate.
const (
	maxBulkBytes     = 512 << 20
	maxArrayElements = 1 << 20
)

// ReadReply reads one RESP2 reply of any type (simple string, error,
// integer, bulk string, array, and the null bulk and array) and returns its
// bytes exactly as they came over the wire, which print readably with %q
// and compare exactly. It checks the framing: CRLF line ends, integers that
// parse, bulks of the announced length followed by CRLF. On an error it
// returns what it read so far; the error wraps ErrBadFrame when the bytes
// are malformed, and is the reader's error otherwise.
func ReadReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return line, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return line, fmt.Errorf("%w: line %q not ended by CRLF", ErrBadFrame, line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+', '-':
		return line, nil
	case ':':
		if _, err := strconv.ParseInt(body, 10, 64); err != nil {
			return line, fmt.Errorf("%w: integer %q", ErrBadFrame, line)
		}
		return line, nil
	case '$':
		return readBulk(r, line, body)
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > maxArrayElements {
			return line, fmt.Errorf("%w: array header %q", ErrBadFrame, line)
		}
		out := line
		for range n {
			elem, err := ReadReply(r)
			out += elem
			if err != nil {
				return out, err
			}
		}
		return out, nil
	}
	return line, fmt.Errorf("%w: unknown type in %q", ErrBadFrame, line)
}

// readBulk reads the payload of a bulk string whose header line is line.
func readBulk(r *bufio.Reader, line, body string) (string, error) {
	n, err := strconv.Atoi(body)
	if err != nil || n < -1 || n > maxBulkBytes {
		return line, fmt.Errorf("%w: bulk header %q", ErrBadFrame, line)
	}
	if n == -1 {
		return line, nil
	}
	data := make([]byte, n+2)
	if _, err := io.ReadFull(r, data); err != nil {
		return line, err
	}
	if data[n] != '\r' || data[n+1] != '\n' {
		return line + string(data), fmt.Errorf("%w: bulk not ended by CRLF", ErrBadFrame)
	}
	return line + string(data), nil
}

// Conn is a raw RESP connection, for what a Redis library cannot send
// (inline commands, garbage, half a command) or does not show (the exact
// reply bytes, the connection closing). Every read goes through one buffer,
// so Read, Line and Reply can be mixed. Not safe for concurrent use.
type Conn struct {
	net.Conn
	r *bufio.Reader
}

// Dial connects to addr, with a deadline 10 s ahead for every read and
// write (set another with SetDeadline); the connection is closed when the
// test ends.
func Dial(t testing.TB, addr string) *Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return &Conn{Conn: c, r: bufio.NewReader(c)}
}

// Read reads through the connection's buffer.
func (c *Conn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Send writes raw bytes: RESP, inline commands or garbage.
func (c *Conn) Send(t testing.TB, raw string) {
	t.Helper()
	if _, err := io.WriteString(c.Conn, raw); err != nil {
		t.Fatalf("sending %.60q: %v", raw, err)
	}
}

// Do sends args as one RESP command and returns the raw bytes of its reply.
func (c *Conn) Do(t testing.TB, args ...string) string {
	t.Helper()
	c.Send(t, Command(args...))
	return c.Reply(t)
}

// Line returns the next line, CRLF included: one simple reply, or one line
// of a longer one.
func (c *Conn) Line(t testing.TB) string {
	t.Helper()
	l, err := c.r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading a reply line: %v (got %q)", err, l)
	}
	return l
}

// Reply returns the raw bytes of the next whole reply (see ReadReply).
func (c *Conn) Reply(t testing.TB) string {
	t.Helper()
	r, err := ReadReply(c.r)
	if err != nil {
		t.Fatalf("reading a reply: %v (got %q)", err, r)
	}
	return r
}

// ReadReply is ReadReply on this connection's buffer, for loops that end
// when the connection does and for goroutines other than the test's.
func (c *Conn) ReadReply() (string, error) { return ReadReply(c.r) }

// ExpectClosed fails the test unless the server has closed the connection
// with nothing more to read.
func (c *Conn) ExpectClosed(t testing.TB) {
	t.Helper()
	if extra, err := c.r.ReadString('\n'); err == nil || extra != "" {
		t.Fatalf("connection still open, read %q, %v", extra, err)
	}
}
