package resp

import (
	"bytes"
	"testing"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/tidwall/redcon"
)

// inlineCaller answers ops on the spot with the bucket math, no shards and
// no goroutine hop: it isolates parsing and reply writing.
type inlineCaller struct {
	ops     []decide.Request
	results []decide.Answer
	state   bucket.State
}

func (c *inlineCaller) Add(op decide.Request) { c.ops = append(c.ops, op) }

// AddAll answers each request of the group on its own: the inline caller
// tests parsing and replies, not the all-or-nothing rule.
func (c *inlineCaller) AddAll(reqs []decide.Request) { c.ops = append(c.ops, reqs...) }
func (c *inlineCaller) Run() ([]decide.Answer, error) {
	c.results = c.results[:0]
	for _, op := range c.ops {
		var d bucket.Decision
		c.state, d = bucket.Acquire(c.state, true, op.Limit, op.Cost, c.state.Last+1)
		c.results = append(c.results, decide.Answer{Decision: d})
	}
	c.ops = c.ops[:0]
	return c.results, nil
}

// RunIsolated is Run: the inline caller answers everything on the spot.
func (c *inlineCaller) RunIsolated() ([]decide.Answer, error) { return c.Run() }

type inlineLimiter struct{ caller *inlineCaller }

func (l inlineLimiter) NewCaller() decide.Caller { return l.caller }
func (l inlineLimiter) Stats() decide.Stats      { return decide.Stats{Shards: 1} }
func newInlineLimiter() inlineLimiter            { return inlineLimiter{&inlineCaller{}} }

// bufConn is the part of redcon.Conn the handler uses, writing replies into
// a reusable buffer the way redcon's own Writer does.
type bufConn struct {
	redcon.Conn
	out  []byte
	sess *session
	rest []redcon.Command
}

func (c *bufConn) WriteInt(n int)           { c.out = redcon.AppendInt(c.out, int64(n)) }
func (c *bufConn) WriteInt64(n int64)       { c.out = redcon.AppendInt(c.out, n) }
func (c *bufConn) WriteArray(n int)         { c.out = redcon.AppendArray(c.out, n) }
func (c *bufConn) WriteError(s string)      { c.out = redcon.AppendError(c.out, s) }
func (c *bufConn) WriteString(s string)     { c.out = redcon.AppendString(c.out, s) }
func (c *bufConn) WriteBulk(b []byte)       { c.out = redcon.AppendBulk(c.out, b) }
func (c *bufConn) WriteBulkString(s string) { c.out = redcon.AppendBulkString(c.out, s) }
func (c *bufConn) WriteNull()               { c.out = redcon.AppendNull(c.out) }
func (c *bufConn) WriteRaw(b []byte)        { c.out = append(c.out, b...) }
func (c *bufConn) Context() any             { return c.sess }
func (c *bufConn) Close() error             { return nil }
func (c *bufConn) ReadPipeline() []redcon.Command {
	r := c.rest
	c.rest = nil
	return r
}

func newBenchServer(tb testing.TB) (*Server, *bufConn) {
	tb.Helper()
	lim := newInlineLimiter()
	srv, err := NewServer(Config{Limiter: lim})
	if err != nil {
		tb.Fatal(err)
	}
	sess := &session{caller: lim.caller, authed: true}
	return srv, &bufConn{sess: sess}
}

func command(args ...string) redcon.Command {
	var cmd redcon.Command
	for _, a := range args {
		cmd.Args = append(cmd.Args, []byte(a))
	}
	return cmd
}

// benchHandle runs cmd through the handler b.N times on a connection that
// speaks RESP3 if resp3 is set (as after HELLO 3), RESP2 otherwise.
func benchHandle(b *testing.B, resp3 bool, cmd redcon.Command) {
	srv, c := newBenchServer(b)
	c.sess.resp3 = resp3
	b.ReportAllocs()
	for b.Loop() {
		c.out = c.out[:0]
		srv.handle(c, cmd)
	}
}

// BenchmarkRESPParseAndReplyAcquire measures what bucketd adds per
// TB.ACQUIRE on top of redcon: command lookup, argument parsing, planning and
// writing the reply. The bucket math runs inline; no shard hop, no network.
func BenchmarkRESPParseAndReplyAcquire(b *testing.B) {
	benchHandle(b, false, command("TB.ACQUIRE", "user:12345", "100", "10", "1"))
}

// BenchmarkRESPParseAndReplyAcquireRESP3 is the same on a RESP3 connection.
func BenchmarkRESPParseAndReplyAcquireRESP3(b *testing.B) {
	benchHandle(b, true, command("TB.ACQUIRE", "user:12345", "100", "10", "1"))
}

// BenchmarkRESPParseAndReplyAcquireWithInfo is the same with fractional
// numbers (strconv path) and the four-integer WITHINFO reply.
func BenchmarkRESPParseAndReplyAcquireWithInfo(b *testing.B) {
	benchHandle(b, false, command("tb.acquire", "user:12345", "100.5", "0.25", "1.5", "withinfo"))
}

// BenchmarkRESPParseAndReplyAcquireWithInfoRESP3 is the same on a RESP3
// connection.
func BenchmarkRESPParseAndReplyAcquireWithInfoRESP3(b *testing.B) {
	benchHandle(b, true, command("tb.acquire", "user:12345", "100.5", "0.25", "1.5", "withinfo"))
}

// BenchmarkRedconReadCommand is the baseline: what redcon's own reader
// allocates to hand one TB.ACQUIRE command to a handler.
func BenchmarkRedconReadCommand(b *testing.B) {
	one := []byte("*5\r\n$10\r\nTB.ACQUIRE\r\n$10\r\nuser:12345\r\n$3\r\n100\r\n$2\r\n10\r\n$1\r\n1\r\n")
	src := &repeatReader{chunk: one}
	rd := redcon.NewReader(src)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rd.ReadCommands(); err != nil {
			b.Fatal(err)
		}
	}
}

// repeatReader returns the same chunk forever, one chunk per Read.
type repeatReader struct{ chunk []byte }

func (r *repeatReader) Read(p []byte) (int, error) { return copy(p, r.chunk), nil }

// TestParseAndReplyAllocateNothing: the bucket commands cost no allocation
// in steady state, in RESP2 and RESP3, and with CLIENT TRACKING on (the
// invalidation that follows each reply reuses the session's buffers), as do
// the RESP3 replies that go through the scratch buffer.
func TestParseAndReplyAllocateNothing(t *testing.T) {
	for _, conn := range []struct {
		name     string
		resp3    bool
		tracking bool
	}{{"RESP2", false, false}, {"RESP3", true, false}, {"RESP3 tracking", true, true}} {
		srv, c := newBenchServer(t)
		c.sess.resp3 = conn.resp3
		c.sess.tracking.on = conn.tracking
		for _, cmd := range []redcon.Command{
			command("TB.ACQUIRE", "user:1", "100", "10", "1"),
			command("tb.acquire", "user:1", "100.5", "0.25", "1.5", "withinfo"),
			command("TB.PEEK", "user:1", "100", "10"),
			command("TB.ACQUIRE", "user:1", "nan", "10"), // an error reply is a constant
			command("CLIENT", "GETNAME"),
			command("CLIENT", "TRACKINGINFO"),
			command("COMMAND", "DOCS"),
		} {
			allocs := testing.AllocsPerRun(1000, func() {
				c.out = c.out[:0]
				srv.handle(c, cmd)
			})
			if allocs != 0 {
				t.Errorf("%s: %s: %v allocations per command, want 0", conn.name, bytes.Join(cmd.Args, []byte(" ")), allocs)
			}
			pushed := bytes.Contains(c.out, []byte(">2\r\n$10\r\ninvalidate\r\n"))
			if want := conn.tracking && cmd.Args[0][0]|0x20 == 't' && !bytes.Equal(cmd.Args[2], []byte("nan")); pushed != want {
				t.Errorf("%s: %s: reply %q, want an invalidation: %v", conn.name, bytes.Join(cmd.Args, []byte(" ")), c.out, want)
			}
		}
	}
}
