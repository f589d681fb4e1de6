package resp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

// scriptConn is a net.Conn whose reads return the given chunks one by one
// and whose writes are recorded: the guard's input and its error replies.
type scriptConn struct {
	chunks  [][]byte
	written bytes.Buffer
}

func (c *scriptConn) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	if len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}
func (c *scriptConn) Write(p []byte) (int, error)      { return c.written.Write(p) }
func (c *scriptConn) Close() error                     { return nil }
func (c *scriptConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *scriptConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *scriptConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }

var testLimits = Limits{MaxQueryBytes: 256, MaxArgs: 8, MaxInlineBytes: 64}

// readAll pushes chunks through a guard into redcon's reader and returns
// the commands redcon parsed (args joined by spaces), the error that ended
// the stream, and what the guard wrote back to the client.
func readAll(t testing.TB, lim Limits, chunks ...string) (cmds []string, err error, reply string) {
	t.Helper()
	sc := &scriptConn{}
	for _, c := range chunks {
		sc.chunks = append(sc.chunks, []byte(c))
	}
	g := newGuardConn(sc, &lim)
	rd := redcon.NewReader(g)
	for {
		batch, rerr := rd.ReadCommands()
		for _, c := range batch {
			parts := make([]string, len(c.Args))
			for i, a := range c.Args {
				parts[i] = string(a)
			}
			cmds = append(cmds, strings.Join(parts, " "))
		}
		if rerr != nil {
			return cmds, rerr, sc.written.String()
		}
		if len(g.buf) > lim.MaxQueryBytes+2*guardInitialBuf {
			t.Fatalf("guard buffer grew to %d bytes with MaxQueryBytes %d", len(g.buf), lim.MaxQueryBytes)
		}
	}
}

func TestGuardPassesCompleteCommands(t *testing.T) {
	cmds, err, reply := readAll(t, testLimits,
		"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nEC", "HO\r\n$2\r\nhi\r\n", "PING\r\n", "*0\r\n*-1\r\n", "echo \"a b\"\r\n")
	if err != io.EOF || reply != "" {
		t.Fatalf("stream ended with %v, reply %q", err, reply)
	}
	want := []string{"PING", "ECHO hi", "PING", "echo a b"}
	if strings.Join(cmds, "|") != strings.Join(want, "|") {
		t.Fatalf("commands %q, want %q", cmds, want)
	}
}

func TestGuardByteAtATime(t *testing.T) {
	in := "*3\r\n$10\r\nTB.ACQUIRE\r\n$1\r\nk\r\n$2\r\n10\r\nPING\r\n"
	var chunks []string
	for i := range len(in) {
		chunks = append(chunks, in[i:i+1])
	}
	cmds, err, _ := readAll(t, testLimits, chunks...)
	if err != io.EOF || len(cmds) != 2 || cmds[0] != "TB.ACQUIRE k 10" || cmds[1] != "PING" {
		t.Fatalf("got %q, %v", cmds, err)
	}
}

func TestGuardProtocolErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, wantReply string
	}{
		{"huge count", "*2147483647\r\n", "invalid multibulk length"},
		{"count over max args", "*9\r\n", "invalid multibulk length"},
		{"non-numeric count", "*abc\r\n", "invalid multibulk length"},
		{"count without CR", "*1\n$4\r\nPING\r\n", "invalid multibulk length"},
		{"negative bulk length", "*1\r\n$-5\r\n", "invalid bulk length"},
		{"bulk longer than the query limit", "*1\r\n$536870912\r\n", "invalid bulk length"},
		{"wrong type byte", "*1\r\n:4\r\nPING\r\n", "expected '$', got ':'"},
		{"payload without CRLF", "*1\r\n$4\r\nPINGXX", "invalid bulk format"},
		{"endless count line", "*111111111111111111111111111111111111", "too big mbulk count string"},
		{"endless inline line", strings.Repeat("x", 100), "too big inline request"},
		{"command larger than the query limit", "*2\r\n$3\r\nSET\r\n$250\r\n" + strings.Repeat("v", 240), "query buffer exceeded 256 bytes"},
		{"many small args over the query limit", "*8\r\n" + strings.Repeat("$40\r\n"+strings.Repeat("a", 40)+"\r\n", 6), "query buffer exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmds, err, reply := readAll(t, testLimits, "PING\r\n", tc.in)
			if !errors.Is(err, errGuardClosed) {
				t.Fatalf("stream ended with %v, want the guard to close it", err)
			}
			if len(cmds) != 1 || cmds[0] != "PING" {
				t.Fatalf("commands before the garbage: %q, want [PING]", cmds)
			}
			if !strings.HasPrefix(reply, "-ERR Protocol error: ") || !strings.Contains(reply, tc.wantReply) || !strings.HasSuffix(reply, "\r\n") {
				t.Fatalf("reply %q, want -ERR Protocol error: ...%s...", reply, tc.wantReply)
			}
		})
	}
}

func TestGuardBigCommandWithinLimit(t *testing.T) {
	lim := Limits{MaxQueryBytes: 1 << 20, MaxArgs: 8, MaxInlineBytes: 64}
	val := strings.Repeat("v", 900_000)
	in := "*2\r\n$4\r\nECHO\r\n$900000\r\n" + val + "\r\n"
	var chunks []string
	for i := 0; i < len(in); i += 1000 {
		chunks = append(chunks, in[i:min(i+1000, len(in))])
	}
	cmds, err, reply := readAll(t, lim, chunks...)
	if err != io.EOF || reply != "" || len(cmds) != 1 || len(cmds[0]) != len("ECHO ")+900_000 {
		t.Fatalf("big command: %d cmds, err %v, reply %q", len(cmds), err, reply)
	}
}

// FuzzGuardStream feeds arbitrary byte streams, cut into arbitrary chunks,
// through the guard into redcon's reader: nothing may panic, the guard's
// buffer stays bounded, and redcon never sees a frame it cannot parse
// (only its inline quoting errors remain possible).
func FuzzGuardStream(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n", "PING\r\n", "*2147483647\r\n", "*1\r\n$-1\r\n", "*0\r\n",
		"tb.acquire k 10 1\r\n", "\"unbalanced\r\n", "*3\r\n$10\r\nTB.ACQUIRE\r\n$1\r\nk\r\n$2\r\n10\r\n",
		"*1\r\n$3\r\nabc", "$4\r\nPING\r\n", "\r\n\r\n", "*1\r\n$0\r\n\r\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, stream []byte, cut uint8) {
		step := int(cut%16) + 1
		var chunks []string
		for i := 0; i < len(stream); i += step {
			chunks = append(chunks, string(stream[i:min(i+step, len(stream))]))
		}
		_, err, reply := readAll(t, testLimits, chunks...)
		switch {
		case err == io.EOF, errors.Is(err, errGuardClosed):
		case err != nil && strings.Contains(err.Error(), "unbalanced quotes"):
		default:
			t.Fatalf("redcon failed with %v on a stream the guard passed", err)
		}
		if reply != "" && (!strings.HasPrefix(reply, "-ERR Protocol error: ") || strings.Count(reply, "\r\n") != 1) {
			t.Fatalf("malformed error reply %q", reply)
		}
	})
}

func TestSplitInlineLikeRedis(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // nil: unbalanced quotes
	}{
		{"PING", []string{"PING"}},
		{"  set\tk \v v \f", []string{"set", "k", "v"}},
		{`echo "a b"`, []string{"echo", "a b"}},
		{`echo a"b c"d`, nil},
		{`echo a"b c"`, []string{"echo", "ab c"}},
		{`echo "\x41\x4a\n\t\\\"q"`, []string{"echo", "AJ\n\t\\\"q"}},
		{`echo "\xZZ"`, []string{"echo", "xZZ"}},
		{`echo 'it\'s' ''`, []string{"echo", "it's", ""}},
		{`echo 'a\nb'`, []string{"echo", `a\nb`}},
		{`echo "abc`, nil},
		{`echo 'abc`, nil},
		{`echo "a"b`, nil},
		{"", []string{}},
	} {
		words, ok := splitInline([]byte(tc.in))
		if tc.want == nil {
			if ok {
				t.Errorf("%q: split into %q, want unbalanced quotes", tc.in, words)
			}
			continue
		}
		got := make([]string, len(words))
		for i, w := range words {
			got[i] = string(w)
		}
		if !ok || strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("%q: got %q (ok %v), want %q", tc.in, got, ok, tc.want)
		}
	}
}
