package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/lease"
	"github.com/bucketd/bucketd/internal/redistest"
)

// leaseOp is a lease call on key as internal/leasestore sends it.
func leaseOp(key string, call lease.Request) (decide.Request, *decide.LeaseOp) {
	op := &decide.LeaseOp{Outcome: lease.Ask, Call: call}
	return decide.Request{Kind: decide.Lease, Key: []byte(key), Limit: call.Limit, Cost: call.Cost, Lease: op}, op
}

// record reads holder's lease record of key: epoch, held, expiry.
func record(t *testing.T, rdb redis.Cmdable, key, holder string) (epoch int64, held float64, expiry int64, ok bool) {
	t.Helper()
	v, err := rdb.HGet(context.Background(), key, "l:"+holder).Result()
	if errors.Is(err, redis.Nil) {
		return 0, 0, 0, false
	}
	f := strings.Fields(v)
	if err != nil || len(f) != 3 {
		t.Fatalf("HGET %s l:%s = %q, %v", key, holder, v, err)
	}
	epoch, _ = strconv.ParseInt(f[0], 10, 64)
	held, _ = strconv.ParseFloat(f[1], 64)
	expiry, _ = strconv.ParseInt(f[2], 10, 64)
	return epoch, held, expiry, true
}

// checkLeaseRoundTrip is a lease's life through a Store in lease mode:
// granted with the call's own cost, honoured by a plain acquire, kept by
// a reset, reported on and given back under its epoch.
func checkLeaseRoundTrip(t *testing.T, s *Store, rdb redis.Cmdable, key string) {
	t.Helper()
	l := bucket.Limit{Capacity: 10, Rate: 0.001}
	stored, holder := "tb:"+key, "i1-3"

	req, op := leaseOp(key, lease.Request{Limit: l, Cost: 1, Want: 4, Gen: 3})
	a := run1(t, s, req)
	if a.Err != nil || !op.Replied || !a.Decision.Allowed || a.Decision.Remaining != 5 {
		t.Fatalf("first lease call: answer %+v, exchange %+v; want allowed, 5 left, replied", a, op)
	}
	if op.Reply.Held != 4 || op.Reply.Epoch == 0 || op.Reply.Decision != a.Decision {
		t.Fatalf("first lease call: reply %+v, want 4 held under an epoch, the answer's decision", op.Reply)
	}
	epoch, held, expiry, ok := record(t, rdb, stored, holder)
	if !ok || epoch != op.Reply.Epoch || held != 4 || expiry-epoch != 2_000_000 {
		t.Fatalf("record %d %v %d (%v), want epoch %d, 4 held, expiry epoch + LeaseTTL (2 s)", epoch, held, expiry, ok, op.Reply.Epoch)
	}

	// The bucket holds 5 and its room is 6: the 4 leased are not its own.
	if d := run1(t, s, acquireOp(key, l, 6)).Decision; d.Allowed || d.Remaining != 5 {
		t.Fatalf("acquire 6 beside the lease: %+v, want denied with 5", d)
	}
	// A reset forgets the bucket but not the lease: the room, 6, not 10.
	if r := run1(t, s, resetOp(key)); r.Err != nil || !r.Removed {
		t.Fatalf("reset: %+v, want removed", r)
	}
	if _, _, _, ok := record(t, rdb, stored, holder); !ok {
		t.Fatal("the reset deleted the lease record")
	}
	if d := run1(t, s, acquireOp(key, l, 7)).Decision; d.Allowed || d.Remaining != 6 {
		t.Fatalf("acquire 7 after the reset: %+v, want denied with 6 (4 still leased)", d)
	}

	// The holder reports 3 spent and gives 1 back: the record goes, and
	// the bucket gets the 1.
	req, op = leaseOp(key, lease.Request{Limit: l, Epoch: epoch, Consumed: 3, Returned: 1, Gen: 3})
	if a := run1(t, s, req); a.Err != nil || !op.Replied || op.Reply.Epoch != 0 || op.Reply.Held != 0 || a.Decision.Remaining != 7 {
		t.Fatalf("give-back: answer %+v, exchange %+v; want replied, no record, 7 left", a, op)
	}
	if n, _ := rdb.HLen(context.Background(), stored).Result(); n != 2 {
		t.Fatalf("after the give-back the key has %d fields, want tokens and ts", n)
	}
}

func TestLeaseRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(storeOptions())
	s := startStore(t, rdb, Config{Prefix: "tb:", Timeout: exactTimeout, Instance: "i1"})
	loadScript(t, s)
	checkLeaseRoundTrip(t, s, rdb, "user:1")

	// A stale epoch (a late call, or one after a lapse) drops the record
	// as spent and starts a new one with a later epoch.
	l := bucket.Limit{Capacity: 10, Rate: 0.001}
	req, op := leaseOp("user:2", lease.Request{Limit: l, Want: 2})
	run1(t, s, req)
	first := op.Reply.Epoch
	req, op = leaseOp("user:2", lease.Request{Limit: l, Epoch: first - 1, Want: 1})
	if a := run1(t, s, req); !op.Replied || op.Reply.Epoch <= first || op.Reply.Held != 1 || a.Decision.Remaining != 7 {
		t.Fatalf("stale epoch: answer %+v, exchange %+v; want a new record of 1 after %d, 7 left (the 2 spent)", a, op, first)
	}
}

func TestClusterLeaseRoundTrip(t *testing.T) {
	t.Parallel() // a Redis Cluster of its own, which takes 2 s to form
	cl := redistest.StartCluster(t, 3)
	client := cl.Client(clusterOptions())
	s := startStore(t, client, Config{Prefix: "tb:", Timeout: exactTimeout, Instance: "i1"})
	for _, key := range []string{"user:1", "{user7}:a", "shared"} {
		checkLeaseRoundTrip(t, s, client, key)
	}
}

// TestResetWithoutLeaseModeDeletes is what lease mode's reset avoids: a
// store not in lease mode resets with DEL, records and all, so the bucket
// can grant again what a holder still has.
func TestResetWithoutLeaseModeDeletes(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(storeOptions())
	leased := startStore(t, rdb, Config{Prefix: "tb:", Timeout: exactTimeout, Instance: "i1"})
	plain := startStore(t, rdb, Config{Prefix: "tb:", Timeout: exactTimeout})
	loadScript(t, leased)
	l := bucket.Limit{Capacity: 10, Rate: 0.001}
	req, op := leaseOp("k", lease.Request{Limit: l, Want: 10})
	if run1(t, leased, req); op.Reply.Held != 10 {
		t.Fatalf("lease of the whole bucket: %+v", op)
	}
	if a := run1(t, plain, req); !errors.Is(a.Err, decide.ErrUnsupported) {
		t.Fatalf("a lease call to a store not in lease mode: %+v, want ErrUnsupported", a)
	}
	if d := run1(t, plain, acquireOp("k", l, 1)).Decision; d.Allowed {
		t.Fatalf("acquire with the bucket leased, through the plain store: %+v, want denied", d)
	}
	run1(t, plain, resetOp("k"))
	if d := run1(t, plain, acquireOp("k", l, 10)).Decision; !d.Allowed {
		t.Fatalf("after a DEL: %+v; the bucket is full again beside the 10 leased", d)
	}
}

// TestLeaseTimeoutLeavesUnreplied checks that a lease call Redis does not
// answer in time gets the policy's answer and no reply in its exchange,
// also once Redis runs it late: the instance then drops its lease
// (lease rule 2).
func TestLeaseTimeoutLeavesUnreplied(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(storeOptions())
	s := startStore(t, rdb, Config{Prefix: "tb:", Timeout: 50 * time.Millisecond, Instance: "i1"})
	loadScript(t, s)
	l := bucket.Limit{Capacity: 10, Rate: 1}

	srv.Pause()
	req, op := leaseOp("k", lease.Request{Limit: l, Cost: 1, Want: 4})
	a := run1(t, s, req)
	srv.Resume()
	if a.Err != nil || a.Decision != FailClosedDecision(s.cfg.Timeout) || op.Replied {
		t.Fatalf("lease call during a pause: answer %+v, exchange %+v; want the policy's, not replied", a, op)
	}
	if s.Degraded() != 1 {
		t.Fatalf("degraded %d, want 1", s.Degraded())
	}
	// Redis runs the call on resume; the answer stays the policy's.
	d := firstRedisAnswer(t, s, l)
	if !d.Allowed || op.Replied {
		t.Fatalf("after resume: %+v, exchange %+v; want Redis answering and the late call unreplied", d, op)
	}
}
