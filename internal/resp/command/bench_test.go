package command

import (
	"bytes"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/resp/wire"
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

// bufConn is a connection without a socket: a session's replies stay in
// its Writer, and handle moves them to out.
type bufConn struct {
	w     wire.Writer
	srv   *resp.Server
	out   []byte
	sess  *session
	rest  []wire.Command // the rest of the batch handle runs
	batch []wire.Command
}

func (c *bufConn) ID() int64                       { return 1 }
func (c *bufConn) Writer() *wire.Writer            { return &c.w }
func (c *bufConn) Server() *resp.Server            { return c.srv }
func (c *bufConn) SetLimits(wire.Limits)           {} // no Reader: the tests hand the session its commands
func (c *bufConn) SetOutputClass(resp.OutputClass) {}
func (c *bufConn) RemoteAddr() string              { return "127.0.0.1:1" }
func (c *bufConn) LocalAddr() string               { return "127.0.0.1:6380" }
func (c *bufConn) Created() time.Time              { return time.Time{} }
func (c *bufConn) FD() int                         { return -1 }
func (c *bufConn) Kill()                           {}
func (c *bufConn) Abort()                          {}
func (c *bufConn) Stream(resp.Stream)              {}

// handle runs cmd and then c.rest as one batch, what one read hands a
// session, and appends the replies to c.out.
func (e *Engine) handle(c *bufConn, cmd wire.Command) {
	c.batch = append(append(c.batch[:0], cmd), c.rest...)
	c.rest = nil
	c.sess.Serve(c.batch)
	c.out = append(c.out, c.w.Bytes()...)
	c.w.Reset()
}

func newBenchServer(tb testing.TB) (*Engine, *bufConn) {
	tb.Helper()
	return newBenchServerWith(tb, newInlineLimiter(), wire.Limits{})
}

// newBenchServerWith is newBenchServer with a limiter and framing limits
// of the test's.
func newBenchServerWith(tb testing.TB, lim decide.Limiter, limits wire.Limits) (*Engine, *bufConn) {
	tb.Helper()
	e, err := New(Config{Limiter: lim})
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := resp.NewServer(resp.Config{Handler: e, Limits: limits})
	if err != nil {
		tb.Fatal(err)
	}
	c := &bufConn{srv: srv}
	c.sess = e.open(c)
	c.sess.authed = true
	return e, c
}

func command(args ...string) wire.Command {
	var cmd wire.Command
	for _, a := range args {
		cmd.Args = append(cmd.Args, []byte(a))
	}
	return cmd
}

// benchHandle runs cmd through the handler b.N times on a connection that
// speaks RESP3 if resp3 is set (as after HELLO 3), RESP2 otherwise.
func benchHandle(b *testing.B, resp3 bool, cmd wire.Command) {
	srv, c := newBenchServer(b)
	c.w.SetRESP3(resp3)
	b.ReportAllocs()
	for b.Loop() {
		c.out = c.out[:0]
		srv.handle(c, cmd)
	}
}

// BenchmarkRESPParseAndReplyAcquire measures what bucketd adds per
// TB.ACQUIRE on top of the framing: command lookup, argument parsing, planning and
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

// TestParseAndReplyAllocateNothing: the bucket commands cost no allocation
// in steady state, in RESP2 and RESP3, and with CLIENT TRACKING on (the
// invalidation that follows each reply reuses the session's buffers; in
// BCAST mode the key is looked up among the prefixes), as do the RESP3
// replies that go through the scratch buffer.
func TestParseAndReplyAllocateNothing(t *testing.T) {
	for _, conn := range []struct {
		name            string
		resp3           bool
		tracking, bcast bool
	}{{"RESP2", false, false, false}, {"RESP3", true, false, false}, {"RESP3 tracking", true, true, false}, {"RESP3 BCAST", true, true, true}} {
		srv, c := newBenchServer(t)
		c.w.SetRESP3(conn.resp3)
		c.sess.tracking.on = conn.tracking
		if conn.bcast {
			c.sess.tracking.enable(trackingOptions{bcast: true, prefixes: [][]byte{[]byte("a"), []byte("user:"), []byte("z")}}) //nolint:errcheck // they do not overlap
		}
		for _, cmd := range []wire.Command{
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
