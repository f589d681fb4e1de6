package lease

import (
	"testing"

	"github.com/bucketd/bucketd/internal/bucket"
)

// TestSpentUnderALapsedRecordIsNotChargedToTheNextOne: tokens spent from
// the lease of epoch 7 while its renewal is out belong to that record. When
// the reply comes under a new epoch (Redis found the record lapsed and
// counted all it held as spent), they must neither come off the new
// record's tokens nor be reported under it: that counts them twice.
func TestSpentUnderALapsedRecordIsNotChargedToTheNextOne(t *testing.T) {
	p := DefaultPolicy
	e := Entry{}
	p.Take(&e, lim, 1, 1_000_000)
	p.Apply(&e, granted(20), 1, 1_001_000)
	for range 15 {
		p.Take(&e, lim, 1, 1_002_000)
	}
	p.Renew(&e, 1_002_000)
	for range 3 { // spent from epoch 7 while the renewal is out
		p.Take(&e, lim, 1, 1_003_000)
	}
	p.Apply(&e, Reply{Decision: bucket.Decision{Allowed: true, Remaining: 500}, Epoch: 9, Held: 30}, 0, 1_004_000)
	if e.Epoch != 9 || e.Tokens != 30 || e.Spent != 0 {
		t.Fatalf("after a reply under a new epoch: epoch %d tokens %v spent %v, want 9, 30 and 0 (the 3 were epoch 7's)", e.Epoch, e.Tokens, e.Spent)
	}
}

// TestALateReplyIsNeverSpentPastItsDeadline: a reply that comes after its
// call's send time plus TTL less the margin grants nothing spendable, and
// the next call gives the tokens back.
func TestALateReplyIsNeverSpentPastItsDeadline(t *testing.T) {
	p := DefaultPolicy
	e := Entry{}
	p.Take(&e, lim, 1, 1_000_000)
	p.Take(&e, lim, 1, 1_000_001) // Plain: demand
	sent := int64(1_000_002)
	p.Apply(&e, granted(0), 1, sent)
	o, _, _, _ := p.Take(&e, lim, 1, sent)
	if o != Ask {
		t.Fatalf("%v, want Ask", o)
	}
	late := sent + p.TTL - p.Margin + 1
	p.Apply(&e, granted(50), 1, late)
	o, d, req, _ := p.Take(&e, lim, 1, late)
	if o == Local && d.Allowed {
		t.Fatalf("a lease whose reply came %d µs after the send was spent", late-sent)
	}
	if o != Ask || req.Returned != 50 {
		t.Fatalf("after a late reply: %v %+v, want Ask giving the 50 back", o, req)
	}
}
