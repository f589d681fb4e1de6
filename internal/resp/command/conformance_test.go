package command_test

import (
	"bufio"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/bucketd/bucketd/internal/resp/command"
	"github.com/bucketd/bucketd/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the current replies")

// conformanceCommands is every command and subcommand bucketd answers, with
// its error forms, in an order whose replies are deterministic on a fresh
// server with a fake clock. They run after HELLO 2 or HELLO 3, each group of
// commands in one write (CLIENT CACHING applies to the next command only).
// conformancePolicies are the policies of the conformance server: one of
// one limit, one of two, a shadow one.
const conformancePolicies = "policies:\n  api: {capacity: 5, rate: 1, prefix: \"api:\"}\n" +
	"  llm:\n    limits: [{capacity: 2, rate: 1/second}, {capacity: 3, rate: 3/minute}]\n" +
	"  trial: {capacity: 1, rate: 1, shadow: true}\n"

var conformanceCommands = [][][]string{
	{{"TB.ACQUIRE", "k", "10", "1"}},
	{{"TB.ACQUIRE", "k", "10", "1", "2", "WITHINFO"}},
	{{"TB.ACQUIRE", "k", "10", "1", "20", "WITHINFO"}},
	{{"TB.ACQUIRE", "p", "POLICY", "api"}},
	{{"TB.ACQUIRE", "p", "POLICY", "api", "1", "WITHINFO"}},
	{{"TB.PEEK", "k", "10", "1"}},
	{{"TB.PEEK", "k", "10", "1", "3"}},
	{{"TB.RESET", "k", "nosuch"}},
	{{"CL.THROTTLE", "t", "1", "2", "60"}},
	{{"CL.THROTTLE", "t", "1", "2", "60", "1"}},
	{{"TB.ACQUIRE", "k", "nan", "1"}},
	{{"TB.ACQUIRE", "k", "10"}},
	{{"TB.ACQUIRE", "k", "POLICY", "nosuch"}},
	{{"TB.MACQUIRE", "2", "m1", "10", "1", "m2", "5", "1"}},
	{{"TB.MACQUIRE", "2", "m1", "10", "1", "m2", "5", "1", "COST", "5", "WITHINFO"}},
	{{"tb.macquire", "1", "m1", "10", "1", "withinfo", "cost", "2"}},
	{{"TB.MACQUIRE", "2", "u", "POLICY", "llm", "m3", "10", "1", "WITHINFO"}},
	{{"TB.MACQUIRE", "2", "s", "POLICY", "trial", "m3", "10", "1", "COST", "2", "WITHINFO"}},
	{{"TB.MACQUIRE", "1", "m4", "10", "1", "COST", "0", "WITHINFO"}},
	{{"TB.ACQUIRE", "u", "POLICY", "llm", "WITHINFO"}},
	{{"TB.ACQUIRE", "u", "POLICY", "llm"}},
	{{"TB.PEEK", "u", "POLICY", "llm"}},
	{{"TB.ACQUIRE", "s", "POLICY", "trial", "1", "WITHINFO"}},
	{{"TB.ACQUIRE", "s", "POLICY", "trial"}},
	{{"TB.PEEK", "s", "POLICY", "trial"}},
	{{"TB.MACQUIRE", "0", "k", "10", "1"}},
	{{"TB.MACQUIRE", "x", "k", "10", "1"}},
	{{"TB.MACQUIRE", "2", "k", "10", "1"}},
	{{"TB.MACQUIRE", "2", "k", "10", "1", "k", "10", "1"}},
	{{"TB.MACQUIRE", "2", "k", "10", "1", "j", "nan", "1"}},
	{{"TB.MACQUIRE", "2", "k", "10", "1", "j", "POLICY", "nosuch"}},
	{{"TB.MACQUIRE", "1", "k", "10", "1", "COST"}},
	{{"TB.MACQUIRE", "1", "k", "10", "1", "COST", "-1"}},
	{{"TB.MACQUIRE", "1", "k", "10", "1", "WITHINFO", "WITHINFO"}},
	{{"TB.MACQUIRE", "1", "k", "10"}},
	{{"PING"}},
	{{"PING", "hello"}},
	{{"ECHO", "x y"}},
	{{"SELECT", "0"}},
	{{"SELECT", "1"}},
	{{"HELLO"}},
	{{"HELLO", "4"}},
	{{"HELLO", "x"}},
	{{"HELLO", "3", "FOO"}},
	{{"CLIENT", "ID"}},
	{{"CLIENT", "GETNAME"}},
	{{"CLIENT", "SETNAME", "worker-1"}},
	{{"CLIENT", "GETNAME"}},
	{{"CLIENT", "SETINFO", "LIB-NAME", "x"}},
	{{"CLIENT", "SETINFO", "LIB-VER", "1.0"}},
	{{"CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", "internal-ip"}},
	{{"CLIENT", "NO-EVICT", "ON"}},
	{{"CLIENT", "NO-TOUCH", "ON"}},
	{{"CLIENT", "GETREDIR"}},
	{{"CLIENT", "TRACKINGINFO"}},
	{{"CLIENT", "CACHING", "YES"}},
	{{"CLIENT", "TRACKING", "ON", "OPTIN"}},
	{{"CLIENT", "CACHING", "YES"}, {"CLIENT", "TRACKINGINFO"}, {"TB.PEEK", "k", "10", "1"}}, // the TB.PEEK is tracked
	{{"CLIENT", "TRACKING", "OFF"}},
	{{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a", "PREFIX", "b", "NOLOOP"}},
	{{"CLIENT", "TRACKINGINFO"}},
	{{"TB.ACQUIRE", "ab", "10", "1"}}, // under prefix a: invalidated in RESP3
	{{"CLIENT", "TRACKING", "OFF"}},
	{{"CLIENT", "FLY"}},
	{{"CLIENT", "INFO"}},
	{{"CLIENT", "LIST", "TYPE", "pubsub"}},
	{{"CLIENT", "LIST", "TYPE", "bad"}},
	{{"CLIENT", "LIST", "ID", "0"}},
	{{"CLIENT", "LIST", "ID", "999999"}},
	{{"CLIENT", "LIST", "NOSUCH"}},
	{{"CLIENT", "KILL", "192.0.2.1:1"}},
	{{"CLIENT", "KILL", "ID", "999999"}},
	{{"CLIENT", "KILL", "ID", "0"}},
	{{"CLIENT", "KILL", "SKIPME", "maybe"}},
	{{"CLIENT", "KILL", "USER", "nobody"}},
	{{"CLIENT", "KILL", "ADDR"}},
	{{"CLIENT", "HELP"}},
	{{"SLOWLOG", "HELP"}},
	{{"SLOWLOG", "RESET"}},
	{{"SLOWLOG", "LEN"}},
	{{"SLOWLOG", "GET"}},
	{{"SLOWLOG", "GET", "-2"}},
	{{"SLOWLOG", "GET", "x"}},
	{{"TIME"}},
	{{"INFO", "commandstats"}},
	{{"INFO", "latencystats"}},
	{{"CONFIG", "HELP"}},
	{{"COMMAND", "HELP"}},
	{{"COMMAND", "COUNT"}},
	{{"COMMAND", "LIST"}},
	{{"COMMAND", "INFO", "tb.acquire", "nosuch"}},
	{{"COMMAND", "DOCS"}},
	{{"COMMAND", "DOCS", "tb.acquire"}},
	{{"COMMAND"}},
	{{"INFO"}},
	{{"INFO", "server"}},
	{{"INFO", "replication"}},
	{{"INFO", "nosuch"}},
	{{"DBSIZE"}},
	{{"CONFIG", "GET", "save", "appendonly"}},
	{{"CONFIG", "GET", "*"}},
	{{"CONFIG", "GET", "nosuch"}},
	{{"CONFIG", "RELOAD"}},
	{{"AUTH", "secret"}},
	{{"AUTH", "default", "anything"}},
	{{"EXEC"}},
	{{"DISCARD"}},
	{{"EXEC", "x"}},
	{{"WATCH", "k"}},
	{{"UNWATCH"}},
	{{"MULTI"}, {"EXEC"}},
	{{"MULTI"}, {"TB.ACQUIRE", "k", "10", "1"}, {"DISCARD"}},
	{{"MULTI"}, {"TB.MACQUIRE", "2", "ta", "10", "1", "tb", "10", "1", "WITHINFO"}, {"TB.ACQUIRE", "ta", "10", "1", "1", "WITHINFO"}, {"EXEC"}},
	{{"MULTI"}, {"TB.ACQUIRE", "k", "10", "1", "1", "WITHINFO"}, {"TB.ACQUIRE", "k", "nan", "1"}, {"PING"},
		{"TB.PEEK", "k", "10", "1"}, {"CL.THROTTLE", "t", "1", "2", "60"}, {"TB.RESET", "nosuch"}, {"CONFIG", "GET", "save"},
		{"INFO", "nosuch"}, {"COMMAND", "INFO", "nosuch"}, {"UNWATCH"}, {"EXEC"}},
	{{"MULTI"}, {"MULTI"}, {"WATCH", "k"}, {"PING"}, {"EXEC"}}, // neither error discards the transaction
	{{"MULTI"}, {"FOO"}, {"TB.ACQUIRE", "k", "10"}, {"CLIENT", "NOSUCH"}, {"TB.ACQUIRE", "k", "10", "1"}, {"EXEC"}},
	{{"TB.PEEK", "k", "10", "1"}}, // the discarded transaction took nothing
	{{"MULTI"}, {"EXEC", "x"}},
	{{"EXEC"}},
	{{"CLIENT", "TRACKING", "ON"}},
	{{"MULTI"}, {"TB.ACQUIRE", "a", "10", "1"}, {"TB.PEEK", "b", "10", "1"}, {"PING"}, {"EXEC"}}, // invalidations after the array
	{{"CLIENT", "TRACKING", "OFF"}},
	{{"CLIENT", "TRACKING", "ON", "OPTIN"}},
	{{"CLIENT", "CACHING", "YES"}, {"MULTI"}, {"PTTL", "k"}, {"TB.PEEK", "k", "10", "1"}, {"EXEC"}}, // rueidis's DoCache
	{{"CLIENT", "CACHING", "YES"}, {"MULTI"}, {"TB.PEEK", "k", "10", "1"}, {"EXEC"}},
	{{"CLIENT", "TRACKING", "OFF"}},
	{{"FOO", "a", "b"}},
	{{"QUIT"}},
}

// endMarker follows each command in the same write; everything before its
// reply (the command's reply and any push) belongs to the command.
const endMarker = "end-of-replies"

// TestRESP3Conformance runs every command and subcommand on a RESP2 and on a
// RESP3 connection and compares the raw reply bytes with
// testdata/replies-resp{2,3}.golden (go test ./internal/resp -run
// Conformance -update rewrites them). Each reply is shown as its CRLF-ended
// lines, each quoted as a Go string, so the files read as the wire does and
// the comparison is byte for byte.
//
// What depends on the run is masked, and only that: the connection id
// (HELLO's id, CLIENT ID) becomes <id>; in INFO the values of the fields
// listed in volatileInfoFields (uptime, memory, process id, address,
// machine and build) become <masked>, and INFO's length header becomes
// <len>, since it counts them. Bucket replies need no mask: the server's
// clock is a fake that stands still.
func TestRESP3Conformance(t *testing.T) {
	for _, proto := range []string{"2", "3"} {
		t.Run("RESP"+proto, func(t *testing.T) {
			got := conformanceReplies(t, proto)
			path := filepath.Join("testdata", "replies-resp"+proto+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("replies differ from %s (run with -update after checking the change):\n%s", path, firstDiff(got, string(want)))
			}
		})
	}
}

// conformanceReplies runs HELLO proto and then conformanceCommands on a
// fresh server and returns the golden text of their replies.
func conformanceReplies(t *testing.T, proto string) string {
	ts := startServer(t, nil)
	ts.Commands.SetPolicies(loadPolicies(t, conformancePolicies))
	ts.Commands.SetSlowlog(-1, command.DefaultSlowlogMaxLen) // a command slow on a busy machine would change SLOWLOG LEN
	c := dial3(t, ts.Addr)
	var b strings.Builder
	b.WriteString("# Replies of every command in RESP" + proto + ", masked as TestRESP3Conformance says.\n")
	for _, group := range append([][][]string{{{"HELLO", proto}}}, conformanceCommands...) {
		var raw string
		for _, args := range group {
			b.WriteString("\n> " + showArgs(args))
			raw += testkit.Command(args...)
		}
		b.WriteString("\n")
		if group[0][0] == "QUIT" {
			c.Send(t, raw)
			b.WriteString(quoteLines(c.reply(t)))
			c.ExpectClosedRESP3(t)
			break
		}
		c.Send(t, raw+testkit.Command("PING", endMarker))
		for {
			r := c.reply(t)
			if r == "$"+strconv.Itoa(len(endMarker))+"\r\n"+endMarker+"\r\n" {
				break
			}
			b.WriteString(quoteLines(mask(group, r)))
		}
	}
	return b.String()
}

// showArgs writes a command as typed into redis-cli: arguments with blanks
// quoted.
func showArgs(args []string) string {
	shown := make([]string, len(args))
	for i, a := range args {
		shown[i] = a
		if a == "" || strings.ContainsAny(a, " \t\r\n\"") {
			shown[i] = strconv.Quote(a)
		}
	}
	return strings.Join(shown, " ")
}

// ExpectClosedRESP3 fails unless the server has closed the connection with
// nothing more to read.
func (c *conn3) ExpectClosedRESP3(t *testing.T) {
	t.Helper()
	if extra, err := c.r.ReadString('\n'); err == nil || extra != "" {
		t.Fatalf("connection still open, read %q, %v", extra, err)
	}
}

// volatileInfoFields are the INFO fields whose values depend on the run,
// the machine or the build.
var volatileInfoFields = regexp.MustCompile(`(?m)^(os|arch_bits|go_version|process_id|tcp_addr|uptime_in_seconds|uptime_in_days|gomaxprocs|used_memory|used_memory_heap|used_memory_tables|used_memory_sys):[^\r]*\r$`)

// volatileClientFields are the CLIENT INFO fields whose values depend on
// the run.
var volatileClientFields = regexp.MustCompile(`\b(id|addr|laddr|fd|age|idle)=[^ \n]*`)

// timeBulk is one of TIME's two numbers.
var timeBulk = regexp.MustCompile(`\$[0-9]+\r\n[0-9]+\r\n`)

// volatileStats are the times in INFO commandstats and latencystats.
var volatileStats = regexp.MustCompile(`\b(usec|usec_per_call|p50|p99|p99\.9)=[0-9.]+`)

// infoHeader is the length line of an INFO reply: a bulk or verbatim string.
var infoHeader = regexp.MustCompile(`^([$=])[0-9]+\r\n`)

// mask hides what depends on the run in a reply to the commands of group
// (see TestRESP3Conformance); INFO and CLIENT ID are sent alone.
func mask(group [][]string, reply string) string {
	args := group[0]
	switch {
	case len(group) > 1:
	case strings.EqualFold(args[0], "INFO"):
		reply = volatileInfoFields.ReplaceAllString(reply, "$1:<masked>\r")
		reply = volatileStats.ReplaceAllString(reply, "$1=<masked>")
		return infoHeader.ReplaceAllString(reply, "$1<len>\r\n")
	case len(args) == 2 && strings.EqualFold(args[0], "CLIENT") && strings.EqualFold(args[1], "ID"):
		return ":<id>\r\n"
	case len(args) == 2 && strings.EqualFold(args[0], "CLIENT") && strings.EqualFold(args[1], "INFO"):
		reply = volatileClientFields.ReplaceAllString(reply, "$1=<masked>")
		return infoHeader.ReplaceAllString(reply, "$1<len>\r\n")
	case strings.EqualFold(args[0], "TIME"):
		return timeBulk.ReplaceAllString(reply, "$$<len>\r\n<masked>\r\n")
	}
	return maskID(reply)
}

// quoteLines shows a reply as its CRLF-ended lines, one quoted per line.
func quoteLines(reply string) string {
	var b strings.Builder
	for len(reply) > 0 {
		i := strings.Index(reply, "\r\n")
		if i < 0 { // not CRLF-ended: shown as it is, and differs from any golden
			b.WriteString("  " + strconv.Quote(reply) + "\n")
			break
		}
		b.WriteString("  " + strconv.Quote(reply[:i+2]) + "\n")
		reply = reply[i+2:]
	}
	return b.String()
}

// firstDiff shows the first line where got and want differ, with context.
func firstDiff(got, want string) string {
	g, w := bufio.NewScanner(strings.NewReader(got)), bufio.NewScanner(strings.NewReader(want))
	var last string
	for line := 1; ; line++ {
		gok, wok := g.Scan(), w.Scan()
		if !gok && !wok {
			return "(no difference found line by line)"
		}
		if g.Text() != w.Text() || gok != wok {
			return "line " + strconv.Itoa(line) + ", after " + strconv.Quote(last) + ":\n got  " + g.Text() + "\n want " + w.Text()
		}
		last = g.Text()
	}
}
