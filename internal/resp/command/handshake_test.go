package command_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/info"
	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The connect sequences of the current clients, byte for byte as each
// sends them in its default configuration (research notes: handshakes.md,
// with the wire captures it was made from), and the replies they need.

// errMaint is what Redis 7.2 answers to CLIENT MAINT_NOTIFICATIONS, a Redis
// 8 command: every client ignores this error in its default "auto" mode,
// while +OK would make it wait for maintenance pushes that never come.
const errMaint = "-ERR unknown subcommand 'MAINT_NOTIFICATIONS'. Try CLIENT HELP.\r\n"

// helloFor returns the HELLO 3 a client sends: with AUTH default <pass>
// when it has a password. upper is how the client spells the command.
func helloFor(upper bool, pass string) string {
	name := "hello"
	if upper {
		name = "HELLO"
	}
	if pass == "" {
		return commands([]string{name, "3"})
	}
	return commands([]string{name, "3", "AUTH", "default", pass})
}

// handshakeServers runs fn against each kind of server a client may meet:
// without a password, with one the client gives, and without one while the
// client gives one anyway (Redis's default user takes any password then).
func handshakeServers(t *testing.T, fn func(t *testing.T, addr, pass string)) {
	for _, tc := range []struct {
		name, requirepass, pass string
	}{
		{"no password", "", ""},
		{"password", "pw", "pw"},
		{"password the server does not need", "", "pw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, func(cfg *frontConfig) { cfg.RequirePass = tc.requirepass })
			fn(t, ts.Addr, tc.pass)
		})
	}
}

// TestHandshakeRedisPy8 replays redis-py 8's connect (on_connect_check_health):
// HELLO 3, whose reply must be a map with the integer proto 3, then
// CLIENT MAINT_NOTIFICATIONS (host "localhost": internal-fqdn), then both
// CLIENT SETINFO in one write. redis-py then refuses a pooled connection
// with unread data, so the next reply must be the next command's.
func TestHandshakeRedisPy8(t *testing.T) {
	handshakeServers(t, func(t *testing.T, addr, pass string) {
		c := dial3(t, addr)
		c.Send(t, helloFor(true, pass))
		c.expectReplies(t, "HELLO 3", hello3)
		c.Send(t, "*5\r\n$6\r\nCLIENT\r\n$19\r\nMAINT_NOTIFICATIONS\r\n$2\r\nON\r\n$20\r\nmoving-endpoint-type\r\n$13\r\ninternal-fqdn\r\n")
		c.expectReplies(t, "MAINT_NOTIFICATIONS", errMaint)
		c.Send(t, "*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$8\r\nredis-py\r\n"+
			"*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$7\r\nLIB-VER\r\n$5\r\n8.0.1\r\n")
		c.expectReplies(t, "SETINFO", "+OK\r\n", "+OK\r\n")
		if got := c.do(t, "TB.ACQUIRE", "k", "10", "1"); got != ":1\r\n" {
			t.Fatalf("TB.ACQUIRE after the handshake: %q", got)
		}
		if got := c.do(t, "TB.ACQUIRE", "k", "10", "1", "1", "WITHINFO"); got != "*4\r\n:1\r\n:8\r\n:0\r\n:2000\r\n" {
			t.Fatalf("TB.ACQUIRE WITHINFO after the handshake: %q", got)
		}
	})
	// A wrong password fails the connection, as on Redis.
	ts := startServer(t, func(cfg *frontConfig) { cfg.RequirePass = "pw" })
	c := dial3(t, ts.Addr)
	c.Send(t, helloFor(true, "nope"))
	c.expectReplies(t, "HELLO 3 AUTH with a wrong password", "-"+errWrongPass+"\r\n")
}

// TestHandshakeRueidis replays rueidis's one pipelined write: HELLO 3,
// CLIENT TRACKING ON OPTIN (its default client-side cache; an error fails
// NewClient), both SETINFO. It then probes for a cluster with CLUSTER SLOTS
// and falls back to a single client on an error that names CLUSTER.
func TestHandshakeRueidis(t *testing.T) {
	handshakeServers(t, func(t *testing.T, addr, pass string) {
		c := dial3(t, addr)
		c.Send(t, helloFor(true, pass)+commands(
			[]string{"CLIENT", "TRACKING", "ON", "OPTIN"},
			[]string{"CLIENT", "SETINFO", "LIB-NAME", "rueidis"},
			[]string{"CLIENT", "SETINFO", "LIB-VER", "1.0.79"},
		))
		c.expectReplies(t, "rueidis init", hello3, "+OK\r\n", "+OK\r\n", "+OK\r\n")
		if got := c.do(t, "CLUSTER", "SLOTS"); !strings.HasPrefix(got, "-") || !strings.Contains(strings.ToUpper(got), "CLUSTER") {
			t.Fatalf("CLUSTER SLOTS = %q, want an error naming CLUSTER", got)
		}
		if got := c.do(t, "PING"); got != "+PONG\r\n" {
			t.Fatalf("PING = %q", got)
		}
		// Client.Do of an uncached command: no CACHING YES, so no push.
		if got := c.do(t, "TB.ACQUIRE", "k", "10", "1"); got != ":1\r\n" {
			t.Fatalf("TB.ACQUIRE = %q", got)
		}
		if got := c.do(t, "PING"); got != "+PONG\r\n" {
			t.Fatalf("PING after TB.ACQUIRE = %q (an unexpected push?)", got)
		}
	})
}

// TestHandshakeNodeRedis6 replays node-redis 6.3 (createClient with a url):
// every handshake command in one write; HELLO's error would reject
// connect(), the others are ignored.
func TestHandshakeNodeRedis6(t *testing.T) {
	handshakeServers(t, func(t *testing.T, addr, pass string) {
		c := dial3(t, addr)
		c.Send(t, helloFor(true, pass)+
			"*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$7\r\nLIB-VER\r\n$5\r\n6.3.1\r\n"+
			"*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$10\r\nnode-redis\r\n"+
			"*5\r\n$6\r\nCLIENT\r\n$19\r\nMAINT_NOTIFICATIONS\r\n$2\r\nON\r\n$20\r\nmoving-endpoint-type\r\n$11\r\nexternal-ip\r\n")
		c.expectReplies(t, "node-redis handshake", hello3, "+OK\r\n", "+OK\r\n", errMaint)
		if got := c.do(t, "TB.ACQUIRE", "k", "10", "1"); got != ":1\r\n" {
			t.Fatalf("TB.ACQUIRE = %q", got)
		}
	})
}

// TestHandshakeIoredis6 replays ioredis 6: hello and both SETINFO written at
// once in lower case, then its ready check, INFO with no argument, whose
// reply must be a string without loading:1 (an error is fatal).
func TestHandshakeIoredis6(t *testing.T) {
	handshakeServers(t, func(t *testing.T, addr, pass string) {
		c := dial3(t, addr)
		c.Send(t, helloFor(false, pass)+
			"*4\r\n$6\r\nclient\r\n$7\r\nSETINFO\r\n$7\r\nLIB-VER\r\n$5\r\n6.0.0\r\n"+
			"*4\r\n$6\r\nclient\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$7\r\nioredis\r\n")
		c.expectReplies(t, "ioredis handshake", hello3, "+OK\r\n", "+OK\r\n")
		c.Send(t, "*1\r\n$4\r\ninfo\r\n")
		info := c.reply(t)
		if !strings.HasPrefix(info, "=") || !strings.Contains(info, "\r\ntxt:# Server\r\n") || strings.Contains(info, "loading:1") {
			t.Fatalf("INFO in RESP3 = %.200q, want a verbatim string of INFO text", info)
		}
		if got := c.do(t, "TB.ACQUIRE", "k", "10", "1"); got != ":1\r\n" {
			t.Fatalf("TB.ACQUIRE = %q", got)
		}
	})
}

// TestGoRedisPasswordWithoutServerPassword: go-redis 9 with a Password sends
// HELLO 3 AUTH default pw; against a bucketd without a password that must
// succeed as on Redis (the default user takes any password), or go-redis
// falls back to AUTH pw, which fails, and so does every command.
func TestGoRedisPasswordWithoutServerPassword(t *testing.T) {
	ts := startServer(t, nil)
	c := dial3(t, ts.Addr)
	c.Send(t, "*5\r\n$5\r\nhello\r\n$1\r\n3\r\n$4\r\nauth\r\n$7\r\ndefault\r\n$2\r\npw\r\n")
	c.expectReplies(t, "hello 3 auth default pw", hello3)
	for _, proto := range []int{0, 3} { // 0: go-redis's default, RESP3
		gr := ts.Client(t, func(o *redis.Options) { o.Password = "pw"; o.Protocol = proto })
		expect(t, gr, int64(1), "TB.ACQUIRE", fmt.Sprint("gr", proto), "10", "1")
		// HELLO with no argument answers in the connection's protocol.
		hello, ok := do(t, gr, "HELLO").(map[any]any)
		if !ok || hello["proto"] != int64(3) {
			t.Fatalf("Protocol %d: HELLO = %#v, want a map with proto 3", proto, hello)
		}
	}
}

// redisTool returns the path of a redis-tools binary, skipping or failing
// the test like redistest when it is missing.
func redisTool(t *testing.T, name string) string {
	t.Helper()
	if name == "redis-cli" {
		return redistest.CLIBinary(t)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	msg := name + " not found: install redis-tools (Debian/Ubuntu) or redis (macOS)"
	if os.Getenv(redistest.RequireEnv) != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// TestRedisCLIAndBenchmarkWithRESP3: redis-cli -3 prints the reply with no
// "HELLO 3 failed", and redis-benchmark -3 (which exits 1 on any error
// reply, HELLO's included) completes.
func TestRedisCLIAndBenchmarkWithRESP3(t *testing.T) {
	ts := startServer(t, nil)
	port := ts.Addr[strings.LastIndexByte(ts.Addr, ':')+1:]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, redisTool(t, "redis-cli"), "-3", "--no-raw", "-p", port,
		"TB.ACQUIRE", "k", "10", "1").CombinedOutput()
	if err != nil || string(out) != "(integer) 1\n" {
		t.Fatalf("redis-cli -3 TB.ACQUIRE: %v, output %q, want \"(integer) 1\\n\"", err, out)
	}
	out, err = exec.CommandContext(ctx, redisTool(t, "redis-benchmark"), "-3", "-p", port, "-q",
		"-n", "1000", "-P", "16", "-c", "4", "-r", "1000",
		"TB.ACQUIRE", "key:__rand_int__", "100", "10", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-benchmark -3: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "TB.ACQUIRE") || strings.Contains(string(out), "Error") {
		t.Fatalf("redis-benchmark -3 output:\n%s", out)
	}
}

// TestHandshakeValkeyGlide replays valkey-glide 2.5: HELLO 3, both SETINFO
// pipelined, then INFO REPLICATION, whose reply must hold role:master or
// glide fails with "No primary node found". In replicate mode bucketd's own
// replication fields follow Redis's two, in the same section.
func TestHandshakeValkeyGlide(t *testing.T) {
	replicate := func() info.Section {
		return info.Section{Title: "Replication", Fields: []info.Field{info.Text("bucketd_mode", "replicate")}}
	}
	for _, tc := range []struct {
		name string
		info []func() info.Section
		want string
	}{
		{"memory mode", nil, "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"},
		{"replicate mode", []func() info.Section{replicate}, "# Replication\r\nrole:master\r\nconnected_slaves:0\r\nbucketd_mode:replicate\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, func(cfg *frontConfig) { cfg.Info = tc.info })
			c := dial3(t, ts.Addr)
			c.Send(t, helloFor(true, "")+commands(
				[]string{"CLIENT", "SETINFO", "LIB-NAME", "GlideJS"},
				[]string{"CLIENT", "SETINFO", "LIB-VER", "unknown"},
			))
			c.expectReplies(t, "glide handshake", hello3, "+OK\r\n", "+OK\r\n")
			body := "txt:" + tc.want
			c.Send(t, commands([]string{"INFO", "REPLICATION"}))
			c.expectReplies(t, "INFO REPLICATION", "="+strconv.Itoa(len(body))+"\r\n"+body+"\r\n")
			if all := c.do(t, "INFO"); strings.Count(all, "# Replication\r\n") != 1 || !strings.Contains(all, tc.want) {
				t.Fatalf("INFO: want one section %q in\n%s", tc.want, all)
			}
		})
	}
}

// TestHelloForms: every form of HELLO, as Redis 7.2 answers it. The
// protocol is the connection's own: HELLO 3 switches, HELLO 2 switches
// back, HELLO alone answers in the protocol in use, and a failing HELLO
// changes nothing.
func TestHelloForms(t *testing.T) {
	ts := startServer(t, nil)
	c := dial3(t, ts.Addr)
	other := dial3(t, ts.Addr)
	noProto := "-NOPROTO unsupported protocol version\r\n"
	notInt := "-ERR Protocol version is not an integer or out of range\r\n"
	runSteps(t, c,
		st(w(hello2), "HELLO"),
		st(w("$-1\r\n"), "CLIENT", "GETNAME"),
		st(w(hello3), "HELLO", "3"),
		st(w("_\r\n"), "CLIENT", "GETNAME"),
		st(w(hello3), "HELLO"),
		st(w(noProto), "HELLO", "4"),
		st(w(noProto), "HELLO", "1"),
		st(w(noProto), "HELLO", "0"),
		st(w(noProto), "HELLO", "-1"),
		st(w(notInt), "HELLO", "three"),
		st(w(notInt), "HELLO", "99999999999999999999"),
		st(w("-ERR Syntax error in HELLO option 'SETNAME'\r\n"), "HELLO", "2", "SETNAME"),
		st(w("-ERR Syntax error in HELLO option 'AUTH'\r\n"), "HELLO", "2", "AUTH", "default"),
		st(w("-"+errWrongPass+"\r\n"), "HELLO", "2", "AUTH", "bob", "x"),
		st(w(hello3), "HELLO"), // still RESP3 after the failures
		st(w(hello3), "HELLO", "3", "AUTH", "default", "anything", "SETNAME", "app"),
		st(w("$3\r\napp\r\n"), "CLIENT", "GETNAME"),
		st(w(hello2), "HELLO", "2"),
		st(w("*4\r\n$4\r\nsave\r\n$0\r\n\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"), "CONFIG", "GET", "save", "appendonly"),
		st(w(hello3), "hello", "3"),
		st(w("%2\r\n$4\r\nsave\r\n$0\r\n\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"), "CONFIG", "GET", "save", "appendonly"),
	)
	// Another connection still speaks RESP2.
	runSteps(t, other, st(w(hello2), "HELLO"), st(w("$-1\r\n"), "CLIENT", "GETNAME"))

	// With a password: HELLO without AUTH is refused until the connection
	// has authenticated; HELLO 3 AUTH authenticates and switches at once.
	ts = startServer(t, func(cfg *frontConfig) { cfg.RequirePass = "pw" })
	c = dial3(t, ts.Addr)
	noAuth := "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n"
	runSteps(t, c,
		st(w(noAuth), "HELLO", "3"),
		st(w(noAuth), "HELLO"),
		st(w(noAuth), "HELLO", "3", "SETNAME", "app"),
		st(w("-"+errWrongPass+"\r\n"), "HELLO", "3", "AUTH", "default", "wrong"),
		st(w("-NOAUTH Authentication required.\r\n"), "CLIENT", "GETNAME"),
		st(w(hello3), "HELLO", "3", "AUTH", "default", "pw"),
		st(w(":1\r\n"), "TB.ACQUIRE", "k", "10", "1"),
		st(w(hello2), "HELLO", "2"),
	)
}
