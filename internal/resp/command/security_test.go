package command_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/resp/command"
	"github.com/bucketd/bucketd/internal/testcert"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// errWrongPass is the reply to a wrong password, as clients see it.
const errWrongPass = "WRONGPASS invalid username-password pair or user is disabled."

func TestRequirePass(t *testing.T) {
	ts := startServer(t, func(cfg *frontConfig) { cfg.RequirePass = "s3cret" })
	c := ts.Dial(t)
	for _, step := range []struct{ send, want string }{
		{"PING\r\n", "-NOAUTH Authentication required.\r\n"},
		{"TB.ACQUIRE k 10 1\r\n", "-NOAUTH Authentication required.\r\n"},
		{"HELLO 2\r\n", "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n"},
		{"AUTH wrong\r\n", "-" + errWrongPass + "\r\n"},
		{"AUTH bob s3cret\r\n", "-" + errWrongPass + "\r\n"},
		{"AUTH s3cret\r\n", "+OK\r\n"},
		{"TB.ACQUIRE k 10 1\r\n", ":1\r\n"},
	} {
		c.Send(t, step.send)
		if got := c.Line(t); got != step.want {
			t.Fatalf("%q: got %q, want %q", step.send, got, step.want)
		}
	}
	// AUTH default <password> and HELLO 2 AUTH work too.
	c2 := ts.Dial(t)
	c2.Send(t, "AUTH default s3cret\r\n")
	if got := c2.Line(t); got != "+OK\r\n" {
		t.Fatalf("AUTH default: %q", got)
	}
	c3 := ts.Dial(t)
	c3.Send(t, "HELLO 2 AUTH default nope\r\nHELLO 2 AUTH default s3cret\r\n")
	if got := c3.Line(t); got != "-"+errWrongPass+"\r\n" {
		t.Fatalf("HELLO with a wrong password: %q", got)
	}
	if got := c3.Line(t); got != "*14\r\n" {
		t.Fatalf("HELLO 2 AUTH: %q", got)
	}
	// go-redis with a password: HELLO 3 AUTH default <password>.
	ok := ts.Client(t, func(o *redis.Options) { o.Password = "s3cret" })
	expect(t, ok, int64(1), "TB.ACQUIRE", "k", "10", "1")
	bad := ts.Client(t, func(o *redis.Options) { o.Password = "wrong" })
	if err := bad.Ping(context.Background()).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password through go-redis: %v", err)
	}
	if n := ts.Commands.Stats().Errors[command.ErrAuth]; n < 5 {
		t.Fatalf("auth errors counted: %d", n)
	}
}

func TestNoPasswordAuthBehavesLikeRedisDefaultUser(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.Client(t)
	expect(t, c, "ERROR "+errNoPasswordSet, "AUTH", "x")
	expect(t, c, "OK", "AUTH", "default", "anything")
	expect(t, c, "ERROR "+errWrongPass, "AUTH", "bob", "x")
}

func TestMaxClients(t *testing.T) {
	ts := startServer(t, func(cfg *frontConfig) { cfg.MaxClients = 2 })
	for range 2 {
		c := ts.Dial(t)
		c.Send(t, "PING\r\n")
		c.Line(t)
	}
	third := ts.Dial(t)
	if got := third.Line(t); got != "-ERR max number of clients reached\r\n" {
		t.Fatalf("third client: %q", got)
	}
	third.ExpectClosed(t)
	if st := ts.Server.Stats(); st.RejectedConnections != 1 {
		t.Fatalf("rejected connections %d, want 1", st.RejectedConnections)
	}
}

func TestIdleTimeoutClosesQuietClients(t *testing.T) {
	ts := startServer(t, func(cfg *frontConfig) { cfg.IdleTimeout = 200 * time.Millisecond })
	c := ts.Dial(t)
	c.Send(t, "PING\r\n")
	if c.Line(t) != "+PONG\r\n" {
		t.Fatal("no PONG")
	}
	start := time.Now()
	c.ExpectClosed(t)
	if d := time.Since(start); d < 150*time.Millisecond || d > 5*time.Second {
		t.Fatalf("closed after %v, want about 200ms", d)
	}
}

func TestPolicies(t *testing.T) {
	ts := startServer(t, nil)
	ts.Commands.SetPolicies(loadPolicies(t, "policies:\n  api: {capacity: 10, rate: 0.001}\n  pref: {capacity: 2, rate: 0.001, prefix: \"p:\"}\n"))
	c := ts.Client(t)
	expect(t, c, ints(1, 9, 0, 1000000), "TB.ACQUIRE", "u", "POLICY", "api", "WITHINFO")
	expect(t, c, int64(1), "tb.acquire", "u", "policy", "api", "3")
	expect(t, c, ints(1, 5, 0, 5000000), "TB.PEEK", "u", "POLICY", "api")
	expect(t, c, "ERROR ERR unknown policy 'nope': define it under policies: in the --config file", "TB.ACQUIRE", "u", "POLICY", "nope")
	// The prefix makes "u" under "pref" the bucket "p:u".
	expect(t, c, int64(1), "TB.ACQUIRE", "u", "POLICY", "pref", "2")
	expect(t, c, int64(0), "TB.ACQUIRE", "p:u", "2", "0.001")
	// A reload that lowers the capacity clamps the bucket at its next use.
	ts.Commands.SetPolicies(loadPolicies(t, "policies:\n  api: {capacity: 3, rate: 0.001}\n"))
	expect(t, c, ints(1, 2, 0, 1000000), "TB.ACQUIRE", "u", "POLICY", "api", "1", "WITHINFO")
}

func TestConfigReload(t *testing.T) {
	calls := 0
	fail := false
	var restart []string
	ts := startServer(t, func(cfg *frontConfig) {
		cfg.Reload = func() ([]string, error) {
			calls++
			if fail {
				return nil, errors.New("policies.api.capacity: must be > 0")
			}
			return restart, nil
		}
	})
	c := ts.Client(t)
	expect(t, c, "OK", "CONFIG", "RELOAD")
	restart = []string{"max-clients", "idle-timeout"}
	expect(t, c, "OK; restart bucketd to apply max-clients, idle-timeout", "CONFIG", "RELOAD")
	fail = true
	expect(t, c, "ERROR ERR reload failed, the running configuration stays: policies.api.capacity: must be > 0", "CONFIG", "RELOAD")
	if calls != 3 {
		t.Fatalf("Reload called %d times", calls)
	}
	none := startServer(t, nil)
	expect(t, none.Client(t), "ERROR ERR CONFIG RELOAD needs a configuration file: start bucketd with --config", "CONFIG", "RELOAD")
}

func TestTLSAndMutualTLS(t *testing.T) {
	serverCert, serverCA := testcert.New(t, "bucketd")
	clientCert, clientCA := testcert.New(t, "client")
	pool := x509.NewCertPool()
	pool.AddCert(serverCA)
	clientPool := x509.NewCertPool()
	clientPool.AddCert(clientCA)
	ts := startServer(t, func(cfg *frontConfig) {
		cfg.TLS = &tls.Config{
			Certificates: []tls.Certificate{serverCert},
			ClientCAs:    clientPool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
			MinVersion:   tls.VersionTLS12,
		}
	})
	good := ts.Client(t, func(o *redis.Options) {
		o.TLSConfig = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12}
	})
	expect(t, good, int64(1), "TB.ACQUIRE", "tls", "1", "1")
	anon := ts.Client(t, func(o *redis.Options) {
		o.TLSConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	})
	if err := anon.Ping(context.Background()).Err(); err == nil {
		t.Fatal("a client without a certificate got through mutual TLS")
	}
	plain := ts.Client(t)
	if err := plain.Ping(context.Background()).Err(); err == nil {
		t.Fatal("a plaintext client got an answer from the TLS port")
	}
}

// TestEveryErrorReplyIsCounted: error replies from every path land in a
// kind, so the error metrics and INFO add up to the errors clients saw.
func TestEveryErrorReplyIsCounted(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.Client(t)
	expect(t, c, "PONG", "PING") // connect first: the handshake's MAINT_NOTIFICATIONS is an error too
	before := ts.Commands.Stats().Errors
	for _, args := range [][]any{
		{"PING", "a", "b"}, {"SELECT", "7"}, {"HELLO", "4"}, {"CLIENT", "SETNAME", "a b"},
		{"CLIENT", "FLY"}, {"CONFIG", "RELOAD"}, {"NOSUCH"}, {"TB.ACQUIRE", "k", "x", "1"}, {"AUTH", "x"},
	} {
		if err := c.Do(context.Background(), args...).Err(); err == nil {
			t.Fatalf("%v did not fail", args)
		}
	}
	// The per-pipeline tally is added to the counters before the reply is
	// written, so the counts are final once the client has its replies.
	after := ts.Commands.Stats().Errors
	total := int64(0)
	for i := range after {
		total += after[i] - before[i]
	}
	if total != 9 {
		t.Fatalf("%d errors counted for 9 error replies: %v -> %v", total, before, after)
	}
	if got := after[command.ErrArity] - before[command.ErrArity]; got != 1 {
		t.Errorf("arity errors %d, want 1", got)
	}
	if got := after[command.ErrUnknownCmd] - before[command.ErrUnknownCmd]; got != 2 {
		t.Errorf("unknown command/subcommand errors %d, want 2", got)
	}
	if got := after[command.ErrAuth] - before[command.ErrAuth]; got != 1 {
		t.Errorf("auth errors %d, want 1", got)
	}
}

// TestUnauthenticatedBounds is issue 19 item 2: with a password, before
// AUTH succeeds, a command of more than 10 arguments or an argument longer
// than 16 KiB gets Redis's (6.2.6+) protocol error and the connection is
// closed, so a client without the password can make bucketd buffer little.
// AUTH (or HELLO … AUTH) lifts the bounds, for the commands pipelined after
// it in the same write too, as in Redis; without a password they never
// apply.
func TestUnauthenticatedBounds(t *testing.T) {
	ts := startServer(t, func(cfg *frontConfig) { cfg.RequirePass = "s3cret" })
	reset11 := testkit.Command("TB.RESET", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j")
	echo20k := testkit.Command("ECHO", strings.Repeat("e", 20000))
	for _, tc := range []struct{ name, send, want string }{
		{"a bulk of 66060288 bytes", "*2\r\n$4\r\nAUTH\r\n$66060288\r\n", "-ERR Protocol error: unauthenticated bulk length\r\n"},
		{"11 arguments", reset11, "-ERR Protocol error: unauthenticated multibulk length\r\n"},
		{"after a command", "PING\r\n" + echo20k, "-NOAUTH Authentication required.\r\n-ERR Protocol error: unauthenticated bulk length\r\n"},
		{"after a wrong AUTH", "AUTH nope\r\n" + reset11, "-" + errWrongPass + "\r\n-ERR Protocol error: unauthenticated multibulk length\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ts.Dial(t)
			c.Send(t, tc.send)
			got, _ := io.ReadAll(c) // to the end: the server closes the connection
			if string(got) != tc.want {
				t.Fatalf("got %.200q, want %q and the connection closed", got, tc.want)
			}
		})
	}
	c := ts.Dial(t)
	c.Send(t, "AUTH s3cret\r\n"+reset11+echo20k+"HELLO 3 AUTH default s3cret\r\n")
	if got := c.Line(t) + c.Line(t); got != "+OK\r\n:0\r\n" {
		t.Fatalf("AUTH, then 11 arguments in the same write: %q", got)
	}
	if got := c.Reply(t); got != "$20000\r\n"+strings.Repeat("e", 20000)+"\r\n" {
		t.Fatalf("then an ECHO of 20000 bytes: %.60q", got)
	}
	c2 := ts.Dial(t)
	c2.Send(t, "HELLO 2 AUTH default s3cret\r\n"+reset11)
	if got := c2.Reply(t); !strings.HasPrefix(got, "*14\r\n") {
		t.Fatalf("HELLO 2 AUTH: %.60q", got)
	}
	if got := c2.Line(t); got != ":0\r\n" {
		t.Fatalf("HELLO 2 AUTH, then 11 arguments in the same write: %q", got)
	}
	if n := ts.Commands.Stats().Errors[command.ErrProtocol]; n != 4 {
		t.Errorf("protocol errors counted: %d, want 4", n)
	}

	open := startServer(t, nil)
	c3 := open.Dial(t)
	c3.Send(t, reset11+echo20k)
	if got := c3.Line(t); got != ":0\r\n" {
		t.Fatalf("without a password, 11 arguments: %q", got)
	}
}
