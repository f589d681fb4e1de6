package command_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/resp/command"
	"github.com/bucketd/bucketd/internal/shard"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/bucketd/bucketd/internal/testkit/testserver"
	"github.com/redis/go-redis/v9"
)

// startServer runs a server, with adjust applied to its Config, over shards
// on a fake clock (see testserver.Start): it stands still unless a test
// advances it (ts.Clock), so every timing in a reply below is exact.
func startServer(t testing.TB, adjust func(*frontConfig)) *testserver.Server {
	t.Helper()
	return testserver.Start(t, adjusted(adjust))
}

// frontConfig is both halves of the front's configuration, as the tests
// adjust them: the connection server's and the command layer's.
type frontConfig struct {
	*serverConfig
	*commandConfig
}

// The halves' types under names of their own, so that both can be
// embedded.
type (
	serverConfig  = resp.Config
	commandConfig = command.Config
)

// adjusted turns adjust into testserver's Options.
func adjusted(adjust func(*frontConfig)) testserver.Options {
	var rc resp.Config
	var cc command.Config
	if adjust != nil {
		adjust(&frontConfig{&rc, &cc})
	}
	return testserver.Options{
		Server: func(c *resp.Config) { *c = rc },
		Commands: func(c *command.Config) {
			l := c.Limiter
			*c = cc
			if c.Limiter == nil {
				c.Limiter = l
			}
		},
	}
}

// Error replies used by several tests, as clients see them: the tests pin
// the text on the wire, not the package's constants.
const (
	errInvalidCapacity = "ERR invalid capacity: must be a finite number > 0"
	errKeyTooLong      = "ERR key too long"
	errNoPasswordSet   = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
)

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
	c := ts.Client(t)
	expect(t, c, int64(1), "TB.ACQUIRE", "user:1", "10", "1")
	expect(t, c, int64(1), "tb.acquire", "user:1", "10", "1", "3")
	expect(t, c, ints(1, 5, 0, 5000), "Tb.Acquire", "user:1", "10", "1", "1", "withinfo")
	expect(t, c, ints(0, 5, 1000, 5000), "TB.ACQUIRE", "user:1", "10", "1", "6", "WITHINFO")
	expect(t, c, ints(1, 4, 0, 6000), "TB.ACQUIRE", "user:1", "10", "1", "WITHINFO") // cost defaults to 1
	expect(t, c, int64(0), "TB.ACQUIRE", "user:1", "10", "1", "5")
	expect(t, c, ints(0, 4, -1, 6000), "TB.ACQUIRE", "user:1", "10", "1", "11", "WITHINFO")
	expect(t, c, int64(1), "DBSIZE")
	ts.Clock.Advance(1500 * time.Millisecond) // 1.5 tokens back: 5.5 held
	expect(t, c, ints(1, 4, 0, 5500), "TB.ACQUIRE", "user:1", "10", "1", "1", "WITHINFO")
	expect(t, c, ints(0, 4, 500, 5500), "TB.ACQUIRE", "user:1", "10", "1", "5", "WITHINFO")
}

func TestCostZeroAndPeekChangeNothing(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.Client(t)
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
	c := ts.Client(t)
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
	c := ts.Client(t)
	k1, k2 := "a\x00b\r\nc", "a\x00b\r\nd"
	expect(t, c, int64(1), "TB.ACQUIRE", k1, "1", "0.001")
	expect(t, c, int64(0), "TB.ACQUIRE", k1, "1", "0.001")
	expect(t, c, int64(1), "TB.ACQUIRE", k2, "1", "0.001")
	expect(t, c, int64(1), "TB.ACQUIRE", "", "1", "0.001") // the empty key is a key, as in Redis
	expect(t, c, int64(3), "DBSIZE")
}

func TestIntegerRepliesSaturate(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.Client(t)
	expect(t, c, ints(1, 1e15-1, 0, math.MaxInt64), "TB.ACQUIRE", "k", "1e15", "1e-300", "1", "WITHINFO")
	expect(t, c, ints(0, 1e15-1, math.MaxInt64, math.MaxInt64), "TB.ACQUIRE", "k", "1e15", "1e-300", "1e15", "WITHINFO")
}

func TestBadInputNamesTheProblemAndChangesNothing(t *testing.T) {
	ts := startServer(t, func(cfg *frontConfig) { cfg.MaxKeyBytes = 8 })
	c := ts.Client(t)
	const (
		arityAcq  = "ERROR ERR wrong number of arguments for 'tb.acquire' command"
		arityPeek = "ERROR ERR wrong number of arguments for 'tb.peek' command"
		badCap    = "ERROR " + errInvalidCapacity
		badRate   = "ERROR ERR invalid rate: must be a finite number > 0"
		badCost   = "ERROR ERR invalid cost: must be a finite number >= 0"
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
		{[]any{"TB.ACQUIRE", "123456789", "10", "1"}, "ERROR " + errKeyTooLong},
		{[]any{"TB.RESET", "ok", "123456789"}, "ERROR " + errKeyTooLong},
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
		{[]any{"TB.ACQUIRE", "k", "1.000000000000001e15", "1"}, "ERROR ERR invalid capacity: must be at most 1e15"},
		{[]any{"TB.ACQUIRE", "k", "10", "0"}, badRate},
		{[]any{"TB.ACQUIRE", "k", "10", "-5"}, badRate},
		{[]any{"TB.ACQUIRE", "k", "10", "NaN"}, badRate},
		{[]any{"TB.ACQUIRE", "k", "10", "2e15"}, "ERROR ERR invalid rate: must be at most 1e15"},
		{[]any{"TB.ACQUIRE", "k", "10", "1", "-1"}, badCost},
		{[]any{"TB.ACQUIRE", "k", "10", "1", "x"}, badCost},
		{[]any{"TB.ACQUIRE", "k", "10", "1", "Infinity"}, badCost},
		{[]any{"TB.ACQUIRE", "k", "10", "1", "1e16"}, "ERROR ERR invalid cost: must be at most 1e15"},
		{[]any{"TB.PEEK", "k", "10", "1", "-1"}, badCost},
		{[]any{"TB.ACQUIRE", "k", "10", "1", "1", "WITHOUTINFO"}, "ERROR ERR syntax error"},
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
	c := ts.Client(t)
	expect(t, c, "PONG", "PING")
	expect(t, c, "hello", "ping", "hello")
	expect(t, c, "ERROR ERR wrong number of arguments for 'ping' command", "PING", "a", "b")
	expect(t, c, "x y", "ECHO", "x y")
	expect(t, c, "ERROR ERR wrong number of arguments for 'echo' command", "ECHO")
	expect(t, c, "OK", "SELECT", "0")
	expect(t, c, "ERROR ERR DB index is out of range", "SELECT", "1")
	expect(t, c, "ERROR ERR value is not an integer or out of range", "SELECT", "zero")
	expect(t, c, "ERROR NOPROTO unsupported protocol version", "HELLO", "4")
	expect(t, c, "ERROR ERR Protocol version is not an integer or out of range", "HELLO", "x")
	expect(t, c, "OK", "CLIENT", "SETNAME", "worker-1")
	expect(t, c, "worker-1", "CLIENT", "GETNAME")
	expect(t, c, "ERROR ERR Client names cannot contain spaces, newlines or special characters.", "CLIENT", "SETNAME", "has space")
	expect(t, c, "OK", "CLIENT", "SETINFO", "LIB-NAME", "x")
	expect(t, c, "OK", "client", "setinfo", "lib-ver", "1.0")
	expect(t, c, "ERROR ERR Unrecognized option 'color'", "CLIENT", "SETINFO", "color", "red")
	expect(t, c, "ERROR ERR unknown subcommand 'FLY'. Try CLIENT HELP.", "CLIENT", "FLY")
	if list, ok := do(t, c, "COMMAND", "LIST").([]any); !ok || len(list) == 0 {
		t.Fatalf("COMMAND LIST = %#v", list)
	} else {
		expect(t, c, int64(len(list)), "COMMAND", "COUNT")
	}
	// go-redis speaks RESP3 by default: maps where Redis 7 sends maps.
	expect(t, c, map[any]any{}, "COMMAND", "DOCS")
	expect(t, c, map[any]any{"save": "", "appendonly": "no"}, "CONFIG", "GET", "save", "appendonly")
	expect(t, c, map[any]any{}, "CONFIG", "GET", "no-such-param")
	expect(t, c, "ERROR "+errNoPasswordSet, "AUTH", "secret")
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
	c := ts.Client(t)
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
		c := ts.Client(t, func(o *redis.Options) { o.Protocol = proto; o.ClientName = "app" })
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
	c := ts.Client(t)
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
	want = append(want, errInvalidCapacity, "PONG")
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("pipeline replies\n got %v\nwant %v", got, want)
	}
}

// TestBurstAllowsExactlyCapacity is the seed's burst test: 2 × capacity
// acquires in a tight loop allow exactly capacity; after one refill interval
// the tokens are back. Sequentially, then from 50 connections at once. The
// shards' clock stands still during a burst and moves by exactly the refill
// interval between bursts.
func TestBurstAllowsExactlyCapacity(t *testing.T) {
	ts := startServer(t, nil)
	const capacity = 100
	const rate = "200" // full refill in 0.5 s
	t.Run("sequential", func(t *testing.T) {
		c := ts.Client(t)
		burst := func() int {
			allowed := 0
			for range 2 * capacity {
				if do(t, c, "TB.ACQUIRE", "seq", capacity, rate) == int64(1) {
					allowed++
				}
			}
			return allowed
		}
		if got := burst(); got != capacity {
			t.Fatalf("burst allowed %d of %d, want %d", got, 2*capacity, capacity)
		}
		ts.Clock.Advance(250 * time.Millisecond) // half the refill interval
		if got := burst(); got != capacity/2 {
			t.Fatalf("half a refill interval later the burst allowed %d, want %d", got, capacity/2)
		}
		ts.Clock.Advance(500 * time.Millisecond) // one full refill interval
		if again := burst(); again != capacity {
			t.Fatalf("after a refill interval the burst allowed %d, want %d", again, capacity)
		}
	})
	t.Run("50 connections", func(t *testing.T) {
		const conns = 50
		clients := make([]*redis.Client, conns)
		for i := range clients {
			clients[i] = ts.Client(t)
		}
		if allowed := testkit.Burst(t, clients, 2*capacity/conns, "TB.ACQUIRE", "shared", capacity, rate); allowed != capacity {
			t.Fatalf("50 connections firing %d acquires: %d allowed, want exactly %d", 2*capacity, allowed, capacity)
		}
	})
}

// TestHalfTokenPerSecondPolledOften is docs/commands.md's refill rule over the network: a
// key polled every few milliseconds at rate 0.5/s gets one token every two
// seconds, never starved by rounding. 4.5 s of the shards' clock, polled
// every 4 ms of it.
func TestHalfTokenPerSecondPolledOften(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.Client(t)
	const step, span = 4 * time.Millisecond, 4500 * time.Millisecond
	var grants []time.Duration
	for at := time.Duration(0); at < span; at += step {
		if do(t, c, "TB.ACQUIRE", "slow", "1", "0.5") == int64(1) {
			grants = append(grants, at)
		}
		ts.Clock.Advance(step)
	}
	// Full at first (t=0), then one token at 2 s and at 4 s.
	if want := []time.Duration{0, 2 * time.Second, 4 * time.Second}; !slices.Equal(grants, want) {
		t.Fatalf("grants at %v, want %v", grants, want)
	}
}

func TestInlineCommands(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.Dial(t)
	c.Send(t, "PING\r\ntb.acquire k 10 1\r\nTB.ACQUIRE k 10 1 2 withinfo\r\n\r\necho \"two words\"\n")
	for _, want := range []string{"+PONG\r\n", ":1\r\n", "*4\r\n", ":1\r\n", ":7\r\n", ":0\r\n", ":3000\r\n", "$9\r\n", "two words\r\n"} {
		if got := c.Line(t); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}

func TestProtocolGarbageClosesTheConnection(t *testing.T) {
	ts := startServer(t, func(cfg *frontConfig) { cfg.Limits.MaxQueryBytes = 4096 })
	for _, tc := range []struct{ name, in, want string }{
		{"bad count", "*x\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"huge count", "*2147483647\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"bad type", "*1\r\n!4\r\nPING\r\n", "-ERR Protocol error: expected '$', got '!'\r\n"},
		{"bulk over the query limit", "*2\r\n$4\r\nECHO\r\n$536870912\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"unbalanced quotes", "ECHO \"abc\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"query buffer", "*3\r\n$4\r\nECHO\r\n$3000\r\n" + strings.Repeat("z", 3000) + "\r\n$3000\r\n" + strings.Repeat("z", 1500), "-ERR Protocol error: query buffer exceeded 4096 bytes (see --max-query-bytes)\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ts.Dial(t)
			c.Send(t, "PING\r\n"+tc.in)
			if got := c.Line(t); got != "+PONG\r\n" {
				t.Fatalf("command before the garbage: %q", got)
			}
			if got := c.Line(t); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			c.ExpectClosed(t)
		})
	}
	// The server is fine afterwards.
	expect(t, ts.Client(t), "PONG", "PING")
}

func TestManyArgumentsAndBigKeysAreAnswered(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.Client(t)
	args := []any{"TB.RESET"}
	for i := range 10000 {
		args = append(args, fmt.Sprint("k", i))
	}
	expect(t, c, int64(0), args...)
	expect(t, c, "ERROR "+errKeyTooLong, "TB.ACQUIRE", strings.Repeat("k", 1<<20), "1", "1")
	expect(t, c, int64(0), "DBSIZE")
}

func TestQuitRepliesOKAndCloses(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.Dial(t)
	c.Send(t, "TB.ACQUIRE k 1 1\r\nQUIT\r\nPING\r\n")
	if got := c.Line(t) + c.Line(t); got != ":1\r\n+OK\r\n" {
		t.Fatalf("got %q", got)
	}
	c.ExpectClosed(t)
}

// TestSlowReaderBlocksNobody: a client that pipelines a flood of commands
// and never reads its replies must not hold up a shard or another client.
func TestSlowReaderBlocksNobody(t *testing.T) {
	ts := startServer(t, nil)
	slow := ts.Dial(t)
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
	if !testkit.Poll(10*time.Second, func() bool { return ts.Group.Stats().Allowed >= 100000 }) {
		t.Logf("the flood had %d commands answered after 10 s; testing the other client anyway", ts.Group.Stats().Allowed)
	}
	c := ts.Client(t)
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
	ts := testserver.Start(t, testserver.Options{Shards: func(cfg *shard.Config) { cfg.Shards = 2 }})
	c := ts.Dial(t)
	c.Send(t, "PING\r\n")
	c.Line(t)
	const n = 20000
	c.Send(t, strings.Repeat("TB.ACQUIRE k 1e9 1\r\n", n))
	if err := ts.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown, and Serve after it: %v", err)
	}
	// Every reply that arrives is whole; the connection then ends cleanly.
	got := 0
	for {
		r, err := c.ReadReply()
		if err != nil {
			if r != "" {
				t.Fatalf("partial reply %q at shutdown: %v", r, err)
			}
			break
		}
		if r != ":1\r\n" {
			t.Fatalf("reply %q", r)
		}
		got++
	}
	if got > n {
		t.Fatalf("%d replies for %d commands", got, n)
	}
	if _, err := net.Dial("tcp", ts.Addr); err == nil {
		t.Fatal("still accepting after Shutdown")
	}
	t.Logf("%d of %d pipelined commands were in flight and answered", got, n)
}

// TestFullBucketsExpire is docs/commands.md's Expiry end to end: buckets that have
// refilled are deleted by the sweeper, DBSIZE follows, and the answers for
// the same parameters do not change.
func TestFullBucketsExpire(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.Client(t)
	for i := range 50 {
		expect(t, c, int64(1), "TB.ACQUIRE", fmt.Sprint("exp", i), "1", "100") // full again after 10 ms
	}
	expect(t, c, int64(50), "DBSIZE") // the shards' clock has not moved: none is full yet
	ts.Clock.Advance(10 * time.Millisecond)
	testkit.Eventually(t, 5*time.Second, "the sweeper deleting 50 refilled buckets", func() bool {
		return do(t, c, "DBSIZE") == int64(0)
	})
	if info := do(t, c, "INFO", "bucketd").(string); !strings.Contains(info, "expired_total:50\r\n") {
		t.Fatalf("INFO after expiry:\n%s", info)
	}
	expect(t, c, ints(1, 0, 0, 10), "TB.ACQUIRE", "exp0", "1", "100", "1", "WITHINFO")
}

func TestHelloChecksEveryOptionBeforeApplying(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.Client(t)
	expect(t, c, "ERROR ERR Syntax error in HELLO option 'BOGUS'", "HELLO", "2", "SETNAME", "a", "BOGUS")
	expect(t, c, nil, "CLIENT", "GETNAME")
	if hello := do(t, c, "HELLO", "2", "SETNAME", "b"); !equal(len(hello.([]any)), 14) {
		t.Fatalf("HELLO 2 SETNAME b = %#v", hello)
	}
	expect(t, c, "b", "CLIENT", "GETNAME")
}

// BenchmarkServerAcquirePipelined16Loopback measures the whole server path
// over loopback TCP: one client sending 16 pipelined TB.ACQUIRE on distinct
// keys per round trip through guard, redcon, parsing, shards and replies.
// Allocations include redcon's per-command copies and the client's.
func BenchmarkServerAcquirePipelined16Loopback(b *testing.B) {
	ts := startServer(b, nil)
	c := ts.Dial(b)
	c.SetDeadline(time.Time{}) // a benchmark may run for longer than Dial's deadline
	var batch bytes.Buffer
	for i := range 16 {
		key := "key:" + string(rune('a'+i))
		batch.WriteString("*4\r\n$10\r\nTB.ACQUIRE\r\n$" + string(rune('0'+len(key))) + "\r\n" + key + "\r\n$4\r\n1e15\r\n$1\r\n1\r\n")
	}
	req := batch.Bytes()
	reply := make([]byte, 16*len(":1\r\n"))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, reply); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*16), "ns/command")
}
