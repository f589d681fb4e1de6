package leasestore

import (
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/lease"
)

// TestRenewerSendsByTheMostUrgentCall: the queue is sent by the earliest
// of its calls' deadlines, each call's post plus a quarter of its Slack and
// at most renewGather later, so a renewal of a lease about to run dry is
// not held back for the calls that could wait; with none urgent, calls
// gather for renewGather. No loop runs here: post and gather alone.
func TestRenewerSendsByTheMostUrgentCall(t *testing.T) {
	l := bucket.Limit{Capacity: 100, Rate: 10}
	r := newRenewer(nil)
	start := time.Now()
	r.post("give-back", l, lease.Request{Limit: l, Slack: lease.NoHurry})
	if got := r.sendBy.Sub(start); got < renewGather || got > renewGather+time.Second {
		t.Fatalf("a give-back alone is sent %v after its post, want %v", got, renewGather)
	}
	by := r.sendBy
	r.gather()
	if now := time.Now(); now.Before(by) {
		t.Errorf("gather with only a give-back queued returned %v before its time", by.Sub(now))
	}
	r.post("renewal", l, lease.Request{Limit: l, Slack: 8_000}) // 8 ms left: sent within 2
	at := time.Now()
	if got := r.sendBy.Sub(at); got > 2*time.Millisecond {
		t.Errorf("with a renewal of 8 ms slack queued the queue is sent %v from now, want at most 2ms", got)
	}
	r.post("dry", l, lease.Request{Limit: l}) // Slack 0: now
	if r.sendBy.After(time.Now()) {
		t.Errorf("with a renewal of no slack queued the queue is sent at %v, after now", r.sendBy)
	}
	r.gather() // returns at once: the queue is due (a test that hangs here fails)
	if len(r.queue) != 3 {
		t.Fatalf("queue %d calls, want 3", len(r.queue))
	}
	r.closed = true
	r.post("late", l, lease.Request{Limit: l, Slack: lease.NoHurry})
	if len(r.queue) != 3 {
		t.Errorf("a closed renewer took a call")
	}
}
