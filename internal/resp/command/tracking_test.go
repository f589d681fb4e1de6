package command_test

import (
	"strconv"
	"strings"
	"testing"
)

// invalidate is the RESP3 push that tells a client to drop what it cached
// for keys.
func invalidate(keys ...string) string {
	s := ">2\r\n$10\r\ninvalidate\r\n*" + strconv.Itoa(len(keys)) + "\r\n"
	for _, k := range keys {
		s += "$" + strconv.Itoa(len(k)) + "\r\n" + k + "\r\n"
	}
	return s
}

// step is one command and every reply (and push) expected after it.
type step struct {
	args []string
	want []string
}

// run sends each step's command and checks what comes back, in order. A
// PING after the last step proves that nothing else was sent.
func runSteps(t *testing.T, c *conn3, steps ...step) {
	t.Helper()
	for _, s := range steps {
		c.Send(t, commands(s.args))
		c.expectReplies(t, strconv.Quote(strings.Join(s.args, " ")), s.want...)
	}
	if got := c.do(t, "PING"); got != "+PONG\r\n" {
		t.Fatalf("after the last step: %q, want +PONG (an unexpected push?)", got)
	}
}

// st is a step: the command args and the replies want.
func st(want []string, args ...string) step { return step{args: args, want: want} }

// w lists the replies of a step.
func w(replies ...string) []string { return replies }

// TestTrackingPushesRightAfterEachBucketReply: with tracking on (default
// mode), every bucket reply is followed at once by an invalidation of its
// keys, named as the client sent them: the reply depends on time, so no
// cached copy may outlive it. The push comes after the reply, never before:
// rueidis keeps a cache fill that an earlier invalidation raced.
func TestTrackingPushesRightAfterEachBucketReply(t *testing.T) {
	ts := startServer(t, nil)
	ts.Commands.SetPolicies(loadPolicies(t, "policies:\n  api: {capacity: 5, rate: 1, prefix: \"api:\"}\n"))
	c := dial3(t, ts.Addr)
	runSteps(t, c,
		st(w(hello3), "HELLO", "3"),
		st(w("+OK\r\n"), "CLIENT", "TRACKING", "ON"),
		st(w("*4\r\n:1\r\n:9\r\n:0\r\n:1000\r\n", invalidate("k")), "TB.PEEK", "k", "10", "1"),
		st(w(":1\r\n", invalidate("k")), "TB.ACQUIRE", "k", "10", "1"),
		st(w(":1\r\n", invalidate("u")), "TB.ACQUIRE", "u", "POLICY", "api"),
		// TB.MACQUIRE: the keys of its buckets, as sent, options aside.
		st(w(":1\r\n", invalidate("m1", "u")), "TB.MACQUIRE", "2", "m1", "10", "1", "u", "POLICY", "api", "COST", "1"),
		st(w("*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:30\r\n", invalidate("t")), "CL.THROTTLE", "t", "1", "2", "60"),
		st(w(":2\r\n", invalidate("k", "x", "api:u")), "TB.RESET", "k", "x", "api:u"),
		// An error reply carries no value to cache: no push.
		st(w("-ERR invalid capacity: must be a finite number > 0\r\n"), "TB.ACQUIRE", "k", "nan", "1"),
	)
	// A pipeline: each push right after its own reply.
	c.Send(t, commands([]string{"TB.ACQUIRE", "a", "10", "1"}, []string{"TB.ACQUIRE", "b", "10", "1"}, []string{"PING"}))
	c.expectReplies(t, "pipeline", ":1\r\n", invalidate("a"), ":1\r\n", invalidate("b"), "+PONG\r\n")

	// Connections that did not turn tracking on never get a push, in
	// either protocol: redis-py drops a pooled connection with unread data.
	for _, proto := range []string{"2", "3"} {
		other := dial3(t, ts.Addr)
		runSteps(t, other,
			st(w(map[string]string{"2": hello2, "3": hello3}[proto]), "HELLO", proto),
			st(w(":1\r\n"), "TB.ACQUIRE", "o"+proto, "10", "1"),
			st(w("*4\r\n:1\r\n:8\r\n:0\r\n:2000\r\n"), "TB.PEEK", "o"+proto, "10", "1"),
		)
	}
	runSteps(t, c,
		st(w("+OK\r\n"), "CLIENT", "TRACKING", "OFF"),
		st(w(":1\r\n"), "TB.ACQUIRE", "k", "10", "1"),
	)
}

// TestTrackingOptInOptOutAndBcast: which reads are tracked, as in Redis.
// OPTIN tracks only the command after CLIENT CACHING YES (CLIENT commands in
// between keep it), OPTOUT every one except the command after CLIENT
// CACHING NO, BCAST the keys under its prefixes.
func TestTrackingOptInOptOutAndBcast(t *testing.T) {
	ts := startServer(t, nil)
	c := dial3(t, ts.Addr)
	peek := "*4\r\n:1\r\n:9\r\n:0\r\n:1000\r\n"
	runSteps(t, c,
		st(w(hello3), "HELLO", "3"),
		st(w("+OK\r\n"), "CLIENT", "TRACKING", "ON", "OPTIN"),
		st(w(peek), "TB.PEEK", "k", "10", "1"),
		// A bucket reply the client asks to cache is refused: a push after
		// it cannot keep a client from serving the fill (rueidis).
		st(w("+OK\r\n"), "CLIENT", "CACHING", "YES"),
		st(w(notCacheable), "TB.PEEK", "k", "10", "1"),
		st(w(peek), "TB.PEEK", "k", "10", "1"),
		st(w("+OK\r\n"), "CLIENT", "CACHING", "yes"),
		st(w(":0\r\n"), "CLIENT", "GETREDIR"),
		st(w(notCacheable), "TB.ACQUIRE", "k", "10", "1"),
		st(w(peek), "TB.PEEK", "k", "10", "1"), // nothing was taken
		st(w("+OK\r\n"), "CLIENT", "CACHING", "YES"),
		st(w("+PONG\r\n"), "PING"), // any other command uses CACHING YES up
		st(w(peek), "TB.PEEK", "k", "10", "1"),
		st(w("+OK\r\n"), "CLIENT", "TRACKING", "OFF"),

		st(w("+OK\r\n"), "CLIENT", "TRACKING", "ON", "OPTOUT"),
		st(w(peek, invalidate("k")), "TB.PEEK", "k", "10", "1"),
		st(w("+OK\r\n"), "CLIENT", "CACHING", "NO"),
		st(w(peek), "TB.PEEK", "k", "10", "1"),
		st(w(peek, invalidate("k")), "TB.PEEK", "k", "10", "1"),
		st(w("+OK\r\n"), "CLIENT", "TRACKING", "OFF"),

		st(w("+OK\r\n"), "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a", "PREFIX", "c"),
		st(w(":1\r\n", invalidate("ab")), "TB.ACQUIRE", "ab", "10", "1"),
		st(w(":1\r\n"), "TB.ACQUIRE", "b", "10", "1"),
		st(w(":2\r\n", invalidate("ab", "c")), "TB.RESET", "ab", "b", "c"),
		st(w("+OK\r\n"), "CLIENT", "TRACKING", "OFF"),
		// NOLOOP changes nothing: the reply goes stale with time, not
		// with another client's write.
		st(w("+OK\r\n"), "CLIENT", "TRACKING", "ON", "BCAST", "NOLOOP"),
		st(w(":1\r\n", invalidate("b")), "TB.ACQUIRE", "b", "10", "1"),
	)
}

// TestTrackingInRESP2: Redis accepts CLIENT TRACKING ON without REDIRECT in
// RESP2 but cannot deliver invalidations there; nor does bucketd, and a
// RESP2 reply is never followed by a push. HELLO 3 then starts them.
func TestTrackingInRESP2(t *testing.T) {
	ts := startServer(t, nil)
	c := dial3(t, ts.Addr)
	runSteps(t, c,
		st(w("+OK\r\n"), "CLIENT", "TRACKING", "ON", "OPTIN"),
		st(w("+OK\r\n"), "CLIENT", "CACHING", "YES"),
		st(w(notCacheable), "TB.ACQUIRE", "k", "10", "1"),
		st(w(":1\r\n"), "TB.ACQUIRE", "k", "10", "1"),
		st(w("*6\r\n$5\r\nflags\r\n*2\r\n$2\r\non\r\n$5\r\noptin\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n"), "CLIENT", "TRACKINGINFO"),
		st(w(hello3), "HELLO", "3"),
		st(w("+OK\r\n"), "CLIENT", "CACHING", "YES"),
		st(w(notCacheable), "TB.ACQUIRE", "k", "10", "1"),
		st(w("+OK\r\n"), "CLIENT", "TRACKING", "ON"), // default mode: tracked, pushed
		st(w(":1\r\n", invalidate("k")), "TB.ACQUIRE", "k", "10", "1"),
	)
}

// notCacheable is the reply to a bucket command after CLIENT CACHING YES.
const notCacheable = "-ERR TB.* and CL.THROTTLE replies depend on time and must not be cached: " +
	"send the command without CLIENT CACHING YES (with rueidis: Do, not DoCache)\r\n"

// TestTrackingRedirect: a REDIRECT to a client that does not exist gets
// Redis's error; to the connection itself it is tracking without REDIRECT;
// to another connection bucketd refuses, because it cannot deliver there.
func TestTrackingRedirect(t *testing.T) {
	ts := startServer(t, nil)
	other := dial3(t, ts.Addr)
	otherID := other.do(t, "CLIENT", "ID")
	c := dial3(t, ts.Addr)
	id := c.do(t, "CLIENT", "ID")
	id = id[1 : len(id)-2]
	runSteps(t, c,
		st(w(hello3), "HELLO", "3"),
		st(w("-ERR The client ID you want redirect to does not exist\r\n"), "CLIENT", "TRACKING", "ON", "REDIRECT", "999"),
		st(w("-ERR The client ID you want redirect to does not exist\r\n"), "CLIENT", "TRACKING", "ON", "REDIRECT", "0"),
		st(w("-ERR value is not an integer or out of range\r\n"), "CLIENT", "TRACKING", "ON", "REDIRECT", "x"),
		st(w("-ERR bucketd cannot deliver invalidation messages to another connection: turn tracking on, without REDIRECT, on the connection that reads (RESP3, HELLO 3)\r\n"),
			"CLIENT", "TRACKING", "ON", "REDIRECT", otherID[1:len(otherID)-2]),
		st(w(":-1\r\n"), "CLIENT", "GETREDIR"),
		st(w("+OK\r\n"), "CLIENT", "TRACKING", "ON", "REDIRECT", id),
		st(w(":"+id+"\r\n"), "CLIENT", "GETREDIR"),
		st(w(":1\r\n", invalidate("k")), "TB.ACQUIRE", "k", "10", "1"),
		st(w("%3\r\n$5\r\nflags\r\n~1\r\n$2\r\non\r\n$8\r\nredirect\r\n:"+id+"\r\n$8\r\nprefixes\r\n*0\r\n"), "CLIENT", "TRACKINGINFO"),
	)
}

// TestTrackingErrorsAsRedis: the option errors of CLIENT TRACKING and
// CLIENT CACHING, worded as Redis 7.2 words them; none changes the state.
func TestTrackingErrorsAsRedis(t *testing.T) {
	ts := startServer(t, nil)
	c := dial3(t, ts.Addr)
	syntax := "-ERR syntax error\r\n"
	runSteps(t, c,
		st(w(hello3), "HELLO", "3"),
		st(w("-ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled\r\n"), "CLIENT", "CACHING", "YES"),
		st(w(syntax), "CLIENT", "TRACKING", "maybe"),
		st(w(syntax), "CLIENT", "TRACKING", "ON", "FOO"),
		st(w(syntax), "CLIENT", "TRACKING", "ON", "PREFIX"),
		st(w("-ERR PREFIX option requires BCAST mode to be enabled\r\n"), "CLIENT", "TRACKING", "ON", "PREFIX", "a"),
		st(w("-ERR OPTIN and OPTOUT are not compatible with BCAST\r\n"), "CLIENT", "TRACKING", "ON", "BCAST", "OPTIN"),
		st(w("-ERR You can't specify both OPTIN mode and OPTOUT mode\r\n"), "CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT"),
		st(w("-ERR Prefix 'a' overlaps with another provided prefix 'ab'. Prefixes for a single client must not overlap.\r\n"),
			"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a", "PREFIX", "ab"),
		st(w("-ERR wrong number of arguments for 'client|tracking' command\r\n"), "CLIENT", "TRACKING"),
		st(w("-ERR wrong number of arguments for 'client|caching' command\r\n"), "CLIENT", "CACHING"),
		st(w("%3\r\n$5\r\nflags\r\n~1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n"), "CLIENT", "TRACKINGINFO"),

		st(w("+OK\r\n"), "CLIENT", "TRACKING", "ON", "OPTIN"),
		st(w("-ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.\r\n"), "CLIENT", "CACHING", "NO"),
		st(w(syntax), "CLIENT", "CACHING", "maybe"),
		st(w("-ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.\r\n"), "CLIENT", "TRACKING", "ON", "OPTOUT"),
		st(w("-ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.\r\n"), "CLIENT", "TRACKING", "ON", "BCAST"),
		st(w("+OK\r\n"), "CLIENT", "TRACKING", "OFF"),

		st(w("+OK\r\n"), "CLIENT", "TRACKING", "ON"),
		st(w("-ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.\r\n"), "CLIENT", "CACHING", "YES"),
		st(w("+OK\r\n"), "CLIENT", "TRACKING", "OFF", "OPTIN"), // OFF ignores the options after checking them
		st(w("+OK\r\n"), "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "b", "PREFIX", "a"),
		st(w("-ERR Prefix 'bc' overlaps with an existing prefix 'b'. Prefixes for a single client must not overlap.\r\n"), "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "bc"),
		st(w("+OK\r\n"), "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "c"),
		st(w("%3\r\n$5\r\nflags\r\n~2\r\n$2\r\non\r\n$5\r\nbcast\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"), "CLIENT", "TRACKINGINFO"),
	)
}
