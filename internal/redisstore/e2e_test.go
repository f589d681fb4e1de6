package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/resp/command"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/bucketd/bucketd/internal/testkit/testserver"
)

// serveStore runs a resp.Server with s as its Limiter on 127.0.0.1:0 and
// returns a RESP2 go-redis client connected to it; both stop when the test
// ends (the server first, as bucketd shuts down).
func serveStore(t *testing.T, s *Store) *redis.Client {
	t.Helper()
	return testserver.Serve(t, command.Config{Limiter: s}, resp.Config{}).Client(t, func(o *redis.Options) { o.Protocol = 2 })
}

// reply runs one command and returns its reply, or the error text.
func reply(t *testing.T, c *redis.Client, args ...any) string {
	t.Helper()
	v, err := c.Do(context.Background(), args...).Result()
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprint(v)
}

// TestServerEndToEnd: TB.ACQUIRE, WITHINFO, TB.PEEK and TB.RESET from a
// Redis client, through bucketd's protocol front, decided by Redis.
func TestServerEndToEnd(t *testing.T) {
	ctx := context.Background()
	redisSrv := redistest.Start(t)
	rdb := redisSrv.Client(storeOptions())
	s := startStore(t, rdb, Config{Prefix: "tb:", Timeout: exactTimeout})
	loadScript(t, s)
	c := serveStore(t, s)

	steps := []struct {
		args []any
		want string
	}{
		{[]any{"TB.ACQUIRE", "user:1", 3, 0.001}, "1"},
		{[]any{"TB.ACQUIRE", "user:1", 3, 0.001, 1, "WITHINFO"}, "[1 1 0 2000000]"},
		{[]any{"tb.peek", "user:1", 3, 0.001}, "[1 0 0 3000000]"},
		{[]any{"TB.ACQUIRE", "user:1", 3, 0.001, 2, "withinfo"}, "[0 1 1000000 2000000]"},
		{[]any{"TB.ACQUIRE", "user:1", 3, 0.001, 5, "WITHINFO"}, "[0 1 -1 2000000]"},
		{[]any{"TB.ACQUIRE", "user:1", 3, 0.001}, "1"},
		{[]any{"TB.ACQUIRE", "user:1", 3, 0.001}, "0"},
		{[]any{"TB.RESET", "user:1", "user:1", "nobody"}, "1"},
		{[]any{"TB.ACQUIRE", "user:1", 3, 0.001, "WITHINFO"}, "[1 2 0 1000000]"},
		{[]any{"TB.ACQUIRE", "user:1", 0, 1}, "error: ERR invalid capacity: must be a finite number > 0"},
		{[]any{"CL.THROTTLE", "user:1", 15, 30, 60}, "error: ERR CL.THROTTLE is not available in Redis store mode; use TB.ACQUIRE"},
	}
	for _, st := range steps {
		if got := reply(t, c, st.args...); !sameReply(got, st.want) {
			t.Fatalf("%v: %s, want %s", st.args, got, st.want)
		}
	}
	// The bucket lives in Redis under the prefix.
	if h, err := rdb.HGetAll(ctx, "tb:user:1").Result(); err != nil || h["tokens"] == "" || h["ts"] == "" {
		t.Fatalf("HGETALL tb:user:1 = %v, %v", h, err)
	}

	// A pipeline of several commands from one connection: one Run, answers
	// in order.
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for range 4 {
			p.Do(ctx, "TB.ACQUIRE", "p", 2, 0.001)
		}
		p.Do(ctx, "TB.RESET", "p")
		p.Do(ctx, "TB.ACQUIRE", "p", 2, 0.001, "WITHINFO")
		return nil
	})
	if err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	var got []string
	for _, cmd := range cmds {
		got = append(got, fmt.Sprint(cmd.(*redis.Cmd).Val()))
	}
	if want := "1 1 0 0 1 [1 1 0 1000000]"; !sameReply(strings.Join(got, " "), want) {
		t.Fatalf("pipeline answers %q, want %q", strings.Join(got, " "), want)
	}

	// INFO reports the store's counters; DBSIZE the Redis key count.
	testkit.Eventually(t, 5*time.Second, "DBSIZE 2", func() bool { return reply(t, c, "DBSIZE") == "2" })
	info := reply(t, c, "INFO", "bucketd")
	for _, want := range []string{"acquire_allowed_total:7\r\n", "acquire_denied_total:5\r\n", "peek_total:1\r\n", "reset_removed_total:2\r\n", "buckets:2\r\n"} {
		if !strings.Contains(info, want) {
			t.Fatalf("INFO bucketd has no %q:\n%s", want, info)
		}
	}

	// Redis gone: the configured answer (deny) and an error for TB.RESET,
	// at once since the connection is refused.
	redisSrv.Kill()
	start := time.Now()
	if got := reply(t, c, "TB.ACQUIRE", "user:1", 3, 0.001); got != "0" {
		t.Fatalf("TB.ACQUIRE with Redis down: %s, want 0", got)
	}
	if got := reply(t, c, "TB.ACQUIRE", "user:1", 3, 0.001, "WITHINFO"); got != "[0 0 5000 0]" {
		t.Fatalf("WITHINFO with Redis down: %s, want [0 0 5000 0] (retry after the timeout)", got)
	}
	if got := reply(t, c, "TB.RESET", "user:1"); got != "error: ERR the Redis store did not answer: TB.RESET may not have been applied" {
		t.Fatalf("TB.RESET with Redis down: %s", got)
	}
	// Refused at once: nobody waits for the 5 s timeout.
	if took := time.Since(start); took > exactTimeout/5 {
		t.Fatalf("three commands with Redis down took %v", took)
	}
	if s.Degraded() != 2 {
		t.Fatalf("degraded %d, want 2", s.Degraded())
	}
}

// sameReply compares replies as text, except that a number of 1000 or more
// may be up to 1000 less than wanted: the waits of a bucket refilling at
// 0.001 tokens/s shrink by 1 ms for every millisecond Redis's clock moves
// between the commands.
func sameReply(got, want string) bool {
	g, w := strings.Fields(got), strings.Fields(want)
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		if g[i] == w[i] {
			continue
		}
		gn, err1 := strconv.ParseInt(strings.Trim(g[i], "[]"), 10, 64)
		wn, err2 := strconv.ParseInt(strings.Trim(w[i], "[]"), 10, 64)
		if err1 != nil || err2 != nil || wn < 1000 || gn > wn || gn < wn-1000 {
			return false
		}
	}
	return true
}
