package wire

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// chunks is an io.Reader whose reads return the given chunks one by one
// (each read at most one chunk, as a socket returns what has arrived).
type chunks struct{ parts [][]byte }

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.parts[0])
	c.parts[0] = c.parts[0][n:]
	if len(c.parts[0]) == 0 {
		c.parts = c.parts[1:]
	}
	return n, nil
}

func newChunks(parts ...string) *chunks {
	c := &chunks{}
	for _, p := range parts {
		c.parts = append(c.parts, []byte(p))
	}
	return c
}

var testLimits = Limits{MaxQueryBytes: 256, MaxArgs: 8, MaxInlineBytes: 64}

// readAll reads every batch from parts and returns the commands (args
// joined by spaces), the batches they came in, and the error that ended
// the stream.
func readAll(t testing.TB, lim Limits, parts ...string) (cmds []string, batches [][]string, err error) {
	t.Helper()
	r := NewReader(newChunks(parts...), lim)
	for {
		batch, rerr := r.ReadCommands()
		if rerr != nil {
			return cmds, batches, rerr
		}
		if len(batch) == 0 {
			t.Fatal("ReadCommands returned no commands and no error")
		}
		var b []string
		for _, c := range batch {
			parts := make([]string, len(c.Args))
			for i, a := range c.Args {
				parts[i] = string(a)
			}
			b = append(b, strings.Join(parts, " "))
		}
		cmds = append(cmds, b...)
		batches = append(batches, b)
		if len(r.buf) > lim.MaxQueryBytes+batchBuf+initialBuf {
			t.Fatalf("buffer grew to %d bytes with MaxQueryBytes %d", len(r.buf), lim.MaxQueryBytes)
		}
	}
}

func TestReaderPassesCompleteCommands(t *testing.T) {
	cmds, _, err := readAll(t, testLimits,
		"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nEC", "HO\r\n$2\r\nhi\r\n", "PING\r\n", "*0\r\n*-1\r\n", "echo \"a b\"\r\n", "\r\n", "*1\r\n$0\r\n\r\n")
	if err != io.EOF {
		t.Fatalf("stream ended with %v", err)
	}
	want := []string{"PING", "ECHO hi", "PING", "echo a b", ""}
	if strings.Join(cmds, "|") != strings.Join(want, "|") || len(cmds) != len(want) {
		t.Fatalf("commands %q, want %q", cmds, want)
	}
}

func TestReaderByteAtATime(t *testing.T) {
	in := "*3\r\n$10\r\nTB.ACQUIRE\r\n$1\r\nk\r\n$2\r\n10\r\nPING\r\n"
	var parts []string
	for i := range len(in) {
		parts = append(parts, in[i:i+1])
	}
	cmds, _, err := readAll(t, testLimits, parts...)
	if err != io.EOF || len(cmds) != 2 || cmds[0] != "TB.ACQUIRE k 10" || cmds[1] != "PING" {
		t.Fatalf("got %q, %v", cmds, err)
	}
}

func TestReaderProtocolErrors(t *testing.T) {
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
		{"unprintable type byte", "*1\r\n\x01", `expected '$', got '\x1'`},
		{"payload without CRLF", "*1\r\n$4\r\nPINGXX", "invalid bulk format"},
		{"endless count line", "*111111111111111111111111111111111111", "too big mbulk count string"},
		{"endless bulk length line", "*1\r\n$111111111111111111111111111111111111", "too big bulk count string"},
		{"endless inline line", strings.Repeat("x", 100), "too big inline request"},
		{"unbalanced quotes", "echo \"abc\r\n", "unbalanced quotes in request"},
		{"inline with too many words", "a b c d e f g h i\r\n", "invalid multibulk length"},
		{"command larger than the query limit", "*2\r\n$3\r\nSET\r\n$250\r\n" + strings.Repeat("v", 240), "query buffer exceeded 256 bytes"},
		{"many small args over the query limit", "*8\r\n" + strings.Repeat("$40\r\n"+strings.Repeat("a", 40)+"\r\n", 6), "query buffer exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmds, _, err := readAll(t, testLimits, "PING\r\n", tc.in)
			var pe *ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("stream ended with %v, want a protocol error", err)
			}
			if len(cmds) != 1 || cmds[0] != "PING" {
				t.Fatalf("commands before the garbage: %q, want [PING]", cmds)
			}
			if !strings.HasPrefix(pe.Reply, "ERR Protocol error: ") || !strings.Contains(pe.Reply, tc.wantReply) {
				t.Fatalf("reply %q, want ERR Protocol error: ...%s...", pe.Reply, tc.wantReply)
			}
		})
	}
}

func TestReaderBigCommandWithinLimit(t *testing.T) {
	lim := Limits{MaxQueryBytes: 1 << 20, MaxArgs: 8, MaxInlineBytes: 64}
	val := strings.Repeat("v", 900_000)
	in := "*2\r\n$4\r\nECHO\r\n$900000\r\n" + val + "\r\n"
	var parts []string
	for i := 0; i < len(in); i += 1000 {
		parts = append(parts, in[i:min(i+1000, len(in))])
	}
	r := NewReader(newChunks(append(parts, "PING\r\n")...), lim)
	batch, err := r.ReadCommands()
	if err != nil || len(batch) != 1 || len(batch[0].Args[1]) != 900_000 {
		t.Fatalf("big command: %d commands, %v", len(batch), err)
	}
	if _, err := r.ReadCommands(); err != nil {
		t.Fatal(err)
	}
	if len(r.buf) > batchBuf {
		t.Fatalf("the buffer stays at %d bytes after the big command", len(r.buf))
	}
}

// TestReaderNeverSplitsAWrite: a pipeline that arrives in one write is
// handed out in one batch, wherever the buffer stood before it. (redcon's
// reader rewound its 4 KiB buffer only when it had grown, so a write that
// came after 3,696 bytes of other commands was read into the last 400
// bytes and answered in two batches, another client's work in between.)
func TestReaderNeverSplitsAWrite(t *testing.T) {
	peek := "*5\r\n$7\r\nTB.PEEK\r\n$1\r\nk\r\n$4\r\n1e12\r\n$3\r\n1e6\r\n$1\r\n0\r\n"
	for _, before := range []int{0, 100, 4096 - 400, 4096 - 40, 4096, 5000, 30_000} {
		echo := "*2\r\n$4\r\nECHO\r\n$" + itoa(before) + "\r\n" + strings.Repeat("x", before) + "\r\n"
		lim := Limits{MaxQueryBytes: 1 << 20}
		r := NewReader(newChunks(echo, strings.Repeat(peek, 16), strings.Repeat(peek, 300)), lim)
		if b, err := r.ReadCommands(); err != nil || len(b) != 1 {
			t.Fatalf("after %d bytes: first batch %d commands, %v", before, len(b), err)
		}
		if b, err := r.ReadCommands(); err != nil || len(b) != 16 {
			t.Fatalf("after %d bytes: a write of 16 commands came in a batch of %d (%v)", before, len(b), err)
		}
		if b, err := r.ReadCommands(); err != nil || len(b) != 300 {
			t.Fatalf("after %d bytes: a write of 300 commands (%d bytes) came in a batch of %d (%v)", before, 300*len(peek), len(b), err)
		}
	}
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// repeatReader returns the same bytes on every read, forever.
type repeatReader struct{ b []byte }

func (r repeatReader) Read(p []byte) (int, error) { return copy(p, r.b), nil }

func TestReaderAllocatesNothing(t *testing.T) {
	pipeline := strings.Repeat("*5\r\n$10\r\nTB.ACQUIRE\r\n$5\r\nkey:1\r\n$3\r\n100\r\n$2\r\n10\r\n$1\r\n1\r\n", 16)
	r := NewReader(repeatReader{[]byte(pipeline)}, Limits{})
	read := func() {
		if b, err := r.ReadCommands(); err != nil || len(b) != 16 {
			t.Fatalf("%d commands, %v", len(b), err)
		}
	}
	read()
	if allocs := testing.AllocsPerRun(1000, read); allocs != 0 {
		t.Fatalf("ReadCommands allocates %v times per pipeline of 16", allocs)
	}
}

func BenchmarkReadCommands16(b *testing.B) {
	pipeline := []byte(strings.Repeat("*5\r\n$10\r\nTB.ACQUIRE\r\n$5\r\nkey:1\r\n$3\r\n100\r\n$2\r\n10\r\n$1\r\n1\r\n", 16))
	r := NewReader(repeatReader{pipeline}, Limits{})
	b.ReportAllocs()
	b.SetBytes(int64(len(pipeline)))
	for b.Loop() {
		if _, err := r.ReadCommands(); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzReadCommands feeds arbitrary byte streams, cut into arbitrary
// chunks, through the Reader: nothing may panic, the buffer stays bounded,
// every command handed out has arguments, and the stream ends with the
// source's end or a protocol error.
func FuzzReadCommands(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n", "PING\r\n", "*2147483647\r\n", "*1\r\n$-1\r\n", "*0\r\n",
		"tb.acquire k 10 1\r\n", "\"unbalanced\r\n", "*3\r\n$10\r\nTB.ACQUIRE\r\n$1\r\nk\r\n$2\r\n10\r\n",
		"*1\r\n$3\r\nabc", "$4\r\nPING\r\n", "\r\n\r\n", "*1\r\n$0\r\n\r\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, stream []byte, cut uint8) {
		step := int(cut%16) + 1
		var parts []string
		for i := 0; i < len(stream); i += step {
			parts = append(parts, string(stream[i:min(i+step, len(stream))]))
		}
		_, batches, err := readAll(t, testLimits, parts...)
		var pe *ProtocolError
		if err != io.EOF && !errors.As(err, &pe) {
			t.Fatalf("stream ended with %v", err)
		}
		if pe != nil && (!strings.HasPrefix(pe.Reply, "ERR Protocol error: ") || strings.ContainsAny(pe.Reply, "\r\n")) {
			t.Fatalf("malformed error reply %q", pe.Reply)
		}
		for _, b := range batches {
			if len(b) == 0 {
				t.Fatal("an empty batch")
			}
		}
	})
}

// unauthLimits are the defaults for a client that has not authenticated.
var unauthLimits = Limits{Unauthenticated: true}

// TestReaderUnauthenticatedBounds: before AUTH (Limits.Unauthenticated), a
// command of more than 10 arguments or an argument announced longer than
// 16 KiB is Redis's protocol error, answered after the commands before it;
// the bounds of every client come first, and inline commands keep theirs,
// as in Redis 7.0.
func TestReaderUnauthenticatedBounds(t *testing.T) {
	args := func(n int) string { return "*" + itoa(n) + "\r\n" + strings.Repeat("$1\r\na\r\n", n) }
	for _, tc := range []struct {
		name, in, wantReply string
	}{
		{"11 arguments", "*11\r\n", "ERR Protocol error: unauthenticated multibulk length"},
		{"a bulk of 16385 bytes", "*2\r\n$4\r\nAUTH\r\n$16385\r\n", "ERR Protocol error: unauthenticated bulk length"},
		{"a bulk of 66060288 bytes", "*2\r\n$4\r\nAUTH\r\n$66060288\r\n", "ERR Protocol error: unauthenticated bulk length"},
		{"a count over max args", "*2147483647\r\n", "ERR Protocol error: invalid multibulk length"},
		{"a negative bulk length", "*1\r\n$-1\r\n", "ERR Protocol error: invalid bulk length"},
		{"a bulk over max query bytes", "*1\r\n$99999999999\r\n", "ERR Protocol error: invalid bulk length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Alone, and after a command in the same read.
			for _, parts := range [][]string{{tc.in}, {"PING\r\n" + tc.in}} {
				cmds, _, err := readAll(t, unauthLimits, parts...)
				var pe *ProtocolError
				if !errors.As(err, &pe) || pe.Reply != tc.wantReply {
					t.Fatalf("%q: commands %q, then %v; want the protocol error %q", parts, cmds, err, tc.wantReply)
				}
				if want := strings.Count(parts[0], "PING"); len(cmds) != want {
					t.Fatalf("%q: commands %q before the error; want %d", parts, cmds, want)
				}
			}
		})
	}
	in := args(10) + "*2\r\n$4\r\nAUTH\r\n$16384\r\n" + strings.Repeat("p", 16384) + "\r\n" + "a b c d e f g h i j k l\r\n"
	cmds, _, err := readAll(t, unauthLimits, in)
	if err != io.EOF || len(cmds) != 3 {
		t.Fatalf("10 arguments, a bulk of 16384 bytes, an inline command of 12 words: %d commands, %v; want 3 and the end", len(cmds), err)
	}
}

// TestReaderAuthLiftsTheBoundsOfTheCommandsAfterIt: AUTH pipelined with
// larger commands in one write. Redis runs AUTH before it reads the next
// command, so they are allowed; the Reader frames the write first, holds
// the first command over the bounds, and frames it again, under the
// limits SetLimits gave meanwhile, at the next ReadCommands.
func TestReaderAuthLiftsTheBoundsOfTheCommandsAfterIt(t *testing.T) {
	big := "*11\r\n$4\r\nPING\r\n" + strings.Repeat("$1\r\na\r\n", 10)
	echo := "*2\r\n$4\r\nECHO\r\n$20000\r\n" + strings.Repeat("e", 20000) + "\r\n"
	r := NewReader(newChunks("AUTH pw\r\nPING\r\n"+big+echo+"PING\r\n"), unauthLimits)
	batch, err := r.ReadCommands()
	if err != nil || len(batch) != 2 || string(batch[0].Args[0]) != "AUTH" {
		t.Fatalf("first batch: %d commands, %v; want AUTH and PING", len(batch), err)
	}
	r.SetLimits(Limits{}) // AUTH succeeded
	var sizes []int
	for {
		batch, err := r.ReadCommands()
		if err != nil {
			if err != io.EOF {
				t.Fatalf("after AUTH, commands of %v arguments, then %v; want the end", sizes, err)
			}
			break
		}
		for _, c := range batch {
			sizes = append(sizes, len(c.Args))
		}
	}
	if len(sizes) != 3 || sizes[0] != 11 || sizes[1] != 2 || sizes[2] != 1 {
		t.Fatalf("after AUTH, commands of %v arguments; want the 11 of PING, ECHO's 2, PING's 1", sizes)
	}

	// An AUTH that fails leaves the bounds: the command held is refused.
	r = NewReader(newChunks("AUTH wrong\r\n"+big), unauthLimits)
	if batch, err := r.ReadCommands(); err != nil || len(batch) != 1 {
		t.Fatalf("first batch: %d commands, %v", len(batch), err)
	}
	var pe *ProtocolError
	if _, err := r.ReadCommands(); !errors.As(err, &pe) || pe.Reply != "ERR Protocol error: unauthenticated multibulk length" {
		t.Fatalf("the command held, still unauthenticated: %v", err)
	}
}

// FuzzReadCommandsBeforeAuth is FuzzReadCommands for a client that has not
// authenticated, whose AUTH (any command named so) lifts the bounds after
// its batch, as the session does: every command handed out before that
// holds to the bounds of Limits.Unauthenticated (inline ones aside), and
// the stream ends as before.
func FuzzReadCommandsBeforeAuth(f *testing.F) {
	for _, s := range []string{
		"*11\r\n", "PING\r\n*11\r\n", "AUTH pw\r\n*11\r\n$1\r\na\r\n", "*2\r\n$4\r\nAUTH\r\n$16385\r\n",
		"AUTH x\r\n*2\r\n$4\r\nECHO\r\n$20000\r\n", "*1\r\n$4\r\nPING\r\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, stream []byte, cut uint8) {
		step := int(cut%16) + 1
		var parts []string
		for i := 0; i < len(stream); i += step {
			parts = append(parts, string(stream[i:min(i+step, len(stream))]))
		}
		lim := Limits{MaxQueryBytes: 1 << 20, MaxArgs: 64, MaxInlineBytes: 64}
		r := NewReader(newChunks(parts...), Limits{MaxQueryBytes: lim.MaxQueryBytes, MaxArgs: lim.MaxArgs, MaxInlineBytes: lim.MaxInlineBytes, Unauthenticated: true})
		authed := false
		for {
			batch, err := r.ReadCommands()
			if err != nil {
				var pe *ProtocolError
				if err != io.EOF && !errors.As(err, &pe) {
					t.Fatalf("stream ended with %v", err)
				}
				return
			}
			if len(batch) == 0 {
				t.Fatal("an empty batch")
			}
			for _, c := range batch {
				// An inline command, which needs a space for a second
				// argument, is bounded by MaxInlineBytes alone.
				if !authed && len(c.Args) > UnauthenticatedMaxArgs && !strings.Contains(string(stream), " ") {
					t.Fatalf("a command of %d arguments before AUTH", len(c.Args))
				}
				for _, a := range c.Args {
					if !authed && len(a) > UnauthenticatedMaxBulkBytes {
						t.Fatalf("an argument of %d bytes before AUTH", len(a))
					}
				}
			}
			for _, c := range batch {
				if EqualFold(c.Args[0], "AUTH") {
					authed = true
					r.SetLimits(lim)
				}
			}
		}
	})
}
