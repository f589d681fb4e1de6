package command_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/bucketd/bucketd/internal/resp/wire"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// Redis 7.2's replies to transactions, as redis-server 7.0.15 sends them
// (observed; the same in 7.2), and bucketd's refusal of WATCH.
const (
	queued          = "+QUEUED\r\n"
	ok              = "+OK\r\n"
	pong            = "+PONG\r\n"
	execNoMulti     = "-ERR EXEC without MULTI\r\n"
	discardNoMulti  = "-ERR DISCARD without MULTI\r\n"
	multiNested     = "-ERR MULTI calls can not be nested\r\n"
	watchInMulti    = "-ERR WATCH inside MULTI is not allowed\r\n"
	execAbort       = "-EXECABORT Transaction discarded because of previous errors.\r\n"
	execArity       = "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n"
	watchRefused    = "-ERR WATCH is not supported by bucketd: a bucket changes with time alone, so a watched bucket would always count as changed. Send MULTI ... EXEC without WATCH: EXEC runs the queued commands with no other client's command in between\r\n"
	invalidCapacity = "-" + errInvalidCapacity + "\r\n"
	fullPeek        = "*4\r\n:1\r\n:0\r\n:0\r\n:1000000\r\n" // TB.PEEK k 1 0.001 of a full bucket
)

// arityReply is the wrong-arity error of the command name.
func arityReply(name string) string {
	return "-ERR wrong number of arguments for '" + name + "' command\r\n"
}

// txCase is a sequence of commands sent in one write and every reply
// expected, in both protocols (a PING after them proves nothing follows).
type txCase struct {
	name    string
	cmds    [][]string
	replies []string
}

func cmds(lines ...string) [][]string {
	out := make([][]string, len(lines))
	for i, l := range lines {
		out[i] = strings.Fields(l)
	}
	return out
}

// txCases are every misuse and reply form of MULTI, EXEC, DISCARD, WATCH
// and UNWATCH, with Redis's exact texts.
var txCases = []txCase{
	{"EXEC without MULTI", cmds("EXEC"), w(execNoMulti)},
	{"DISCARD without MULTI", cmds("DISCARD"), w(discardNoMulti)},
	{"EXEC refused without MULTI", cmds("EXEC x"), w(execArity)},
	{"EXEC refused inside MULTI discards", cmds("MULTI", "PING", "EXEC x", "EXEC"), w(ok, queued, execArity, execNoMulti)},
	{"empty transaction", cmds("MULTI", "EXEC"), w(ok, "*0\r\n")},
	{"DISCARD", cmds("MULTI", "TB.ACQUIRE k 1 0.001", "DISCARD", "EXEC", "TB.ACQUIRE k 1 0.001"), w(ok, queued, ok, execNoMulti, ":1\r\n")},
	{"nested MULTI keeps the transaction", cmds("MULTI", "MULTI", "PING", "EXEC"), w(ok, multiNested, queued, "*1\r\n"+pong)},
	{"WATCH inside MULTI keeps the transaction", cmds("MULTI", "WATCH k", "PING", "EXEC"), w(ok, watchInMulti, queued, "*1\r\n"+pong)},
	{"WATCH refused", cmds("WATCH k", "WATCH a b"), w(watchRefused, watchRefused)},
	{"WATCH arity", cmds("WATCH"), w(arityReply("watch"))},
	{"UNWATCH", cmds("UNWATCH", "MULTI", "UNWATCH", "EXEC"), w(ok, ok, queued, "*1\r\n"+ok)},
	{"MULTI arity inside MULTI aborts", cmds("MULTI", "MULTI x", "PING", "EXEC"), w(ok, arityReply("multi"), queued, execAbort)},
	{"DISCARD arity inside MULTI aborts", cmds("MULTI", "DISCARD x", "EXEC"), w(ok, arityReply("discard"), execAbort)},
	{"MULTI arity", cmds("MULTI x", "DISCARD x", "UNWATCH x"), w(arityReply("multi"), arityReply("discard"), arityReply("unwatch"))},
	{"unknown command aborts", cmds("MULTI", "FOO a", "PING", "EXEC"),
		w(ok, "-ERR unknown command 'FOO', with args beginning with: 'a' \r\n", queued, execAbort)},
	{"wrong arity aborts", cmds("MULTI", "TB.ACQUIRE k 1", "EXEC"), w(ok, arityReply("tb.acquire"), execAbort)},
	{"unknown subcommand aborts", cmds("MULTI", "CLIENT NOSUCH", "EXEC"), w(ok, "-ERR unknown subcommand 'NOSUCH'. Try CLIENT HELP.\r\n", execAbort)},
	{"subcommand arity aborts", cmds("MULTI", "CONFIG GET", "EXEC"), w(ok, arityReply("config|get"), execAbort)},
	{"invalid value is an element", cmds("MULTI", "TB.ACQUIRE k 0 1", "TB.ACQUIRE k 1 0.001", "SELECT 1", "PING", "EXEC"),
		w(ok, queued, queued, queued, queued, "*4\r\n"+invalidCapacity+":1\r\n-ERR DB index is out of range\r\n"+pong)},
	{"unknown policy is an element", cmds("MULTI", "TB.ACQUIRE k POLICY nosuch", "EXEC"),
		w(ok, queued, "*1\r\n-ERR unknown policy 'nosuch': define it under policies: in the --config file\r\n")},
	{"lower case", cmds("multi", "tb.acquire k 1 0.001", "exec"), w(ok, queued, "*1\r\n:1\r\n")},
	{"QUEUED after an error, still discarded", cmds("MULTI", "NOPE", "TB.ACQUIRE k 1 0.001", "EXEC", "TB.PEEK k 1 0.001"),
		w(ok, "-ERR unknown command 'NOPE', with args beginning with: \r\n", queued, execAbort, fullPeek)},
}

// TestTransactionReplies runs txCases on a new connection each, in RESP2
// and in RESP3: a transaction's replies are the same in both (EXEC's reply
// is an array in RESP3 too).
func TestTransactionReplies(t *testing.T) {
	for _, proto := range []string{"2", "3"} {
		for _, tc := range txCases {
			ts := startServer(t, nil)
			ts.Commands.SetPolicies(nil)
			c := dial3(t, ts.Addr)
			c.Send(t, commands([]string{"HELLO", proto}))
			c.reply(t)
			c.Send(t, commands(tc.cmds...))
			c.expectReplies(t, "RESP"+proto+": "+tc.name, tc.replies...)
			if got := c.do(t, "PING"); got != pong {
				t.Fatalf("RESP%s: %s: then %q, want +PONG", proto, tc.name, got)
			}
		}
	}
}

// TestTransactionRepliesInTheirProtocol: each element of EXEC's array is in
// the connection's protocol at its turn, so a HELLO in the transaction
// switches the replies after it, as in Redis; the array itself is *n in
// both.
func TestTransactionRepliesInTheirProtocol(t *testing.T) {
	ts := startServer(t, nil)
	c := dial3(t, ts.Addr)
	c.Send(t, commands(cmds("MULTI", "HELLO 3", "CLIENT GETNAME", "CONFIG GET save", "HELLO 2", "CLIENT GETNAME", "CONFIG GET save", "EXEC")...))
	c.expectReplies(t, "HELLO in a transaction", ok, queued, queued, queued, queued, queued, queued,
		"*6\r\n"+hello3+"_\r\n%1\r\n$4\r\nsave\r\n$0\r\n\r\n"+hello2+"$-1\r\n*2\r\n$4\r\nsave\r\n$0\r\n\r\n")
}

// TestTransactionPipelineSpendsEachTokenOnce: MULTI, three TB.ACQUIREs and
// EXEC in one write, as redis-py, node-redis, ioredis, go-redis and rueidis
// send a transaction: the client gets +OK, +QUEUED three times and EXEC's
// array, and each token is spent exactly once. (Before transactions,
// bucketd answered MULTI and EXEC with unknown-command errors and spent
// the tokens anyway: a client that retried spent them twice.)
func TestTransactionPipelineSpendsEachTokenOnce(t *testing.T) {
	ts := startServer(t, nil)
	c := dial3(t, ts.Addr)
	tx := cmds("MULTI", "TB.ACQUIRE k 3 0.001", "TB.ACQUIRE k 3 0.001", "TB.ACQUIRE k 3 0.001 1 WITHINFO", "EXEC")
	c.Send(t, commands(tx...))
	c.expectReplies(t, "transaction", ok, queued, queued, queued, "*3\r\n:1\r\n:1\r\n*4\r\n:1\r\n:0\r\n:0\r\n:3000000\r\n")
	if got := c.do(t, "TB.ACQUIRE", "k", "3", "0.001"); got != ":0\r\n" {
		t.Fatalf("after the transaction: %q, want :0 (three tokens spent, once each)", got)
	}

	// The same through go-redis's TxPipelined, which sends it in one write.
	rdb := ts.Client(t)
	ctx := context.Background()
	got, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for range 3 {
			p.Do(ctx, "TB.ACQUIRE", "g", 3, 0.001)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("TxPipelined: %v", err)
	}
	for i, cmd := range got {
		if v, err := cmd.(*redis.Cmd).Int64(); v != 1 || err != nil {
			t.Fatalf("TxPipelined reply %d: %v, %v; want 1", i+1, v, err)
		}
	}
	expect(t, rdb, int64(0), "TB.ACQUIRE", "g", 3, 0.001)
}

// TestTransactionWithQueueErrorRunsNothing: an unknown command (here PTTL,
// which rueidis puts into every cached read) discards the transaction at
// EXEC, and none of its bucket commands takes a token.
func TestTransactionWithQueueErrorRunsNothing(t *testing.T) {
	ts := startServer(t, nil)
	rdb := ts.Client(t)
	ctx := context.Background()
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "TB.ACQUIRE", "a", 1, 0.001)
		p.Do(ctx, "PTTL", "a")
		p.Do(ctx, "TB.ACQUIRE", "b", 1, 0.001)
		return nil
	})
	if err == nil || !strings.HasPrefix(err.Error(), "EXECABORT") {
		t.Fatalf("TxPipelined with PTTL: %v, want EXECABORT", err)
	}
	expect(t, rdb, ints(1, 0, 0, 1000000), "TB.PEEK", "a", 1, 0.001) // full: a cost of 1 would leave 0
	expect(t, rdb, ints(1, 0, 0, 1000000), "TB.PEEK", "b", 1, 0.001)
	expect(t, rdb, int64(0), "DBSIZE")
}

// TestTransactionNoAuth: with a password, MULTI needs authentication like
// any command, and an unauthenticated EXEC is refused as Redis refuses it;
// AUTH inside a transaction is queued and answered in EXEC's array.
func TestTransactionNoAuth(t *testing.T) {
	ts := startServer(t, func(c *frontConfig) { c.RequirePass = "pw" })
	c := dial3(t, ts.Addr)
	c.Send(t, commands(cmds("MULTI", "PING", "EXEC", "DISCARD", "AUTH pw", "MULTI", "AUTH wrong", "PING", "EXEC")...))
	c.expectReplies(t, "NOAUTH", "-NOAUTH Authentication required.\r\n", "-NOAUTH Authentication required.\r\n",
		"-EXECABORT Transaction discarded because of: NOAUTH Authentication required.\r\n", "-NOAUTH Authentication required.\r\n",
		ok, ok, queued, queued, "*2\r\n-WRONGPASS invalid username-password pair or user is disabled.\r\n"+pong)
}

// TestTransactionQuit: QUIT acts at once inside a transaction, as in Redis:
// +OK, and the connection closes with nothing run.
func TestTransactionQuit(t *testing.T) {
	ts := startServer(t, nil)
	c := dial3(t, ts.Addr)
	c.Send(t, commands(cmds("MULTI", "TB.ACQUIRE k 1 0.001", "QUIT", "EXEC")...))
	c.expectReplies(t, "QUIT", ok, queued, ok)
	c.ExpectClosedRESP3(t)
	expect(t, ts.Client(t), ints(1, 0, 0, 1000000), "TB.PEEK", "k", 1, 0.001) // full
}

// TestTransactionOtherCommandsSeeTheWholeUnit pins what docs/commands.md
// says a command other than a bucket command sees inside a transaction:
// the bucket commands run first, as one unit, so DBSIZE between two
// TB.ACQUIREs counts both buckets (Redis would count one).
func TestTransactionOtherCommandsSeeTheWholeUnit(t *testing.T) {
	ts := startServer(t, nil)
	c := dial3(t, ts.Addr)
	c.Send(t, commands(cmds("MULTI", "TB.ACQUIRE a 10 1", "DBSIZE", "TB.ACQUIRE b 10 1", "EXEC")...))
	c.expectReplies(t, "DBSIZE inside", ok, queued, queued, queued, "*3\r\n:1\r\n:2\r\n:1\r\n")
}

// TestTransactionBound: a transaction holds at most --max-query-bytes
// bytes (as RESP encodes its commands) and 65536 commands. The command
// beyond either bound is refused, and the transaction discarded at EXEC;
// the commands after it are still answered +QUEUED, as after any queuing
// error.
func TestTransactionBound(t *testing.T) {
	ts := startServer(t, func(c *frontConfig) { c.Limits.MaxQueryBytes = 4096 })
	c := dial3(t, ts.Addr)
	big := strings.Repeat("x", 1000)
	c.Send(t, commands(cmds("MULTI", "ECHO "+big, "ECHO "+big, "ECHO "+big, "ECHO "+big, "PING", "PING", "EXEC")...))
	tooMany := "-ERR too many commands queued: a transaction holds at most 65536 commands and 4096 bytes (--max-query-bytes); " +
		"EXEC will discard it (EXECABORT): split it into smaller transactions\r\n"
	c.expectReplies(t, "bytes", ok, queued, queued, queued, queued, tooMany, queued, execAbort) // 4 × 1023 bytes fit in 4096; PING's 14 do not

	ts = startServer(t, nil)
	c = dial3(t, ts.Addr)
	var b strings.Builder
	b.WriteString(testkit.Command("MULTI"))
	for range 1 << 16 {
		b.WriteString(testkit.Command("PING"))
	}
	b.WriteString(testkit.Command("TB.ACQUIRE", "k", "1", "0.001") + testkit.Command("EXEC") + testkit.Command("TB.PEEK", "k", "1", "0.001"))
	c.Send(t, b.String())
	c.expectReplies(t, "MULTI", ok)
	for i := range 1 << 16 {
		if got := c.reply(t); got != queued {
			t.Fatalf("PING %d: %q", i+1, got)
		}
	}
	c.expectReplies(t, "commands", strings.Replace(tooMany, "4096", strconv.Itoa(wire.DefaultMaxQueryBytes), 1), execAbort, fullPeek)
}

// TestTransactionTracking: invalidations of tracked bucket commands come
// after the whole EXEC reply, never inside it, each for its own command;
// whether a command is tracked is decided at its turn in EXEC (a CLIENT
// TRACKING ON queued before it counts); CLIENT CACHING YES before MULTI
// covers the whole transaction, as in Redis, and DISCARD uses it up.
func TestTransactionTracking(t *testing.T) {
	ts := startServer(t, nil)
	c := dial3(t, ts.Addr)
	peek := "*4\r\n:1\r\n:9\r\n:0\r\n:1000\r\n"
	runSteps(t, c,
		st(w(hello3), "HELLO", "3"),
		step{args: []string{"MULTI"}, want: w(ok)},
		st(w(queued), "TB.PEEK", "a", "10", "1"),
		st(w(queued), "CLIENT", "TRACKING", "ON"),
		st(w(queued), "TB.PEEK", "b", "10", "1"),
		st(w(queued), "TB.RESET", "c", "d"),
		st(w("*4\r\n"+peek+ok+peek+":0\r\n", invalidate("b"), invalidate("c", "d")), "EXEC"),
		st(w(ok), "CLIENT", "TRACKING", "OFF"),
		st(w(ok), "CLIENT", "TRACKING", "ON", "OPTIN"),
		st(w(ok), "CLIENT", "CACHING", "YES"),
		st(w(ok), "MULTI"),
		st(w(queued), "PING"),
		st(w(notCacheable), "TB.PEEK", "a", "10", "1"), // CACHING YES covers the transaction: refused
		st(w(execAbort), "EXEC"),
		st(w(peek), "TB.PEEK", "a", "10", "1"), // EXEC used CACHING up
		st(w(ok), "CLIENT", "CACHING", "YES"),
		st(w(ok), "MULTI"),
		st(w(ok), "DISCARD"),
		st(w(peek), "TB.PEEK", "a", "10", "1"), // so did DISCARD
		st(w(ok), "MULTI"),
		st(w(queued), "CLIENT", "CACHING", "YES"), // queued: applies inside EXEC
		st(w(queued), "TB.PEEK", "a", "10", "1"),
		st(w(queued), "HELLO", "2"),
		st(w("*3\r\n"+ok+peek+hello2), "EXEC"), // RESP2 by the end: no push
	)
}

// TestTransactionsAreIsolated: writers take one token from each of eight
// buckets (spread over the shards) in one transaction, while readers peek
// at all eight in one transaction; a reader must always see the eight at
// the same count. Each connection sends its transactions back to back, many
// per write, each taking the keys in another order, so that transactions of
// different connections reach the shards at the same time and in different
// orders. With EXEC's bucket commands sent as a plain pipeline (Caller.Run)
// instead of one unit, readers see writers half done (the test fails).
func TestTransactionsAreIsolated(t *testing.T) {
	ts := startServer(t, nil)
	var keys []string
	for i := range 8 {
		keys = append(keys, fmt.Sprint("iso-", i))
	}
	const writers, readers, writes, perWrite = 3, 3, 6, 50
	ctx := context.Background()
	rdb := ts.Client(t, func(o *redis.Options) { o.PoolSize = writers + readers })
	var wg sync.WaitGroup
	errs := make(chan error, writers+readers)
	run := func(op string) {
		defer wg.Done()
		for range writes {
			var execs []*redis.Cmd
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for tx := range perWrite {
					p.Do(ctx, "MULTI")
					for i := range keys {
						p.Do(ctx, op, keys[(i+tx)%len(keys)], 1e9, 1e-9)
					}
					execs = append(execs, p.Do(ctx, "EXEC"))
				}
				return nil
			})
			if err == nil && op == "TB.PEEK" {
				err = sameRemaining(execs)
			}
			if err != nil {
				errs <- err
				return
			}
		}
	}
	for i := range writers + readers {
		wg.Add(1)
		go run(map[bool]string{true: "TB.ACQUIRE", false: "TB.PEEK"}[i%2 == 0])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := int64(1e9 - writers*writes*perWrite)
	for _, k := range keys {
		got, err := rdb.Do(ctx, "TB.PEEK", k, 1e9, 1e-9, 0).Slice()
		if err != nil || got[1] != want {
			t.Fatalf("TB.PEEK %s: %v, %v; want %d tokens left", k, got, err, want)
		}
	}
}

// sameRemaining checks that each EXEC of TB.PEEKs saw every bucket with
// the same number of tokens.
func sameRemaining(execs []*redis.Cmd) error {
	for _, ex := range execs {
		peeks, err := ex.Slice()
		if err != nil {
			return err
		}
		var first int64
		for i, p := range peeks {
			v, _ := p.([]any)
			if len(v) != 4 {
				return fmt.Errorf("EXEC element %d: %v", i+1, p)
			}
			if i == 0 {
				first, _ = v[1].(int64)
			} else if v[1] != first {
				return fmt.Errorf("a reader saw %v: a transaction half done", peeks)
			}
		}
	}
	return nil
}
