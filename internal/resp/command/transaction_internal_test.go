package command

import (
	"bytes"
	"strings"
	"testing"

	"github.com/bucketd/bucketd/internal/resp/wire"
)

// TestTransactionAllocatesNothing: a transaction of bucket commands in one
// read (MULTI, three TB.ACQUIREs, EXEC) costs no allocation in steady
// state, in RESP2 and in RESP3 with tracking on: the queue, its arena and
// the invalidations reuse the session's buffers.
func TestTransactionAllocatesNothing(t *testing.T) {
	for _, conn := range []struct {
		name            string
		resp3, tracking bool
	}{{"RESP2", false, false}, {"RESP3 tracking", true, true}} {
		srv, c := newBenchServer(t)
		c.w.SetRESP3(conn.resp3)
		c.sess.tracking.on = conn.tracking
		rest := []wire.Command{
			command("TB.ACQUIRE", "a", "100", "10", "1"),
			command("TB.ACQUIRE", "b", "100", "10", "1", "WITHINFO"),
			command("TB.PEEK", "c", "100", "10"),
			command("PING"),
			command("EXEC"),
		}
		multi := command("MULTI")
		allocs := testing.AllocsPerRun(500, func() {
			c.out, c.rest = c.out[:0], rest
			srv.handle(c, multi)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per transaction, want 0", conn.name, allocs)
		}
		want := "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*4\r\n:"
		if !bytes.HasPrefix(c.out, []byte(want)) || bytes.Count(c.out, []byte(">2\r\n")) != map[bool]int{true: 3}[conn.tracking] {
			t.Errorf("%s: replies %q", conn.name, c.out)
		}
	}
}

// TestTransactionBeyondItsBoundKeepsNothing: once a transaction is refused
// for its size, what it had queued is freed at once, and the commands
// after it are answered +QUEUED without being kept.
func TestTransactionBeyondItsBoundKeepsNothing(t *testing.T) {
	srv, c := newBenchServerWith(t, newInlineLimiter(), wire.Limits{MaxQueryBytes: 1 << 20})
	big := strings.Repeat("x", 4096)
	var rest []wire.Command
	for range 300 { // 300 × 4 KiB > 1 MiB
		rest = append(rest, command("ECHO", big))
	}
	c.rest = rest
	srv.handle(c, command("MULTI"))
	tx := &c.sess.tx
	if !tx.open || !tx.dirty || len(tx.cmds) != 0 || cap(tx.arena) != 0 || cap(tx.ends) != 0 {
		t.Fatalf("open %v, dirty %v, %d commands and %d bytes kept", tx.open, tx.dirty, len(tx.cmds), cap(tx.arena))
	}
	if n := bytes.Count(c.out, []byte("+QUEUED\r\n")); n != 299 || !bytes.Contains(c.out, []byte("-ERR too many commands queued")) {
		t.Fatalf("%d QUEUED, replies %.200q", n, c.out)
	}
	c.out, c.rest = c.out[:0], []wire.Command{command("EXEC")}
	srv.handle(c, command("PING"))
	if string(c.out) != "+QUEUED\r\n-EXECABORT Transaction discarded because of previous errors.\r\n" || tx.open {
		t.Fatalf("then %q, open %v", c.out, tx.open)
	}
}
