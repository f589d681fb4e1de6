package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/resp/command"
	"github.com/bucketd/bucketd/internal/testkit/testserver"
)

// runIsolated runs ops in one RunIsolated of a new Caller of s and
// returns copies of the answers, or the error.
func runIsolated(s *Store, ops ...decide.Request) ([]decide.Answer, error) {
	c := s.NewCaller()
	for _, op := range ops {
		c.Add(op)
	}
	rs, err := c.RunIsolated()
	return append([]decide.Answer(nil), rs...), err
}

// monitor records every command a Redis server runs (MONITOR) until the
// returned stop is called, which returns them, one line each ("multi",
// "evalsha ...", "exec"). MONITOR answers +OK once it is on.
func monitor(t *testing.T, addr string) (stop func() []string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() }) //nolint:errcheck // test cleanup
	r := bufio.NewReader(conn)
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if l, err := r.ReadString('\n'); err != nil || l != "+OK\r\n" {
		t.Fatalf("MONITOR: %q, %v", l, err)
	}
	return func() []string {
		t.Helper()
		probe := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
		defer probe.Close() //nolint:errcheck // test cleanup
		if err := probe.Echo(context.Background(), "end-of-monitor").Err(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("MONITOR: %v", err)
			}
			if strings.Contains(l, "end-of-monitor") {
				return got
			}
			if i := strings.Index(l, `] "`); i >= 0 {
				got = append(got, strings.ReplaceAll(strings.TrimSpace(l[i+2:]), `"`, ""))
			}
		}
	}
}

// words returns the first word of each command line that is part of a
// transaction or a bucket operation (a new connection's HELLO and CLIENT
// SETINFO may show up too).
func words(lines []string) string {
	var w []string
	for _, l := range lines {
		switch f := strings.Fields(l)[0]; f {
		case "multi", "exec", "evalsha", "eval", "del":
			w = append(w, f)
		}
	}
	return strings.Join(w, " ")
}

// TestRunIsolatedStandalone: a transaction's operations reach Redis as one
// MULTI ... EXEC, with the script batch in it, and are answered as Run
// answers them; a missing script is sent within the transaction (the
// transaction is sent again when nothing of it ran, or carries the script
// from the start when it has a TB.RESET), so it still runs as one.
func TestRunIsolatedStandalone(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(storeOptions())
	s := startStore(t, rdb, Config{Prefix: "tb:", Timeout: exactTimeout})
	loadScript(t, s)
	l := bucket.Limit{Capacity: 3, Rate: 0.001}

	stop := monitor(t, srv.Addr)
	rs, err := runIsolated(s, acquireOp("a", l, 1), acquireOp("b", l, 2), peekOp("a", l, 1),
		decide.Request{Kind: decide.Throttle, Key: []byte("t")}, acquireOp("a", l, 3))
	if err != nil {
		t.Fatal(err)
	}
	if got := words(stop()); got != "multi evalsha exec" {
		t.Fatalf("Redis ran %q, want one transaction with one script batch", got)
	}
	want := []bucket.Decision{
		{Allowed: true, Remaining: 2, ResetAfterMs: 1000000},
		{Allowed: true, Remaining: 1, ResetAfterMs: 2000000},
		{Allowed: true, Remaining: 1, ResetAfterMs: 2000000},
		{},
		{Allowed: false, Remaining: 2, RetryAfterMs: 1000000, ResetAfterMs: 1000000},
	}
	for i, r := range rs {
		if i == 3 {
			if !errors.Is(r.Err, decide.ErrUnsupported) {
				t.Fatalf("CL.THROTTLE: %+v, want ErrUnsupported", r)
			}
			continue
		}
		if r.Err != nil || !sameDecision(r.Decision, want[i]) {
			t.Fatalf("op %d: %+v, want %+v", i, r, want[i])
		}
	}

	// NOSCRIPT without a reset: nothing ran, so the whole transaction is
	// sent again with the script.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	loads := s.ScriptLoads()
	stop = monitor(t, srv.Addr)
	rs, err = runIsolated(s, acquireOp("c", l, 1), acquireOp("c", l, 1))
	if err != nil || rs[0].Decision.Remaining != 2 || rs[1].Decision.Remaining != 1 {
		t.Fatalf("after SCRIPT FLUSH: %+v, %v", rs, err)
	}
	if got := words(stop()); got != "multi evalsha exec multi eval exec" || s.ScriptLoads()-loads != 1 {
		t.Fatalf("Redis ran %q, %d script loads; want the transaction again with EVAL, once", got, s.ScriptLoads()-loads)
	}

	// With a reset the DEL would run without the script: the script goes
	// in the transaction from the start.
	stop = monitor(t, srv.Addr)
	rs, err = runIsolated(s, resetOp("c"), acquireOp("c", l, 1), resetOp("nosuch"))
	if err != nil || !rs[0].Removed || rs[1].Decision.Remaining != 2 || rs[2].Removed {
		t.Fatalf("with resets: %+v, %v", rs, err)
	}
	if got := words(stop()); got != "multi del eval del exec" {
		t.Fatalf("Redis ran %q, want one transaction carrying the script", got)
	}
	if s.Errors() != 0 || s.Degraded() != 0 {
		t.Fatalf("errors %d, degraded %d", s.Errors(), s.Degraded())
	}

	s.Close()
	if _, err := runIsolated(s, acquireOp("a", l, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}

// sameDecision compares decisions, allowing the milliseconds to have run
// down by up to a second (Redis TIME moves between calls).
func sameDecision(got, want bucket.Decision) bool {
	near := func(g, w int64) bool { return g <= w && g > w-1000 || g == w }
	return got.Allowed == want.Allowed && got.Remaining == want.Remaining &&
		near(got.RetryAfterMs, want.RetryAfterMs) && near(got.ResetAfterMs, want.ResetAfterMs)
}

// TestRunIsolatedIsIsolated: transactions of several stores (several
// bucketd instances) that take one token from each of eight buckets, and
// transactions that peek at all eight, interleave on Redis only as whole
// transactions: no reader sees the buckets at different counts. A reset in
// the middle makes each of them two script commands and a DEL. (Redis
// runs a pipeline that arrives in one read without interleaving in
// practice, so this test passes with Run too; what shows the transaction
// is MULTI ... EXEC on the wire, in TestRunIsolatedStandalone.)
func TestRunIsolatedIsIsolated(t *testing.T) {
	srv := redistest.Start(t)
	var stores []*Store
	for range 2 {
		s := startStore(t, srv.Client(storeOptions()), Config{Prefix: "tb:", Timeout: exactTimeout})
		loadScript(t, s)
		stores = append(stores, s)
	}
	l := bucket.Limit{Capacity: 1e9, Rate: 1e-9}
	const rounds = 60
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%2]
			for r := range rounds {
				var ops []decide.Request
				for i := range 8 {
					k := fmt.Sprint("iso-", (i+r)%8)
					if g < 4 {
						ops = append(ops, acquireOp(k, l, 1))
					} else {
						ops = append(ops, peekOp(k, l, 0))
					}
					if i == 3 { // a reset splits the script batch: two script commands
						ops = append(ops, resetOp("other"))
					}
				}
				rs, err := runIsolated(s, ops...)
				for i, a := range rs {
					if err == nil && i != 4 && (a.Err != nil || a.Decision.Remaining != rs[0].Decision.Remaining) {
						err = fmt.Errorf("a transaction saw %+v", rs)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestRunIsolatedTimesOut: with Redis paused, a transaction is answered by
// the policy within the bound, as Run is.
func TestRunIsolatedTimesOut(t *testing.T) {
	srv := redistest.Start(t)
	s := startStore(t, srv.Client(storeOptions()), Config{Prefix: "tb:", Timeout: 50 * time.Millisecond})
	loadScript(t, s)
	srv.Pause()
	defer srv.Resume()
	l := bucket.Limit{Capacity: 1, Rate: 1}
	start := time.Now()
	rs, err := runIsolated(s, acquireOp("a", l, 1), resetOp("b"))
	took := time.Since(start)
	if err != nil || rs[0].Decision != FailClosedDecision(s.cfg.Timeout) || !errors.Is(rs[1].Err, decide.ErrNotApplied) {
		t.Fatalf("paused: %+v, %v", rs, err)
	}
	// Real time is the point here; a loaded machine may add its stall.
	if took > 20*failureBound(s.cfg.Timeout) {
		t.Fatalf("answered after %v", took)
	}
	if s.Degraded() != 1 || s.Errors() < 2 {
		t.Fatalf("degraded %d, errors %d", s.Degraded(), s.Errors())
	}
}

// TestRunIsolatedCluster: on a three-master Redis Cluster a transaction
// whose keys share a {hash tag} runs as one MULTI/EXEC on their master; one
// whose keys are in different slots is refused with decide.ErrCrossSlot
// and nothing runs, and through bucketd's protocol front EXEC answers
// Redis Cluster's CROSSSLOT error, as a cluster does.
func TestRunIsolatedCluster(t *testing.T) {
	t.Parallel() // a Redis Cluster of its own, which takes 2 s to form
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(clusterOptions())
	s := startStore(t, cc, Config{Prefix: "tb:", Timeout: exactTimeout})
	l := bucket.Limit{Capacity: 3, Rate: 0.001}

	// The script is not loaded: the master answers NOSCRIPT once.
	rs, err := runIsolated(s, acquireOp("{u1}:a", l, 1), acquireOp("{u1}:b", l, 2), peekOp("{u1}:a", l, 2), resetOp("{u1}:c"))
	if err != nil || rs[0].Decision.Remaining != 2 || rs[1].Decision.Remaining != 1 || rs[2].Decision.Remaining != 0 || rs[3].Removed {
		t.Fatalf("one slot: %+v, %v", rs, err)
	}
	if s.Errors() != 0 || s.Degraded() != 0 {
		t.Fatalf("errors %d, degraded %d", s.Errors(), s.Degraded())
	}

	_, err = runIsolated(s, acquireOp("{u1}:a", l, 1), acquireOp("{u2}:a", l, 1))
	if !errors.Is(err, decide.ErrCrossSlot) {
		t.Fatalf("two slots: %v, want ErrCrossSlot", err)
	}
	for _, k := range []string{"tb:{u2}:a"} {
		if n, err := cc.Exists(ctx, k).Result(); err != nil || n != 0 {
			t.Fatalf("%s exists (%d, %v): a refused transaction ran", k, n, err)
		}
	}
	if d := run1(t, s, peekOp("{u1}:a", l, 0)).Decision; d.Remaining != 2 {
		t.Fatalf("{u1}:a after the refused transaction: %+v, want 2 left", d)
	}

	c := testserver.Serve(t, command.Config{Limiter: s}, resp.Config{}).Client(t)
	_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "TB.ACQUIRE", "{u1}:a", 3, 0.001)
		p.Do(ctx, "TB.ACQUIRE", "{u2}:a", 3, 0.001)
		return nil
	})
	if err == nil || err.Error() != "CROSSSLOT Keys in request don't hash to the same slot" {
		t.Fatalf("EXEC across slots: %v, want CROSSSLOT", err)
	}
	got, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "TB.ACQUIRE", "{u1}:a", 3, 0.001)
		p.Do(ctx, "TB.ACQUIRE", "{u1}:b", 3, 0.001, 2)
		return nil
	})
	if err != nil || got[0].(*redis.Cmd).Val() != int64(1) || got[1].(*redis.Cmd).Val() != int64(0) {
		t.Fatalf("EXEC in one slot: %v, %v", got, err)
	}
}

// TestServerTransactionStore: go-redis's TxPipelined against bucketd in
// store mode on a standalone Redis spends each token once.
func TestServerTransactionStore(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	s := startStore(t, srv.Client(storeOptions()), Config{Prefix: "tb:", Timeout: exactTimeout})
	c := serveStore(t, s)
	got, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for range 3 {
			p.Do(ctx, "TB.ACQUIRE", "k", 2, 0.001)
		}
		p.Do(ctx, "TB.PEEK", "k", 2, 0.001)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var replies []string
	for _, cmd := range got {
		replies = append(replies, fmt.Sprint(cmd.(*redis.Cmd).Val()))
	}
	if r := strings.Join(replies, " "); !sameReply(r, "1 1 0 [0 0 1000000 2000000]") {
		t.Fatalf("TxPipelined: %s", r)
	}
	if r := reply(t, c, "TB.ACQUIRE", "k", 2, 0.001); r != "0" {
		t.Fatalf("after the transaction: %s, want 0", r)
	}
}
