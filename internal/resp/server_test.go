package resp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/shard"
	"github.com/redis/go-redis/v9"
)

// testServer runs a Server on 127.0.0.1:0 in this process.
type testServer struct {
	addr  string
	srv   *Server
	group *shard.Group
	done  chan error
}

func startServer(t testing.TB, adjust func(*Config)) *testServer {
	t.Helper()
	group := shard.New(shard.Config{Shards: 4})
	cfg := Config{Limiter: Memory(group)}
	if adjust != nil {
		adjust(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{addr: ln.Addr().String(), srv: srv, group: group, done: make(chan error, 1)}
	go func() { ts.done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-ts.done; err != nil {
			t.Errorf("serve: %v", err)
		}
		group.Close()
	})
	return ts
}

func (ts *testServer) client(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: ts.addr, MaxRetries: -1}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// do runs one command and returns its reply or error text, in a form
// that reads well in test tables.
func do(t testing.TB, c *redis.Client, args ...any) any {
	t.Helper()
	v, err := c.Do(context.Background(), args...).Result()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return nil
		}
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			t.Fatalf("%v: transport error %v", args, err)
		}
		return "ERROR " + err.Error()
	}
	return v
}

func ints(v ...int64) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = x
	}
	return out
}

func equal(a, b any) bool { return fmt.Sprintf("%#v", a) == fmt.Sprintf("%#v", b) }

func expect(t *testing.T, c *redis.Client, want any, args ...any) {
	t.Helper()
	if got := do(t, c, args...); !equal(got, want) {
		t.Fatalf("%q:\n got %#v\nwant %#v", args, got, want)
	}
}

func TestAcquireReplies(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)
	expect(t, c, int64(1), "TB.ACQUIRE", "user:1", "10", "1")
	expect(t, c, int64(1), "tb.acquire", "user:1", "10", "1", "3")
	expect(t, c, ints(1, 5, 0, 5000), "Tb.Acquire", "user:1", "10", "1", "1", "withinfo")
	expect(t, c, ints(0, 5, 1000, 5000), "TB.ACQUIRE", "user:1", "10", "1", "6", "WITHINFO")
	expect(t, c, ints(1, 4, 0, 6000), "TB.ACQUIRE", "user:1", "10", "1", "WITHINFO") // cost defaults to 1
	expect(t, c, int64(0), "TB.ACQUIRE", "user:1", "10", "1", "5")
	expect(t, c, ints(0, 4, -1, 6000), "TB.ACQUIRE", "user:1", "10", "1", "11", "WITHINFO")
	expect(t, c, int64(1), "DBSIZE")
}

func TestCostZeroAndPeekChangeNothing(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)
	expect(t, c, int64(1), "TB.ACQUIRE", "k", "10", "1", "0")
	expect(t, c, ints(1, 10, 0, 0), "TB.ACQUIRE", "k", "10", "1", "0", "WITHINFO")
	expect(t, c, ints(1, 9, 0, 1000), "TB.PEEK", "k", "10", "1")
	expect(t, c, ints(1, 7, 0, 3000), "TB.PEEK", "k", "10", "1", "3")
	expect(t, c, ints(0, 10, -1, 0), "TB.PEEK", "k", "10", "1", "11")
	expect(t, c, int64(0), "DBSIZE")
	expect(t, c, int64(1), "TB.ACQUIRE", "k", "10", "0.001", "4")
	// A smaller capacity in a peek lowers the answer, not the stored state.
	expect(t, c, ints(1, 2, 0, 1000000), "TB.PEEK", "k", "3", "0.001")
	expect(t, c, ints(1, 5, 0, 5000000), "TB.PEEK", "k", "10", "0.001")
	expect(t, c, int64(1), "DBSIZE")
}

func TestResetCountsLikeDel(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)
	for _, k := range []string{"a", "b", "c"} {
		expect(t, c, int64(1), "TB.ACQUIRE", k, "5", "1")
	}
	expect(t, c, int64(2), "TB.RESET", "a", "b", "a", "missing")
	expect(t, c, int64(0), "TB.RESET", "a")
	expect(t, c, int64(1), "DBSIZE")
	expect(t, c, ints(1, 4, 0, 1000), "TB.ACQUIRE", "a", "5", "1", "1", "WITHINFO") // full again
}

func TestBinarySafeKeys(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)
	k1, k2 := "a\x00b\r\nc", "a\x00b\r\nd"
	expect(t, c, int64(1), "TB.ACQUIRE", k1, "1", "0.001")
	expect(t, c, int64(0), "TB.ACQUIRE", k1, "1", "0.001")
	expect(t, c, int64(1), "TB.ACQUIRE", k2, "1", "0.001")
	expect(t, c, int64(1), "TB.ACQUIRE", "", "1", "0.001") // the empty key is a key, as in Redis
	expect(t, c, int64(3), "DBSIZE")
}

func TestIntegerRepliesSaturate(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)
	expect(t, c, ints(1, 1e15-1, 0, math.MaxInt64), "TB.ACQUIRE", "k", "1e15", "1e-300", "1", "WITHINFO")
	expect(t, c, ints(0, 1e15-1, math.MaxInt64, math.MaxInt64), "TB.ACQUIRE", "k", "1e15", "1e-300", "1e15", "WITHINFO")
}

func TestBadInputNamesTheProblemAndChangesNothing(t *testing.T) {
	ts := startServer(t, func(cfg *Config) { cfg.MaxKeyBytes = 8 })
	c := ts.client(t)
	var (
		arityAcq  = "ERROR ERR wrong number of arguments for 'tb.acquire' command"
		arityPeek = "ERROR ERR wrong number of arguments for 'tb.peek' command"
		badCap    = "ERROR " + errInvalidCapacity.text
		badRate   = "ERROR " + errInvalidRate.text
		badCost   = "ERROR " + errInvalidCost.text
	)
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"TB.ACQUIRE"}, arityAcq},
		{[]any{"TB.ACQUIRE", "k"}, arityAcq},
		{[]any{"TB.ACQUIRE", "k", "10"}, arityAcq},
		{[]any{"TB.ACQUIRE", "k", "10", "1", "1", "WITHINFO", "x"}, arityAcq},
		{[]any{"TB.PEEK", "k", "10"}, arityPeek},
		{[]any{"TB.PEEK", "k", "10", "1", "1", "WITHINFO"}, arityPeek},
		{[]any{"TB.RESET"}, "ERROR ERR wrong number of arguments for 'tb.reset' command"},
		{[]any{"TB.ACQUIRE", "123456789", "10", "1"}, "ERROR " + errKeyTooLong.text},
		{[]any{"TB.RESET", "ok", "123456789"}, "ERROR " + errKeyTooLong.text},
		{[]any{"TB.ACQUIRE", "k", "0", "1"}, badCap},
		{[]any{"TB.ACQUIRE", "k", "-1", "1"}, badCap},
		{[]any{"TB.ACQUIRE", "k", "-0", "1"}, badCap},
		{[]any{"TB.ACQUIRE", "k", "", "1"}, badCap},
		{[]any{"TB.ACQUIRE", "k", "nan", "1"}, badCap},
		{[]any{"TB.ACQUIRE", "k", "inf", "1"}, badCap},
		{[]any{"TB.ACQUIRE", "k", "0x10", "1"}, badCap},
		{[]any{"TB.ACQUIRE", "k", "1_000", "1"}, badCap},
		{[]any{"TB.ACQUIRE", "k", " 10", "1"}, badCap},
		{[]any{"TB.ACQUIRE", "k", "ten", "1"}, badCap},
		{[]any{"TB.ACQUIRE", "k", "1e999", "1"}, badCap},
		{[]any{"TB.ACQUIRE", "k", "1.000000000000001e15", "1"}, "ERROR " + errCapacityTooLarge.text},
		{[]any{"TB.ACQUIRE", "k", "10", "0"}, badRate},
		{[]any{"TB.ACQUIRE", "k", "10", "-5"}, badRate},
		{[]any{"TB.ACQUIRE", "k", "10", "NaN"}, badRate},
		{[]any{"TB.ACQUIRE", "k", "10", "2e15"}, "ERROR " + errRateTooLarge.text},
		{[]any{"TB.ACQUIRE", "k", "10", "1", "-1"}, badCost},
		{[]any{"TB.ACQUIRE", "k", "10", "1", "x"}, badCost},
		{[]any{"TB.ACQUIRE", "k", "10", "1", "Infinity"}, badCost},
		{[]any{"TB.ACQUIRE", "k", "10", "1", "1e16"}, "ERROR " + errCostTooLarge.text},
		{[]any{"TB.PEEK", "k", "10", "1", "-1"}, badCost},
		{[]any{"TB.ACQUIRE", "k", "10", "1", "1", "WITHOUTINFO"}, "ERROR " + errSyntax.text},
	} {
		if got := do(t, c, tc.args...); got != tc.want {
			t.Errorf("%q:\n got %#v\nwant %#v", tc.args, got, tc.want)
		}
	}
	// The connection is still usable and nothing was created.
	expect(t, c, "PONG", "PING")
	expect(t, c, int64(0), "DBSIZE")
	expect(t, c, int64(1), "TB.ACQUIRE", "k", "1e15", "1e15", "1e15") // the bounds are inclusive
	expect(t, c, int64(1), "TB.ACQUIRE", "k2", "+10", ".5", "0.25")
}

func TestRedisHousekeepingCommands(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)
	expect(t, c, "PONG", "PING")
	expect(t, c, "hello", "ping", "hello")
	expect(t, c, "ERROR ERR wrong number of arguments for 'ping' command", "PING", "a", "b")
	expect(t, c, "x y", "ECHO", "x y")
	expect(t, c, "ERROR ERR wrong number of arguments for 'echo' command", "ECHO")
	expect(t, c, "OK", "SELECT", "0")
	expect(t, c, "ERROR "+errDBIndex.text, "SELECT", "1")
	expect(t, c, "ERROR "+errNotInteger.text, "SELECT", "zero")
	expect(t, c, "ERROR "+errNoProto.text, "HELLO", "3")
	expect(t, c, "ERROR "+errProtoVersion.text, "HELLO", "x")
	expect(t, c, "OK", "CLIENT", "SETNAME", "worker-1")
	expect(t, c, "worker-1", "CLIENT", "GETNAME")
	expect(t, c, "ERROR "+errClientName.text, "CLIENT", "SETNAME", "has space")
	expect(t, c, "OK", "CLIENT", "SETINFO", "LIB-NAME", "x")
	expect(t, c, "OK", "client", "setinfo", "lib-ver", "1.0")
	expect(t, c, "ERROR ERR Unrecognized option 'color'", "CLIENT", "SETINFO", "color", "red")
	expect(t, c, "ERROR ERR unknown subcommand 'FLY'. Try CLIENT HELP.", "CLIENT", "FLY")
	expect(t, c, int64(len(commandTable)), "COMMAND", "COUNT")
	expect(t, c, []any{}, "COMMAND", "DOCS")
	expect(t, c, []any{"save", "", "appendonly", "no"}, "CONFIG", "GET", "save", "appendonly")
	expect(t, c, []any{}, "CONFIG", "GET", "no-such-param")
	expect(t, c, "ERROR "+errNoPasswordSet.text, "AUTH", "secret")
	expect(t, c, "ERROR ERR unknown command 'FOO', with args beginning with: 'a' 'b c' ", "FOO", "a", "b c")
	expect(t, c, "ERROR ERR unknown command 'nope', with args beginning with: ", "nope")
	expect(t, c, int64(0), "DBSIZE")
	expect(t, c, "ERROR ERR wrong number of arguments for 'dbsize' command", "DBSIZE", "x")

	hello, ok := do(t, c, "HELLO", "2").([]any)
	if !ok || len(hello) != 14 || hello[0] != "server" || hello[1] != "bucketd" || hello[4] != "proto" || hello[5] != int64(2) {
		t.Fatalf("HELLO 2 = %#v", hello)
	}
	id, ok := do(t, c, "CLIENT", "ID").(int64)
	if !ok || id <= 0 {
		t.Fatalf("CLIENT ID = %v", id)
	}
	info, ok := do(t, c, "COMMAND", "INFO", "tb.acquire", "nosuch").([]any)
	if !ok || len(info) != 2 || info[1] != nil {
		t.Fatalf("COMMAND INFO = %#v", info)
	}
	if entry, ok := info[0].([]any); !ok || entry[0] != "tb.acquire" || entry[1] != int64(-4) {
		t.Fatalf("COMMAND INFO tb.acquire = %#v", info[0])
	}
}

func TestInfoReportsBucketCounters(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)
	expect(t, c, int64(1), "TB.ACQUIRE", "a", "1", "0.001")
	expect(t, c, int64(0), "TB.ACQUIRE", "a", "1", "0.001")
	expect(t, c, int64(1), "TB.ACQUIRE", "b", "1", "0.001")
	all, ok := do(t, c, "INFO").(string)
	if !ok {
		t.Fatal("INFO did not answer a bulk string")
	}
	for _, section := range []string{"# Server", "# Clients", "# Memory", "# Stats", "# Bucketd"} {
		if !strings.Contains(all, section+"\r\n") {
			t.Errorf("INFO lacks section %q", section)
		}
	}
	bucketd := do(t, c, "INFO", "bucketd").(string)
	for _, field := range []string{"buckets:2\r\n", "acquire_allowed_total:2\r\n", "acquire_denied_total:1\r\n"} {
		if !strings.Contains(bucketd, field) {
			t.Errorf("INFO bucketd lacks %q:\n%s", field, bucketd)
		}
	}
	if strings.Contains(bucketd, "# Server") {
		t.Errorf("INFO bucketd returned other sections")
	}
	if clients := do(t, c, "INFO", "clients").(string); !strings.Contains(clients, "connected_clients:1\r\n") {
		t.Errorf("INFO clients: %s", clients)
	}
	// Memory: the bucket tables are counted apart from the Go heap, and
	// used_memory is the sum of the two.
	mem := map[string]int64{}
	for _, line := range strings.Split(do(t, c, "INFO", "memory").(string), "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			mem[k], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if mem["used_memory_tables"] <= 0 || mem["used_memory_heap"] <= 0 ||
		mem["used_memory"] != mem["used_memory_heap"]+mem["used_memory_tables"] {
		t.Errorf("INFO memory: used_memory %d, heap %d, tables %d; want both parts > 0 and their sum",
			mem["used_memory"], mem["used_memory_heap"], mem["used_memory_tables"])
	}
}

func TestGoRedisWithDefaultsAndRESP2(t *testing.T) {
	ts := startServer(t, nil)
	for _, proto := range []int{0, 2, 3} {
		c := ts.client(t, func(o *redis.Options) { o.Protocol = proto; o.ClientName = "app" })
		if got := do(t, c, "TB.ACQUIRE", fmt.Sprint("p", proto), "2", "1"); got != int64(1) {
			t.Fatalf("protocol %d: %v", proto, got)
		}
		if got := do(t, c, "CLIENT", "GETNAME"); got != "app" {
			t.Fatalf("protocol %d: name %v", proto, got)
		}
	}
}

func TestPipelineRepliesInOrder(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)
	ctx := context.Background()
	var cmds []*redis.Cmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 40 {
			cmds = append(cmds, p.Do(ctx, "TB.ACQUIRE", fmt.Sprint("key", i%7), "3", "0.001"))
			if i%10 == 9 {
				cmds = append(cmds, p.Do(ctx, "DBSIZE"))
			}
		}
		cmds = append(cmds, p.Do(ctx, "TB.ACQUIRE", "k", "bad", "1"))
		cmds = append(cmds, p.Do(ctx, "PING"))
		return nil
	})
	if err == nil {
		t.Fatal("the pipeline held a bad command; Pipelined should report it")
	}
	var got []string
	for _, cmd := range cmds {
		v, err := cmd.Result()
		if err != nil {
			got = append(got, err.Error())
		} else {
			got = append(got, fmt.Sprint(v))
		}
	}
	// Keys key0..key6 each take 3 tokens over 40 calls; DBSIZE sees the
	// buckets created by the commands before it.
	var want []string
	seen := map[int]int{}
	for i := range 40 {
		seen[i%7]++
		if seen[i%7] <= 3 {
			want = append(want, "1")
		} else {
			want = append(want, "0")
		}
		if i%10 == 9 {
			want = append(want, fmt.Sprint(min(i+1, 7)))
		}
	}
	want = append(want, errInvalidCapacity.text, "PONG")
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("pipeline replies\n got %v\nwant %v", got, want)
	}
}

// TestBurstAllowsExactlyCapacity is the seed's burst test: 2 × capacity
// acquires in a tight loop allow exactly capacity; after one refill interval
// the tokens are back. Sequentially, then from 50 connections at once.
func TestBurstAllowsExactlyCapacity(t *testing.T) {
	ts := startServer(t, nil)
	const capacity = 100
	const rate = "200" // full refill in 0.5 s; a burst of a few ms refills < 1 token
	t.Run("sequential", func(t *testing.T) {
		c := ts.client(t)
		burst := func() int {
			allowed := 0
			for range 2 * capacity {
				if do(t, c, "TB.ACQUIRE", "seq", capacity, rate) == int64(1) {
					allowed++
				}
			}
			return allowed
		}
		// Refill during the burst must stay under one token (0.5 ms at
		// 2000/s); the test checks that assumption instead of trusting it.
		start := time.Now()
		got := burst()
		if time.Since(start) > 400*time.Millisecond {
			t.Skipf("the machine is too slow for this burst (%v); refill during it exceeds the test's bound", time.Since(start))
		}
		if got < capacity || got > capacity+int(time.Since(start).Seconds()*200) {
			t.Fatalf("burst allowed %d of %d, want %d", got, 2*capacity, capacity)
		}
		time.Sleep(600 * time.Millisecond) // one full refill interval (0.5 s) and margin
		if again := burst(); again < capacity {
			t.Fatalf("after a refill interval the burst allowed %d, want %d", again, capacity)
		}
	})
	t.Run("50 connections", func(t *testing.T) {
		const conns = 50
		clients := make([]*redis.Client, conns)
		for i := range clients {
			clients[i] = ts.client(t)
			do(t, clients[i], "PING") // connect before the burst
		}
		// A tiny rate: the burst's refill is far below one token whatever
		// the machine does.
		var allowed atomic.Int64
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for _, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				for range 2 * capacity / conns {
					v, err := c.Do(context.Background(), "TB.ACQUIRE", "shared", capacity, "0.0001").Int64()
					if err != nil {
						t.Error(err)
						return
					}
					allowed.Add(v)
				}
			}()
		}
		close(gate)
		wg.Wait()
		if allowed.Load() != capacity {
			t.Fatalf("50 connections firing %d acquires: %d allowed, want exactly %d", 2*capacity, allowed.Load(), capacity)
		}
	})
}

// TestHalfTokenPerSecondPolledOften is SPEC semantics 3 over the network: a
// key polled every few milliseconds at rate 0.5/s gets one token every two
// seconds, never starved by rounding.
func TestHalfTokenPerSecondPolledOften(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 4.5 s of wall time; run without -short")
	}
	t.Parallel()
	ts := startServer(t, nil)
	c := ts.client(t)
	var grants []time.Duration
	start := time.Now()
	for time.Since(start) < 4500*time.Millisecond {
		if do(t, c, "TB.ACQUIRE", "slow", "1", "0.5") == int64(1) {
			grants = append(grants, time.Since(start))
		}
		time.Sleep(3 * time.Millisecond)
	}
	// Full at first (t=0), then one token at 2 s and at 4 s.
	if len(grants) != 3 {
		t.Fatalf("grants at %v, want 3 (at 0 s, 2 s, 4 s)", grants)
	}
	for i, want := range []time.Duration{0, 2 * time.Second, 4 * time.Second} {
		if d := grants[i] - want; d < 0 || d > 150*time.Millisecond {
			t.Fatalf("grant %d at %v, want shortly after %v (all: %v)", i, grants[i], want, grants)
		}
	}
}

// rawConn talks RESP over a plain socket, for what go-redis cannot send.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

func (c *rawConn) send(t testing.TB, s string) {
	t.Helper()
	if _, err := io.WriteString(c.Conn, s); err != nil {
		t.Fatal(err)
	}
}

func (c *rawConn) line(t testing.TB) string {
	t.Helper()
	l, err := c.r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading a reply line: %v (got %q)", err, l)
	}
	return l
}

func (c *rawConn) expectClosed(t testing.TB) {
	t.Helper()
	if extra, err := c.r.ReadString('\n'); err == nil || extra != "" {
		t.Fatalf("connection still open, read %q, %v", extra, err)
	}
}

func TestInlineCommands(t *testing.T) {
	ts := startServer(t, nil)
	c := dialRaw(t, ts.addr)
	c.send(t, "PING\r\ntb.acquire k 10 1\r\nTB.ACQUIRE k 10 1 2 withinfo\r\n\r\necho \"two words\"\n")
	for _, want := range []string{"+PONG\r\n", ":1\r\n", "*4\r\n", ":1\r\n", ":7\r\n", ":0\r\n", ":3000\r\n", "$9\r\n", "two words\r\n"} {
		if got := c.line(t); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}

func TestProtocolGarbageClosesTheConnection(t *testing.T) {
	ts := startServer(t, func(cfg *Config) { cfg.Limits.MaxQueryBytes = 4096 })
	for _, tc := range []struct{ name, in, want string }{
		{"bad count", "*x\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"huge count", "*2147483647\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"bad type", "*1\r\n!4\r\nPING\r\n", "-ERR Protocol error: expected '$', got '!'\r\n"},
		{"bulk over the query limit", "*2\r\n$4\r\nECHO\r\n$536870912\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"unbalanced quotes", "ECHO \"abc\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"query buffer", "*3\r\n$4\r\nECHO\r\n$3000\r\n" + strings.Repeat("z", 3000) + "\r\n$3000\r\n" + strings.Repeat("z", 1500), "-ERR Protocol error: query buffer exceeded 4096 bytes (see --max-query-bytes)\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, ts.addr)
			c.send(t, "PING\r\n"+tc.in)
			if got := c.line(t); got != "+PONG\r\n" {
				t.Fatalf("command before the garbage: %q", got)
			}
			if got := c.line(t); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			c.expectClosed(t)
		})
	}
	// The server is fine afterwards.
	expect(t, ts.client(t), "PONG", "PING")
}

func TestManyArgumentsAndBigKeysAreAnswered(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)
	args := []any{"TB.RESET"}
	for i := range 10000 {
		args = append(args, fmt.Sprint("k", i))
	}
	expect(t, c, int64(0), args...)
	expect(t, c, "ERROR "+errKeyTooLong.text, "TB.ACQUIRE", strings.Repeat("k", 1<<20), "1", "1")
	expect(t, c, int64(0), "DBSIZE")
}

func TestQuitRepliesOKAndCloses(t *testing.T) {
	ts := startServer(t, nil)
	c := dialRaw(t, ts.addr)
	c.send(t, "TB.ACQUIRE k 1 1\r\nQUIT\r\nPING\r\n")
	if got := c.line(t) + c.line(t); got != ":1\r\n+OK\r\n" {
		t.Fatalf("got %q", got)
	}
	c.expectClosed(t)
}

// TestSlowReaderBlocksNobody: a client that pipelines a flood of commands
// and never reads its replies must not hold up a shard or another client.
func TestSlowReaderBlocksNobody(t *testing.T) {
	ts := startServer(t, nil)
	slow, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	cmd := "*4\r\n$10\r\nTB.ACQUIRE\r\n$4\r\nhot1\r\n$3\r\n1e9\r\n$1\r\n1\r\n"
	flood := []byte(strings.Repeat(cmd, 20000))
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		slow.SetWriteDeadline(time.Now().Add(20 * time.Second))
		for range 50 { // up to 1M commands; it stalls once both socket buffers fill
			if _, err := slow.Write(flood); err != nil {
				return
			}
		}
	}()
	// Wait until the slow client's goroutine is stuck writing replies.
	deadline := time.Now().Add(10 * time.Second)
	for ts.group.Stats().Allowed < 100000 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	c := ts.client(t)
	for i := range 200 {
		start := time.Now()
		// Same shard as the flood's key or not: every shard must answer.
		expect(t, c, int64(1), "TB.ACQUIRE", fmt.Sprint("other", i), "1", "1")
		if d := time.Since(start); d > time.Second {
			t.Fatalf("a normal client waited %v behind a slow reader", d)
		}
	}
	expect(t, c, int64(1), "TB.ACQUIRE", "hot1", "1e9", "1")
	slow.Close()
	<-writerDone
}

func TestShutdownAnswersWhatIsInFlight(t *testing.T) {
	group := shard.New(shard.Config{Shards: 2})
	defer group.Close()
	srv, err := NewServer(Config{Limiter: Memory(group)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	c := dialRaw(t, ln.Addr().String())
	c.send(t, "PING\r\n")
	c.line(t)
	const n = 20000
	c.send(t, strings.Repeat("TB.ACQUIRE k 1e9 1\r\n", n))
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
	// Every reply that arrives is whole; the connection then ends cleanly.
	got := 0
	for {
		l, err := c.r.ReadString('\n')
		if err != nil {
			if l != "" {
				t.Fatalf("partial reply %q at shutdown", l)
			}
			break
		}
		if l != ":1\r\n" {
			t.Fatalf("reply %q", l)
		}
		got++
	}
	if got > n {
		t.Fatalf("%d replies for %d commands", got, n)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("still accepting after Shutdown")
	}
	t.Logf("%d of %d pipelined commands were in flight and answered", got, n)
}

// TestFullBucketsExpire is SPEC semantics 7 end to end: buckets that have
// refilled are deleted within seconds, DBSIZE follows, and the answers for
// the same parameters do not change.
func TestFullBucketsExpire(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)
	for i := range 50 {
		expect(t, c, int64(1), "TB.ACQUIRE", fmt.Sprint("exp", i), "1", "100") // full again after 10 ms
	}
	if n := do(t, c, "DBSIZE").(int64); n == 0 || n > 50 {
		t.Fatalf("DBSIZE right after = %d", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for do(t, c, "DBSIZE") != int64(0) {
		if time.Now().After(deadline) {
			t.Fatalf("DBSIZE still %v five seconds after the buckets refilled", do(t, c, "DBSIZE"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if info := do(t, c, "INFO", "bucketd").(string); !strings.Contains(info, "expired_total:50\r\n") {
		t.Fatalf("INFO after expiry:\n%s", info)
	}
	expect(t, c, ints(1, 0, 0, 10), "TB.ACQUIRE", "exp0", "1", "100", "1", "WITHINFO")
}

func TestHelloChecksEveryOptionBeforeApplying(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)
	expect(t, c, "ERROR ERR Syntax error in HELLO option 'BOGUS'", "HELLO", "2", "SETNAME", "a", "BOGUS")
	expect(t, c, nil, "CLIENT", "GETNAME")
	if hello := do(t, c, "HELLO", "2", "SETNAME", "b"); !equal(len(hello.([]any)), 14) {
		t.Fatalf("HELLO 2 SETNAME b = %#v", hello)
	}
	expect(t, c, "b", "CLIENT", "GETNAME")
}
