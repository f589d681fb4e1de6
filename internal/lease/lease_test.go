package lease

import (
	"math"
	"testing"

	"github.com/bucketd/bucketd/internal/bucket"
)

var lim = bucket.Limit{Capacity: 1000, Rate: 100}

// granted is Redis's reply to a call that held its cost and leased held in
// all under epoch 7.
func granted(held float64) Reply {
	return Reply{Decision: bucket.Decision{Allowed: true, Remaining: 500}, Epoch: 7, Held: held}
}

func TestColdKeyAsksForItsCostAndStrandsNothing(t *testing.T) {
	p := DefaultPolicy
	var e Entry
	o, _, req, _ := p.Take(&e, lim, 1, 1_000_000)
	if o != Ask || req.Cost != 1 || req.Epoch != 0 || req.Consumed != 0 || req.Returned != 0 {
		t.Fatalf("first call: %v %+v, want Ask for its cost, no record", o, req)
	}
	if req.Want != 0 {
		t.Fatalf("a key seen once asks to lease %v tokens, want 0 (its first call is a plain acquire)", req.Want)
	}
	if !e.InFlight {
		t.Fatal("the call is not counted in flight")
	}
	o, _, _, _ = p.Take(&e, lim, 1, 1_000_010)
	if o != Plain {
		t.Fatalf("a second call while the lease call is out: %v, want Plain (one lease call out per key)", o)
	}
}

func TestLeaseAnswersUntilItsDeadline(t *testing.T) {
	p := DefaultPolicy
	e := Entry{}
	p.Take(&e, lim, 1, 1_000_000)
	p.Apply(&e, granted(50), 1, 1_002_000) // sent at 1 s; 50 tokens beyond its cost
	if e.Tokens != 50 || e.Deadline != 1_000_000+p.TTL-p.Margin {
		t.Fatalf("after the reply: %+v", e)
	}
	for i := range 50 {
		o, d, _, _ := p.Take(&e, lim, 1, 1_003_000+int64(i))
		if o != Local || !d.Allowed {
			t.Fatalf("call %d from a lease of 50: %v %+v", i, o, d)
		}
	}
	if e.Spent != 50 || e.Tokens != 0 {
		t.Fatalf("after 50 calls: spent %v, tokens %v", e.Spent, e.Tokens)
	}
	o, _, req, _ := p.Take(&e, lim, 1, 1_004_000)
	if o != Ask || req.Consumed != 50 || req.Epoch != 7 {
		t.Fatalf("the lease spent: %v %+v, want Ask reporting 50 spent under epoch 7", o, req)
	}
	// A lease past its deadline is not spent, and is given back.
	e = Entry{}
	p.Take(&e, lim, 1, 1_000_000)
	p.Apply(&e, granted(50), 1, 1_001_000)
	o, _, req, _ = p.Take(&e, lim, 1, e.Deadline)
	if o != Ask || req.Returned != 50 || e.Tokens != 0 {
		t.Fatalf("at the deadline: %v %+v tokens %v, want Ask giving the 50 back", o, req, e.Tokens)
	}
}

func TestTokensSpentWhileTheCallIsOutAreNotCountedTwice(t *testing.T) {
	p := DefaultPolicy
	e := Entry{}
	p.Take(&e, lim, 1, 1_000_000)
	p.Apply(&e, granted(20), 1, 1_001_000)
	for range 15 { // below half of the size asked: a renewal
		p.Take(&e, lim, 1, 1_002_000)
	}
	req := p.Renew(&e, 1_002_000)
	if req.Consumed != 15 || req.Cost != 0 {
		t.Fatalf("renewal %+v, want 15 spent reported, no cost", req)
	}
	for range 3 { // spent while the renewal is out
		if o, d, _, _ := p.Take(&e, lim, 1, 1_003_000); o != Local || !d.Allowed {
			t.Fatalf("a call while the renewal is out: %v", o)
		}
	}
	// Redis counted 5 (20 - 15) before the renewal's grant of 30: held 35.
	// The 3 spent since the send come off it.
	p.Apply(&e, granted(35), 0, 1_004_000)
	if e.Tokens != 32 || e.Spent != 3 {
		t.Fatalf("after the renewal: tokens %v spent %v, want 32 and 3 (reported next time)", e.Tokens, e.Spent)
	}
}

func TestAnotherLimitIsNeverAnsweredFromTheLease(t *testing.T) {
	p := DefaultPolicy
	e := Entry{}
	p.Take(&e, lim, 1, 1_000_000)
	p.Apply(&e, granted(50), 1, 1_001_000)
	other := bucket.Limit{Capacity: 10, Rate: 1}
	o, _, req, _ := p.Take(&e, other, 1, 1_002_000)
	if o != Ask || req.Returned != 50 || req.Limit != other || e.Tokens != 0 {
		t.Fatalf("a call with another limit: %v %+v, want Ask giving the lease back", o, req)
	}
}

func TestDeniedKeyIsDeniedLocallyUntilATokenCanBeThere(t *testing.T) {
	p := DefaultPolicy
	e := Entry{}
	p.Take(&e, lim, 5, 1_000_000)
	p.Apply(&e, Reply{Decision: bucket.Decision{RetryAfterMs: 40}, Epoch: 0}, 5, 1_001_000)
	o, d, _, _ := p.Take(&e, lim, 5, 1_011_000)
	if o != Local || d.Allowed || d.RetryAfterMs != 30 {
		t.Fatalf("10 ms after a denial of 40 ms: %v %+v, want a local denial, retry 30 ms", o, d)
	}
	if o, _, _, _ := p.Take(&e, lim, 1, 1_012_000); o != Ask {
		t.Fatalf("a smaller cost after the denial: %v, want Ask", o)
	}
	p.Fail(&e)
	if o, _, _, _ := p.Take(&e, lim, 5, 1_041_000); o != Ask {
		t.Fatalf("once a token can be there: %v, want Ask", o)
	}
	if _, d, _, _ := p.Take(&e, lim, 1001, 1_042_000); d.Allowed || d.RetryAfterMs != -1 {
		t.Fatalf("cost above capacity: %+v, want denied, retry -1, no call", d)
	}
}

func TestAFailedCallDropsTheLease(t *testing.T) {
	p := DefaultPolicy
	e := Entry{}
	p.Take(&e, lim, 1, 1_000_000)
	p.Apply(&e, granted(50), 1, 1_001_000)
	p.Take(&e, lim, 1, 1_002_000)
	req := p.Renew(&e, 1_002_000)
	if req.Epoch != 7 {
		t.Fatal(req)
	}
	p.Fail(&e)
	if e.Tokens != 0 || e.Epoch != 0 || e.Spent != 0 {
		t.Fatalf("after a failed call: %+v, want nothing held, no epoch", e)
	}
	if _, _, req, _ := p.Take(&e, lim, 1, 1_003_000); req.Epoch != 0 || req.Consumed != 0 {
		t.Fatalf("the next call %+v: want a new record, no report (Redis drops the old one as spent)", req)
	}
}

func TestLeaseFollowsDemandWithinItsBounds(t *testing.T) {
	p := DefaultPolicy
	e := Entry{}
	now := int64(1_000_000)
	for range 2000 { // 1,000 calls a second for 2 s
		now += 1000
		p.observe(&e, 1, now)
	}
	if math.Abs(e.Demand-1000) > 50 {
		t.Fatalf("demand %v tokens/s at 1,000 calls of 1 a second", e.Demand)
	}
	if got, want := p.size(&e, lim, e.Last), 200.0*e.Demand/1000; math.Abs(got-min(want, 100)) > 1e-9 {
		t.Fatalf("lease size %v, want Target's worth capped at a tenth of the capacity (100)", got)
	}
	small := bucket.Limit{Capacity: 50, Rate: 1}
	if got := p.size(&e, small, e.Last); got != 5 {
		t.Fatalf("lease size %v under capacity 50, want 5 (MaxShare)", got)
	}
	now += 10 * p.Target
	p.observe(&e, 1, now)
	if e.Demand > 10 {
		t.Fatalf("demand %v tokens/s after ten lease periods idle", e.Demand)
	}
}

func TestGiveBackReturnsTheWholeLease(t *testing.T) {
	p := DefaultPolicy
	e := Entry{}
	if _, ok := p.GiveBack(&e, 0); ok {
		t.Fatal("an entry with no record gives something back")
	}
	p.Take(&e, lim, 1, 1_000_000)
	p.Apply(&e, granted(40), 1, 1_001_000)
	p.Take(&e, lim, 1, 1_002_000)
	req, ok := p.GiveBack(&e, 1_002_000+p.Idle)
	if !ok || req.Returned != 39 || req.Consumed != 1 || req.Want != 0 || e.Tokens != 0 {
		t.Fatalf("give back: %+v %v, tokens %v", req, ok, e.Tokens)
	}
	p.Apply(&e, Reply{Decision: bucket.Decision{Allowed: true}}, 0, 1_003_000+p.Idle)
	if !p.Forgettable(&e, 1_002_000+2*p.Idle) {
		t.Fatalf("after giving everything back and Idle unused: %+v, want forgettable", e)
	}
}

func TestFailMovesToANewRecord(t *testing.T) {
	p := DefaultPolicy
	var e Entry
	p.Take(&e, lim, 1, 1_000_000)
	p.Apply(&e, granted(50), 1, 1_001_000)
	p.Take(&e, lim, 1, 1_002_000)
	req := p.Renew(&e, 1_002_000)
	if req.Gen != 0 || req.Epoch != 7 {
		t.Fatalf("renewal %+v, want generation 0 under epoch 7", req)
	}
	p.Fail(&e)
	_, _, req, _ = p.Take(&e, lim, 1, 1_003_000)
	if req.Gen != 1 || req.Epoch != 0 || req.Consumed != 0 || req.Returned != 0 {
		t.Fatalf("the call after a failed one: %+v, want a new record (generation 1, no epoch, nothing reported)", req)
	}
}

// TestAPlainDenialIsRememberedToo: a call sent as a plain acquire (the
// key's lease call was out) that Redis denies is remembered like a lease
// call's denial (rule 4): an attack on a key whose lease is being renewed
// must not become one Redis call per request.
func TestAPlainDenialIsRememberedToo(t *testing.T) {
	p := DefaultPolicy
	e := Entry{}
	p.Take(&e, lim, 1, 1_000_000)
	p.Apply(&e, granted(0), 1, 1_001_000)
	p.Take(&e, lim, 1, 1_002_000) // the lease call, out
	if o, _, _, _ := p.Take(&e, lim, 1, 1_002_100); o != Plain {
		t.Fatalf("a call while the lease call is out: %v, want Plain", o)
	}
	p.PlainReply(&e, lim, bucket.Decision{RetryAfterMs: 20}, 1, 1_003_000)
	if o, d, _, _ := p.Take(&e, lim, 1, 1_004_000); o != Local || d.Allowed || d.RetryAfterMs != 19 {
		t.Fatalf("1 ms after a plain denial of 20 ms: %v %+v, want a local denial, retry 19 ms", o, d)
	}
}

// TestARedisBucketTooLowForTheCostIsNotAskedAgain: Redis allowed a call
// and left fewer tokens than the cost (it leased what it had): once the
// lease is spent, calls are denied locally until the refill can have
// brought the cost, instead of asking Redis for tokens it cannot have.
func TestARedisBucketTooLowForTheCostIsNotAskedAgain(t *testing.T) {
	p := DefaultPolicy
	e := Entry{}
	p.Take(&e, lim, 1, 1_000_000)
	p.Apply(&e, granted(2), 1, 1_001_000) // Remaining 500
	p.Take(&e, lim, 1, 1_002_000)
	p.Take(&e, lim, 1, 1_002_000)
	_, _, req, _ := p.Take(&e, lim, 1, 1_003_000)
	if req.Epoch != 7 {
		t.Fatalf("the dry lease's call %+v", req)
	}
	r := granted(3)
	r.Decision.Remaining = 0 // Redis leased all it had
	p.Apply(&e, r, 1, 1_004_000)
	for range 3 {
		if o, d, _, _ := p.Take(&e, lim, 1, 1_005_000); o != Local || !d.Allowed {
			t.Fatalf("from the lease of 3: %v %+v", o, d)
		}
	}
	// Redis held 0 of the cost 1 at rate 100/s: 10 ms from the reply.
	if o, d, _, _ := p.Take(&e, lim, 1, 1_006_000); o != Local || d.Allowed || d.RetryAfterMs != 8 {
		t.Fatalf("the lease spent, Redis empty at the reply 2 ms ago: %v %+v, want a local denial, retry 8 ms", o, d)
	}
	if o, _, _, _ := p.Take(&e, lim, 1, 1_014_000); o != Ask {
		t.Fatalf("once the refill can have brought a token: %v, want Ask", o)
	}
}

// TestTheLeaseAnswersBeforeADenial: a denial remembered from Redis never
// hides tokens the lease holds.
func TestTheLeaseAnswersBeforeADenial(t *testing.T) {
	p := DefaultPolicy
	e := Entry{}
	p.Take(&e, lim, 1, 1_000_000)
	r := granted(5)
	r.Decision.Remaining = 0
	p.Apply(&e, r, 1, 1_001_000)
	if o, d, _, _ := p.Take(&e, lim, 1, 1_001_500); o != Local || !d.Allowed {
		t.Fatalf("a lease of 5, Redis empty: %v %+v, want allowed from the lease", o, d)
	}
}

// TestALeaseTooSmallForACallIsNotTaken: a key asked rarely on an instance
// has a demand worth less than one call's cost over a lease period; such a
// lease could answer nothing and would cost a give-back call later, so the
// call asks for none (a cold key costs one Redis call, as in store mode).
func TestALeaseTooSmallForACallIsNotTaken(t *testing.T) {
	p := DefaultPolicy
	e := Entry{}
	now := int64(1_000_000)
	for i := range 5 { // one call a second
		o, _, req, _ := p.Take(&e, lim, 1, now)
		if o != Ask || req.Want != 0 {
			t.Fatalf("call %d, a second apart: %v want %v, want Ask for no lease", i, o, req.Want)
		}
		p.Apply(&e, Reply{Decision: bucket.Decision{Allowed: true, Remaining: 900}}, 1, now+1000)
		now += 1_000_000
	}
}

// TestDecayFollowsExp holds decay, observe's cheap exp(-x), to math.Exp
// over the gaps between calls, from microseconds apart to many time
// constants.
func TestDecayFollowsExp(t *testing.T) {
	for x := 0.0; x < 40; x = x*1.01 + 1e-7 {
		got, want := decay(x), math.Exp(-x)
		if math.Abs(got-want) > 7e-7*want {
			t.Fatalf("decay(%g) = %.17g, math.Exp(-%g) = %.17g: relative error %.3g, want <= 7e-7", x, got, x, want, math.Abs(got-want)/want)
		}
	}
	if decay(0) != 1 {
		t.Fatalf("decay(0) = %g, want 1", decay(0))
	}
}

// TestRenewalSlackIsWhatTheLeaseLasts: a renewal says how long the lease
// it renews lasts at the key's demand (so the renewer may gather it with
// others for at most a part of that), bounded by the lease's deadline; a
// give-back is in no hurry.
func TestRenewalSlackIsWhatTheLeaseLasts(t *testing.T) {
	p := DefaultPolicy
	base := Entry{Limit: lim, Epoch: 7, Tokens: 50, Demand: 100, Calls: warmCalls, Born: 0, Last: 10_000_000, Deadline: 11_000_000}
	e := base
	if r := p.Renew(&e, 10_000_000); r.Slack != 500_000 {
		t.Errorf("50 tokens at 100 a second: Slack %d µs, want 500000", r.Slack)
	}
	e = base
	e.Deadline = 10_200_000
	if r := p.Renew(&e, 10_000_000); r.Slack != 200_000 {
		t.Errorf("deadline 200 ms away: Slack %d µs, want 200000", r.Slack)
	}
	e = base
	e.Deadline = 9_000_000
	if r := p.Renew(&e, 10_000_000); r.Slack != 0 {
		t.Errorf("past its deadline: Slack %d µs, want 0", r.Slack)
	}
	e = base
	if r, ok := p.GiveBack(&e, 10_000_000); !ok || r.Slack != NoHurry {
		t.Errorf("give-back: %+v %v, want Slack NoHurry", r, ok)
	}
}

// TestACappedLeaseRenewsAsFarAhead: with RenewBelow a tenth, a lease of the
// key's demand over Target renews at a tenth of its size, and a lease that
// MaxShare holds below that demand renews as far ahead in time, at most at
// a quarter of its size.
func TestACappedLeaseRenewsAsFarAhead(t *testing.T) {
	p := Policy{Target: 1_000_000, MaxShare: 0.1, TTL: 4_000_000, Margin: 1_000_000, Idle: 2_000_000, RenewBelow: 0.1}
	for _, c := range []struct {
		name                 string
		size, demand, tokens float64
		want                 bool
	}{
		{"uncapped, above a tenth", 100, 100, 15, false},
		{"uncapped, below a tenth", 100, 100, 9, true},
		{"capped, above a quarter", 10, 1000, 3, false},
		{"capped, below a quarter", 10, 1000, 2, true},
		{"capped a little, above 100 ms of demand", 100, 200, 25, false},
		{"capped a little, below 100 ms of demand", 100, 200, 19, true},
	} {
		e := Entry{Size: c.size, Demand: c.demand, Tokens: c.tokens}
		if got := p.renewDue(&e); got != c.want {
			t.Errorf("%s: size %v, demand %v/s, %v tokens left: renew %v, want %v", c.name, c.size, c.demand, c.tokens, got, c.want)
		}
	}
}

// TestALeaseFarFromTheLimitCoversMoreThanTarget: while Redis held at least
// half of the bucket at its last reply, a lease covers farTargets of the
// key's demand, within what its deadline lets it spend (less lead) and
// within MaxShare; below half, Target.
func TestALeaseFarFromTheLimitCoversMoreThanTarget(t *testing.T) {
	big := bucket.Limit{Capacity: 100_000, Rate: 100_000}
	for _, c := range []struct {
		name        string
		p           Policy
		redisTokens float64
		limit       bucket.Limit
		want        float64 // tokens, at a demand of 1,000 a second
	}{
		{"defaults, below half", DefaultPolicy, 49_999, big, 200},
		{"defaults, at half", DefaultPolicy, 50_000, big, 800},
		{"--lease-ttl 2s, target 1s: spend window 1.5 s less 100 ms", Policy{Target: 1_000_000, MaxShare: 0.1, TTL: 2_000_000, Margin: 500_000, Idle: 1_000_000, RenewBelow: 0.1}, 100_000, big, 1400},
		{"--lease-ttl 4s, target 1s: spend window 3 s less 100 ms", Policy{Target: 1_000_000, MaxShare: 0.1, TTL: 4_000_000, Margin: 1_000_000, Idle: 2_000_000, RenewBelow: 0.1}, 100_000, big, 2900},
		{"target 1s, ttl 1s: the window is shorter than Target", Policy{Target: 1_000_000, MaxShare: 0.1, TTL: 1_000_000, Margin: 250_000, Idle: 500_000, RenewBelow: 0.1}, 100_000, big, 1000},
		{"defaults, MaxShare", DefaultPolicy, 5_000, bucket.Limit{Capacity: 6_000, Rate: 100}, 600},
	} {
		e := Entry{Demand: 1000, Calls: warmCalls, Born: 0, RedisTokens: c.redisTokens}
		if got := c.p.size(&e, c.limit, 10_000_000); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: lease size %v, want %v", c.name, got, c.want)
		}
	}
}

// TestALeaseIsRenewedAheadOfItsDeadline: a lease that still holds plenty
// is renewed once its deadline is lead away (so no call waits on Redis
// there), not before; a TTL short next to Target renews a quarter of the
// spend window ahead, not on every call.
func TestALeaseIsRenewedAheadOfItsDeadline(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Policy
		lead int64
	}{
		{"defaults", DefaultPolicy, 100_000},
		{"target 1s, ttl 100ms", Policy{Target: 1_000_000, MaxShare: 0.1, TTL: 100_000, Margin: 25_000, Idle: 50_000, RenewBelow: 0.1}, 18_750},
	} {
		e := Entry{}
		c.p.Take(&e, lim, 1, 1_000_000)
		c.p.Apply(&e, granted(90), 1, 1_001_000)
		e.Size = 90 // as asked: what is left stays above any share of it
		before := e.Deadline - c.lead - 1
		if o, _, _, renew := c.p.Take(&e, lim, 1, before); o != Local || renew {
			t.Errorf("%s: %d µs before the deadline: %v, renew %v, want Local without renewal", c.name, c.lead+1, o, renew)
		}
		if o, _, _, renew := c.p.Take(&e, lim, 1, e.Deadline-c.lead); o != Local || !renew {
			t.Errorf("%s: %d µs before the deadline: %v, renew %v, want Local with renewal", c.name, c.lead, o, renew)
		}
	}
}

// TestADeadlineRenewalIsNotRepeatedAtOnce probes the deadline rule for a
// renewal storm: a lease renewed a lead before its deadline, whose reply
// takes a quarter of the TTL (the slowest reply there is: --lease-ttl is
// at least four times --redis-timeout), gets a deadline far enough out
// that the calls after it are answered without another renewal.
func TestADeadlineRenewalIsNotRepeatedAtOnce(t *testing.T) {
	for _, p := range []Policy{
		DefaultPolicy,
		{Target: 1_000_000, MaxShare: 0.1, TTL: 100_000, Margin: 25_000, Idle: 50_000, RenewBelow: 0.1},
	} {
		e := Entry{}
		p.Take(&e, lim, 1, 1_000_000)
		p.Apply(&e, granted(90), 1, 1_001_000)
		e.Size = 90
		at := e.Deadline - p.lead()
		if _, _, _, renew := p.Take(&e, lim, 1, at); !renew {
			t.Fatalf("%+v: no renewal a lead before the deadline", p)
		}
		p.Renew(&e, at)
		reply := at + p.TTL/4
		p.Apply(&e, granted(e.Tokens+1), 0, reply)
		e.Size = 90
		for now := reply; now < reply+p.TTL/4; now += p.TTL / 100 {
			if o, _, _, renew := p.Take(&e, lim, 1, now); o != Local || renew {
				t.Fatalf("%+v: %d µs after the renewal's reply: %v, renew %v, want Local without renewal", p, now-reply, o, renew)
			}
		}
	}
}
