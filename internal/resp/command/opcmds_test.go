package command_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// Tests of the operator commands (CLIENT LIST/INFO/KILL, SLOWLOG, TIME,
// INFO commandstats and latencystats), with go-redis and raw connections
// against the real front on 127.0.0.1:0; MONITOR's are in monitor_test.go.

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// clientFields are the fields of a CLIENT LIST line, in Redis 7.2's order.
var clientFields = []string{"id", "addr", "laddr", "fd", "name", "age", "idle", "flags", "db", "sub", "psub", "ssub",
	"multi", "qbuf", "qbuf-free", "argv-mem", "multi-mem", "rbs", "rbp", "obl", "oll", "omem", "tot-mem", "events",
	"cmd", "user", "redir", "resp", "lib-name", "lib-ver"}

// parseClientLine splits a CLIENT LIST line into its fields, failing the
// test unless they are clientFields in order.
func parseClientLine(t *testing.T, line string) map[string]string {
	t.Helper()
	m := map[string]string{}
	var names []string
	for _, kv := range strings.Split(line, " ") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("field %q of %q has no =", kv, line)
		}
		names = append(names, k)
		m[k] = v
	}
	if strings.Join(names, " ") != strings.Join(clientFields, " ") {
		t.Fatalf("fields %q, want Redis's %q", names, clientFields)
	}
	return m
}

func TestClientListAndInfo(t *testing.T) {
	ts := startServer(t, nil)
	ctx := context.Background()
	a := ts.Client(t, func(o *redis.Options) { o.ClientName = "worker-a" })
	b := ts.Client(t, func(o *redis.Options) { o.Protocol = 2 })
	if err := b.Do(ctx, "CLIENT", "SETINFO", "LIB-NAME", "go redis").Err(); err == nil ||
		err.Error() != "ERR LIB-NAME cannot contain spaces, newlines or special characters." {
		t.Errorf("SETINFO with a space: %v", err)
	}
	idA, err := a.ClientID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	idB, _ := b.ClientID(ctx).Result()
	list, err := a.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(list, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("CLIENT LIST has %d lines, want 2: %q", len(lines), list)
	}
	byID := map[int64]map[string]string{}
	for _, l := range lines {
		m := parseClientLine(t, l)
		byID[int64(atoi(t, m["id"]))] = m
	}
	la, lb := byID[idA], byID[idB]
	if la == nil || lb == nil || atoi(t, parseClientLine(t, lines[0])["id"]) != int(min(idA, idB)) {
		t.Fatalf("CLIENT LIST %q: want clients %d and %d, in the order of their ids", list, idA, idB)
	}
	if la["name"] != "worker-a" || la["resp"] != "3" || lb["resp"] != "2" || la["cmd"] != "client|list" || lb["cmd"] != "client|id" {
		t.Errorf("name, resp, cmd: %q / %q", lines[0], lines[1])
	}
	if la["laddr"] != ts.Addr || la["flags"] != "N" || la["multi"] != "-1" || la["user"] != "default" || la["db"] != "0" {
		t.Errorf("line of a: %q", lines[0])
	}
	if !strings.HasPrefix(la["lib-name"], "go-redis") || la["lib-ver"] == "" {
		t.Errorf("lib-name %q lib-ver %q: go-redis sets them with CLIENT SETINFO", la["lib-name"], la["lib-ver"])
	}
	if fd, err := strconv.Atoi(la["fd"]); err != nil || fd < 0 {
		t.Errorf("fd %q", la["fd"])
	}
	// CLIENT INFO is this client's line.
	info, err := b.ClientInfo(ctx).Result()
	if err != nil || info.ID != idB || info.LibName == "" {
		t.Errorf("CLIENT INFO: %+v, %v", info, err)
	}
	raw, _ := b.Do(ctx, "CLIENT", "INFO").Text()
	if m := parseClientLine(t, strings.TrimSuffix(raw, "\n")); m["cmd"] != "client|info" || m["id"] != lb["id"] {
		t.Errorf("CLIENT INFO: %q", raw)
	}
	// The filters.
	one, _ := a.Do(ctx, "CLIENT", "LIST", "ID", strconv.FormatInt(idB, 10), "99999").Text()
	if got := parseClientLine(t, strings.TrimSuffix(one, "\n")); got["id"] != lb["id"] {
		t.Errorf("CLIENT LIST ID %d: %q", idB, one)
	}
	if err := a.Do(ctx, "CLIENT", "TRACKING", "ON").Err(); err != nil {
		t.Fatal(err)
	}
	pubsub, _ := b.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
	normal, _ := b.Do(ctx, "CLIENT", "LIST", "TYPE", "NORMAL").Text()
	if m := parseClientLine(t, strings.TrimSuffix(pubsub, "\n")); m["id"] != la["id"] || m["flags"] != "t" {
		t.Errorf("TYPE pubsub: %q", pubsub)
	}
	if m := parseClientLine(t, strings.TrimSuffix(normal, "\n")); m["id"] != lb["id"] {
		t.Errorf("TYPE normal: %q", normal)
	}
	if s, _ := b.Do(ctx, "CLIENT", "LIST", "TYPE", "master").Text(); s != "" {
		t.Errorf("TYPE master: %q, want nothing", s)
	}
}

// TestClientInfoInMulti: CLIENT LIST shows a transaction being queued
// (flags x, multi counting the queued commands) from another connection.
func TestClientInfoInMulti(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.Dial(t)
	c.Do(t, "MULTI")
	c.Do(t, "PING")
	c.Do(t, "TB.PEEK", "k", "1", "1")
	list, err := ts.Client(t).ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	m := parseClientLine(t, strings.Split(list, "\n")[0])
	if m["flags"] != "x" || m["multi"] != "2" || m["cmd"] != "tb.peek" {
		t.Errorf("a client in MULTI: %q", list)
	}
}

// TestClientKill kills with each form: the old addr form, ID, ADDR,
// LADDR, USER, TYPE and SKIPME, and checks the replies and that exactly
// the clients named lose their connection.
func TestClientKill(t *testing.T) {
	ts := startServer(t, nil)
	ctx := context.Background()
	admin := ts.Client(t)
	dial := func() (*testkit.Conn, string) {
		c := ts.Dial(t)
		c.Do(t, "PING")
		return c, c.LocalAddr().String()
	}
	idOf := func(c *testkit.Conn) string { return strings.Trim(c.Do(t, "CLIENT", "ID"), ":\r\n") }
	expect := func(what string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}

	v, addr := dial()
	expect("old form", admin.Do(ctx, "CLIENT", "KILL", addr).Val(), "OK")
	v.ExpectClosed(t)
	expect("old form, gone", admin.Do(ctx, "CLIENT", "KILL", addr).Err().Error(), "ERR No such client")

	v, _ = dial()
	expect("ID", admin.Do(ctx, "CLIENT", "KILL", "ID", idOf(v)).Val(), int64(1))
	v.ExpectClosed(t)
	expect("ID again", admin.Do(ctx, "CLIENT", "KILL", "ID", "99999").Val(), int64(0))

	v, addr = dial()
	expect("ADDR", admin.Do(ctx, "CLIENT", "KILL", "ADDR", addr).Val(), int64(1))
	v.ExpectClosed(t)

	v1, _ := dial()
	v2, _ := dial()
	expect("USER default, SKIPME yes", admin.Do(ctx, "CLIENT", "KILL", "USER", "default", "SKIPME", "yes").Val(), int64(2))
	v1.ExpectClosed(t)
	v2.ExpectClosed(t)
	expect("the caller survives SKIPME yes", admin.Ping(ctx).Val(), "PONG")
	expect("USER nobody", admin.Do(ctx, "CLIENT", "KILL", "USER", "nobody").Err().Error(), "ERR No such user 'nobody'")

	v1, _ = dial()
	v1.Do(t, "CLIENT", "TRACKING", "ON")
	v2, _ = dial()
	expect("TYPE pubsub", admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Val(), int64(1))
	v1.ExpectClosed(t)
	expect("LADDR", admin.Do(ctx, "CLIENT", "KILL", "LADDR", ts.Addr).Val(), int64(1))
	v2.ExpectClosed(t)
	expect("LADDR elsewhere", admin.Do(ctx, "CLIENT", "KILL", "LADDR", "127.0.0.1:1").Val(), int64(0))

	// SKIPME no kills the caller too: the rest of its batch is answered,
	// then its connection closes.
	self := ts.Dial(t)
	id := idOf(self)
	self.Send(t, testkit.Command("CLIENT", "KILL", "ID", id, "SKIPME", "no")+testkit.Command("PING")+testkit.Command("TB.ACQUIRE", "k", "1", "1"))
	expect("SKIPME no", self.Reply(t), ":1\r\n")
	expect("the batch's PING", self.Reply(t), "+PONG\r\n")
	expect("the batch's TB.ACQUIRE", self.Reply(t), ":1\r\n")
	self.ExpectClosed(t)
	expect("SKIPME maybe", admin.Do(ctx, "CLIENT", "KILL", "SKIPME", "maybe").Err().Error(), "ERR syntax error")
	expect("ID 0", admin.Do(ctx, "CLIENT", "KILL", "ID", "0").Err().Error(), "ERR client-id should be greater than 0")
}

// TestCommandStats: calls, rejected and failed calls are counted per
// command and subcommand, as Redis names them, a pipeline's bucket
// commands each; latencystats has a line for each command called.
func TestCommandStats(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.Dial(t)
	var pipe string
	for range 16 {
		pipe += testkit.Command("TB.ACQUIRE", "k", "100", "1")
	}
	c.Send(t, pipe)
	for range 16 {
		c.Reply(t)
	}
	c.Do(t, "TB.ACQUIRE", "k", "nan", "1") // failed
	c.Do(t, "TB.ACQUIRE", "k")             // rejected: arity
	c.Do(t, "CLIENT", "LIST")
	c.Do(t, "CLIENT", "LIST", "BAD") // failed
	c.Do(t, "CLIENT", "NOSUCH")      // unknown: not counted
	info := c.Do(t, "INFO", "commandstats")
	for _, want := range []string{
		`cmdstat_tb.acquire:calls=17,usec=\d+,usec_per_call=\d+\.\d\d,rejected_calls=1,failed_calls=1`,
		`cmdstat_client\|list:calls=2,usec=\d+,usec_per_call=\d+\.\d\d,rejected_calls=0,failed_calls=1`,
	} {
		if !regexp.MustCompile(`(?m)^` + want + "\r$").MatchString(info) {
			t.Errorf("INFO commandstats lacks %s:\n%s", want, info)
		}
	}
	if strings.Contains(info, "nosuch") || strings.Contains(info, "cmdstat_client:") {
		t.Errorf("an unknown subcommand, or the container, counted:\n%s", info)
	}
	lat := c.Do(t, "INFO", "latencystats")
	if !regexp.MustCompile(`(?m)^latency_percentiles_usec_tb\.acquire:p50=\d+\.\d{3},p99=\d+\.\d{3},p99\.9=\d+\.\d{3}\r$`).MatchString(lat) {
		t.Errorf("INFO latencystats:\n%s", lat)
	}
	if all := c.Do(t, "INFO"); strings.Contains(all, "Commandstats") || strings.Contains(all, "Latencystats") {
		t.Errorf("INFO with no section shows commandstats or latencystats, which Redis leaves to INFO all")
	}
	if all := c.Do(t, "INFO", "everything"); !strings.Contains(all, "# Commandstats") || !strings.Contains(all, "# Latencystats") {
		t.Errorf("INFO everything lacks commandstats or latencystats")
	}
}

// TestTime: TIME is the server's Unix time, seconds and microseconds.
func TestTime(t *testing.T) {
	ts := startServer(t, nil)
	before := time.Now()
	got, err := ts.Client(t).Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got.Before(before.Truncate(time.Microsecond)) || got.After(time.Now()) {
		t.Errorf("TIME %v, not between %v and now", got, before)
	}
}
