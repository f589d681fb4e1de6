package command

import (
	"github.com/bucketd/bucketd/internal/policy"

	"bytes"
	"testing"

	"github.com/bucketd/bucketd/internal/resp/wire"
)

// fuzzPolicies are the policies of the fuzzed server: one limit with a
// prefix, two limits, two limits in shadow.
var fuzzPolicies = map[string]policy.Policy{
	"api":   {Limits: []policy.Limit{{Name: "second", Capacity: 10, Rate: 1}}, Prefix: "api:"},
	"llm":   {Limits: []policy.Limit{{Name: "second", Capacity: 10, Rate: 10}, {Name: "day", Capacity: 1000, Rate: 0.01}}},
	"trial": {Limits: []policy.Limit{{Name: "second", Capacity: 1, Rate: 1}, {Name: "day", Capacity: 2, Rate: 0.01}}, Shadow: true},
}

// FuzzCommandArgs sends arbitrary argument lists through the command
// handler, in RESP2, in RESP3 and in RESP3 with tracking on: it must never
// panic, must write exactly one well-formed reply per command (followed, with
// tracking, by at most one invalidation push), and must queue bucket
// operations only for valid commands.
func FuzzCommandArgs(f *testing.F) {
	for _, s := range []string{
		"TB.ACQUIRE\x00k\x0010\x001", "tb.acquire\x00k\x0010\x001\x002\x00withinfo", "TB.PEEK\x00k\x001e3\x00.5",
		"TB.RESET\x00a\x00b\x00a", "TB.ACQUIRE\x00k\x00nan\x001", "TB.ACQUIRE\x00k\x0010\x001\x00-0",
		"PING\x00x", "CLIENT\x00SETNAME\x00a b", "HELLO\x003", "CONFIG\x00GET\x00*", "COMMAND\x00INFO\x00tb.peek",
		"INFO\x00bucketd", "SELECT\x00-1", "nosuch\x00\r\n", "ECHO", "QUIT",
		"TB.MACQUIRE\x002\x00a\x0010\x001\x00b\x005\x001\x00COST\x002\x00WITHINFO",
		"tb.macquire\x001\x00a\x00policy\x00api\x00withinfo\x00cost\x000", "TB.MACQUIRE\x0017\x00a\x001\x001",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		args := bytes.Split(raw, []byte{0})
		if len(args[0]) == 0 {
			return // redcon never hands the handler a command without arguments
		}
		for _, conn := range []struct{ resp3, tracking bool }{{false, false}, {true, false}, {true, true}} {
			srv, c := newBenchServer(t)
			srv.SetPolicies(fuzzPolicies)
			c.w.SetRESP3(conn.resp3)
			c.sess.tracking.on = conn.tracking
			srv.handle(c, wire.Command{Args: args})
			if len(c.sess.pipe.caller.(*inlineCaller).ops) != 0 {
				t.Fatalf("ops left queued after the reply")
			}
			n, ok := replyLen(c.out)
			if ok && n < len(c.out) && conn.tracking && c.out[n] == '>' { // an invalidation after the reply
				m, pushOK := replyLen(c.out[n:])
				n, ok = n+m, pushOK
			}
			if !ok || n != len(c.out) || c.out[0] == '>' {
				t.Fatalf("%q (%+v): reply %q is not exactly one RESP value (and an invalidation)", args, conn, c.out)
			}
			fuzzInTransaction(t, args, conn.resp3, conn.tracking)
		}
	})
}

// fuzzInTransaction sends args between MULTI and EXEC: the replies must be
// well-formed RESP values, no push before EXEC's reply, no operation left
// queued, and no transaction left open (unless args was QUIT, which ends
// the connection).
func fuzzInTransaction(t *testing.T, args [][]byte, resp3, tracking bool) {
	srv, c := newBenchServer(t)
	srv.SetPolicies(fuzzPolicies)
	c.w.SetRESP3(resp3)
	c.sess.tracking.on = tracking
	c.rest = []wire.Command{{Args: args}, {Args: [][]byte{[]byte("EXEC")}}}
	srv.handle(c, wire.Command{Args: [][]byte{[]byte("MULTI")}})
	if len(c.sess.pipe.caller.(*inlineCaller).ops) != 0 || c.sess.tx.open && !c.sess.quit {
		t.Fatalf("%q in a transaction: ops left queued, or the transaction left open", args)
	}
	values, pushed := 0, false
	for pos := 0; pos < len(c.out); values++ {
		n, ok := replyLen(c.out[pos:])
		if !ok || c.out[pos] == '>' && values < 3 {
			t.Fatalf("%q in a transaction: replies %q are not RESP values with pushes after EXEC's", args, c.out)
		}
		pushed = pushed || c.out[pos] == '>'
		pos += n
	}
	if values < 2 || pushed && !tracking {
		t.Fatalf("%q in a transaction: %d replies %q", args, values, c.out)
	}
}

// replyLen returns the length of the first RESP2 or RESP3 value in b.
func replyLen(b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	nl := bytes.Index(b, []byte("\r\n"))
	if nl < 1 {
		return 0, false
	}
	line := b[1:nl]
	if bytes.ContainsAny(line, "\r\n") {
		return 0, false
	}
	switch b[0] {
	case '+', '-', ':', '_', ',':
		return nl + 2, true
	case '$', '=':
		n, ok := wire.ParseInt(line)
		if !ok || n < -1 {
			return 0, false
		}
		if n == -1 {
			return nl + 2, true
		}
		end := nl + 2 + int(n) + 2
		if end > len(b) || b[end-2] != '\r' || b[end-1] != '\n' {
			return 0, false
		}
		return end, true
	case '*', '~', '%', '>':
		n, ok := wire.ParseInt(line)
		if !ok || n < -1 {
			return 0, false
		}
		if b[0] == '%' {
			n *= 2 // a map counts pairs
		}
		pos := nl + 2
		for range n {
			m, ok := replyLen(b[pos:])
			if !ok {
				return 0, false
			}
			pos += m
		}
		return pos, true
	}
	return 0, false
}
