// Package lease is the instance side of lease mode: what one bucketd
// instance does with the tokens it holds in leases from the buckets Redis
// keeps, so that most calls are answered from its memory while no window
// ever sees more grants, over all instances, than one bucket would give.
//
// Redis keeps each bucket and, per instance, a lease record: the tokens it
// counts as that instance's (held), under an epoch, until an expiry
// (internal/bucket's Lease, and the script's "lease" op). Redis refills a
// bucket only up to capacity minus what all records hold, so the bucket
// plus every lease never exceeds capacity. This package decides, per key
// and instance, when to answer from the lease, when to ask Redis, how much
// to ask for, and when to give tokens back. It is pure and clock-free:
// times are passed in, microseconds of the instance's monotonic clock.
//
// The rules that keep the invariant, whatever Redis and the network do:
//
//  1. The instance spends only tokens Redis has told it it holds, and only
//     before its deadline: the send time of the call whose reply granted
//     them, plus the record's TTL, minus a margin. Redis counts them until
//     the call's execution time plus the TTL, which is later. So a lease
//     is never spent after Redis may have let it lapse, judged on the
//     instance's own clock from before it asked.
//  2. One call to Redis per key is out at a time, and reports (tokens spent,
//     tokens given back) count only within the epoch of the record they
//     were made under. A call whose reply never came leaves the instance
//     not knowing what Redis did, so the instance drops the lease at once
//     (Fail) and starts its next lease under a new record (a new
//     generation, Entry.Gen, so a new field of the Redis hash): a late
//     call that Redis runs after the new record exists touches only the old
//     one, which lapses unspent. An unknown outcome costs under-grant,
//     never over-grant.
//  3. A call with another limit (capacity or rate) than the lease's is never
//     answered from it: the lease is given back and the call goes to Redis.
//  4. A key Redis has just denied, or left with fewer tokens than a call's
//     cost, is denied locally once its lease is spent, until the tokens the
//     call asked for can be there (retry_after_ms, or the refill of what
//     was missing), so denied traffic costs no Redis call per request.
//     Replies to plain acquires count for this too.
package lease

import (
	"math"

	"github.com/bucketd/bucketd/internal/bucket"
)

// Policy sets how an instance sizes and keeps its leases. Times are
// microseconds. Use DefaultPolicy, or fill every field.
type Policy struct {
	// Target is how much of the key's demand on this instance a lease
	// covers: a key asked for 1,000 tokens a second with Target 200 ms
	// leases 200 tokens, so it costs about five Redis calls a second
	// (more while its bucket is far from its limit: period).
	Target int64
	// MaxShare bounds a lease to this share of the bucket's capacity, so
	// that what sits unused in leases stays small next to the bucket.
	MaxShare float64
	// TTL is how long Redis keeps a lease record after the call that last
	// renewed it; a crashed instance's lease comes back after this.
	TTL int64
	// Margin is how long before the TTL runs out, counted from the send,
	// the instance stops spending: room for clocks that run at slightly
	// different rates.
	Margin int64
	// Idle is how long a lease goes unused before it is given back.
	Idle int64
	// RenewBelow renews a lease, ahead of need and without making a call
	// wait, once its tokens fall below this share of the size it asked
	// (renewDue), or, while it holds tokens, this share of Target before
	// its deadline (lead).
	RenewBelow float64
}

// DefaultPolicy is a lease sized for 200 ms of demand, at most a tenth of
// the capacity, kept 2 s by Redis, spent until 1.5 s after the send,
// given back after 1 s unused, renewed at half.
var DefaultPolicy = Policy{
	Target:     200_000,
	MaxShare:   0.1,
	TTL:        2_000_000,
	Margin:     500_000,
	Idle:       1_000_000,
	RenewBelow: 0.5,
}

// Request is what the instance asks Redis for one key: the script's lease
// call. Cost is the call's own tokens, taken now if Redis holds them;
// Want is what it would like to hold beyond them.
type Request struct {
	Limit    bucket.Limit
	Cost     float64
	Epoch    int64   // the record's epoch as the instance knows it; 0: none
	Consumed float64 // tokens spent from the lease since the last report
	Returned float64 // unspent lease tokens given back
	Want     float64
	// Gen is the record's generation: the instance's record for the key is
	// the hash field named after the instance and Gen (rule 2).
	Gen uint32
	// Holding is what the instance counted as its own under the record
	// when it sent the call (not sent: Redis knows its own count); the
	// reply's Held less Holding is what the call leased.
	Holding float64
	// Slack is how long the call may wait to be sent, µs, before the
	// key's calls would find its lease empty (Renew; not sent): the
	// renewer gathers the calls of a few milliseconds into one Redis
	// command when they can wait. 0: send it at once; NoHurry: a
	// give-back, which no call waits for.
	Slack int64
}

// NoHurry is the Slack of a call no client waits for.
const NoHurry int64 = math.MaxInt64

// Reply is what Redis answered a Request.
type Reply struct {
	// Decision is the call's own: allowed when Redis held Cost; Remaining
	// is what Redis holds after the call, leases not counted.
	Decision bucket.Decision
	Epoch    int64   // the record's epoch after the call; 0: none left
	Held     float64 // the tokens Redis counts as this instance's after the call
}

// Entry is one key's lease on this instance. The zero value is a key with
// no lease. Owned by one goroutine (the key's shard).
type Entry struct {
	Limit    bucket.Limit // the lease's limit; the calls it may answer
	Epoch    int64        // the record's epoch; 0: no record known
	Gen      uint32       // the record's generation: Fail moves to the next
	Tokens   float64      // the tokens Redis counts as this instance's and it has not spent
	Spent    float64      // spent since the last report
	Deadline int64        // nothing is spent at or after this instant
	Size     float64      // the lease size last asked for
	Demand   float64      // tokens a second asked here, decaying (see observe)
	Last     int64        // the instant of the last call
	Born     int64        // the instant of the first call observed
	Calls    uint32       // calls observed, up to warmCalls
	// DenyUntil and DenyCost: Redis denied a call of cost DenyCost; calls of
	// that cost or more are denied here until DenyUntil.
	DenyUntil int64
	DenyCost  float64
	// RedisTokens is what Redis held after the last reply, for the
	// remaining of local answers.
	RedisTokens float64
	// InFlight: a call to Redis is out; SentAt is when it was sent, and
	// sentLimit the limit it asked under.
	InFlight  bool
	SentAt    int64
	sentLimit bucket.Limit
}

// Outcome says how a call was answered.
type Outcome uint8

const (
	// Local: answered from the lease (allowed) or from a recent denial.
	Local Outcome = iota
	// Ask: Redis must answer; the Request to send comes with it.
	Ask
	// Plain: Redis must answer, but a lease call for the key is already
	// out: send the call as a plain acquire, which touches no lease.
	Plain
	// Cold: Redis must answer, and the key has no lease entry here (its
	// first call, or no room for an entry; set by the entries' owner, never
	// by Take): a plain acquire, whose reply has no entry to go to.
	Cold
)

// Take answers a call of cost on limit at now, from the lease when it can
// (rules 1, 3, 4). With Ask, the returned Request is the lease call to
// send (the entry now counts it as in flight: answer it with Apply or
// Fail). renew, with Local, says a renewal should be sent ahead of need
// (the lease is low, or near its deadline): call Renew for its Request.
func (p Policy) Take(e *Entry, l bucket.Limit, cost float64, now int64) (o Outcome, d bucket.Decision, req Request, renew bool) {
	first := e.Last == 0
	p.observe(e, cost, now)
	switch {
	case cost > l.Capacity:
		return Local, bucket.Decision{Remaining: e.remaining(), RetryAfterMs: -1}, Request{}, false
	case l == e.Limit && now < e.Deadline && e.Tokens >= cost:
		e.Tokens -= cost
		e.Spent += cost
		d = bucket.Decision{Allowed: true, Remaining: e.remaining()}
		return Local, d, Request{}, !e.InFlight && (p.renewDue(e) || now >= e.Deadline-p.lead())
	case e.DenyUntil > now && cost >= e.DenyCost && l == e.Limit:
		return Local, bucket.Decision{Remaining: e.remaining(), RetryAfterMs: ceilMs(e.DenyUntil - now)}, Request{}, false
	case e.InFlight:
		return Plain, bucket.Decision{}, Request{}, false
	}
	req = p.request(e, l, cost, now)
	if first {
		req.Want = 0 // a key's first call is a plain acquire: nothing stranded if it stays cold
	}
	return Ask, bucket.Decision{}, req, false
}

// renewDue says whether e's lease is low enough to renew ahead of need:
// below RenewBelow of its size, or, for a lease MaxShare holds below the
// key's demand over Target, below RenewBelow of that demand over Target
// (what an uncapped lease would renew at, the same time ahead), at most a
// quarter of its size. So a capped lease is renewed at least as far
// ahead, in time, as an uncapped one, and at most every three quarters of
// a lease; with RenewBelow a quarter or more the first rule is the rule.
func (p Policy) renewDue(e *Entry) bool {
	if e.Tokens < p.RenewBelow*e.Size {
		return true
	}
	return e.Tokens < min(e.Size/4, p.RenewBelow*e.Demand*float64(p.Target)/1e6)
}

// lead is how long, µs, before its deadline a lease that still holds
// tokens is renewed, so that a key whose lease outlasts its deadline (its
// demand fell, or the lease covers more than Target: period) does not
// make a call wait on Redis there: as far ahead as a lease of Target is
// renewed by its tokens (RenewBelow of it), at most a quarter of the time
// a lease can be spent, so that a TTL short next to Target does not renew
// on every call.
func (p Policy) lead() int64 {
	return min(int64(p.RenewBelow*float64(p.Target)), (p.TTL-p.Margin)/4)
}

// Renew returns the lease call that renews e ahead of need (after Take
// said renew), and counts it as in flight. Its Slack is how long what is
// left of the lease lasts at the key's demand, or until its deadline if
// that comes first.
func (p Policy) Renew(e *Entry, now int64) Request {
	left := max(0, e.Deadline-now)
	if d := p.estimate(e, e.Demand, now); d > 0 {
		left = min(left, int64(min(e.Tokens/d*1e6, 1e15)))
	}
	r := p.request(e, e.Limit, 0, now)
	r.Slack = left
	return r
}

// request builds the lease call for a call of cost on l and marks it in
// flight: it reports what was spent, gives back what the lease cannot
// answer (all of it under another limit, or past the deadline, when it can
// no longer be spent), and asks for the size the demand calls for.
func (p Policy) request(e *Entry, l bucket.Limit, cost float64, now int64) Request {
	r := Request{Limit: l, Cost: cost, Epoch: e.Epoch, Consumed: e.Spent, Gen: e.Gen}
	usable := 0.0
	if l == e.Limit && now < e.Deadline {
		usable = e.Tokens
	} else {
		r.Returned, e.Tokens = e.Tokens, 0
	}
	e.Size = p.size(e, l, now)
	r.Want = max(0, e.Size-usable)
	if p.prior(e, cost, now)*float64(p.Target)/1e6 < max(cost, 1) {
		// Without this call the key's demand is worth less than one call
		// over a lease period: a lease could answer no further call and
		// would only cost a give-back (a rare key costs one call, as in
		// store mode).
		r.Want = 0
	}
	r.Holding = usable
	e.Spent = 0
	e.InFlight, e.SentAt, e.sentLimit = true, now, l
	return r
}

// size is the lease the key's demand calls for: period of it, at most
// MaxShare of the capacity.
func (p Policy) size(e *Entry, l bucket.Limit, now int64) float64 {
	return min(p.estimate(e, e.Demand, now)*p.period(e, l)/1e6, p.MaxShare*l.Capacity)
}

// farTargets is how many Targets of a key's demand a lease covers while
// the key's bucket is far from its limit (period).
const farTargets = 4

// period is how long of the key's demand, µs, a lease is sized for:
// Target, or, while Redis held at least half of the bucket's capacity at
// its last reply for the key, up to farTargets of it, as long as the
// lease can be spent before its deadline less lead. Under-grant comes
// from tokens a lease holds while another instance's call is denied, and
// a bucket that is half full is far from denying anyone: there a longer
// lease strands nothing anyone asks for and saves Redis calls (a lease op is most of what lease mode
// costs Redis). Once a reply shows the bucket below half, leases are
// sized for Target again, and what a long one holds is back in Redis by
// its renewal, its idle give-back or its deadline. Either way MaxShare
// bounds it.
func (p Policy) period(e *Entry, l bucket.Limit) float64 {
	t := float64(p.Target)
	if e.RedisTokens < l.Capacity/2 {
		return t
	}
	return max(t, min(farTargets*t, float64(p.TTL-p.Margin-p.lead())))
}

// warmCalls is how many calls a key's demand estimate counts before it is
// corrected for its youth (estimate).
const warmCalls = 8

// estimate is the rate d, a value of the decaying demand, corrected for an
// entry younger than a few time constants: the decaying sum starts at 0,
// so for its first time constants it reads low, by the factor
// 1 - exp(-age/tau), and a key that has just become hot would lease too
// little and call Redis again and again while the estimate caught up
// (four lease calls at 1,000 calls a second). The correction waits for
// warmCalls calls, so that two calls close together do not read as a
// high rate and lease tokens a key asked twice would strand.
func (p Policy) estimate(e *Entry, d float64, now int64) float64 {
	tau := p.tau()
	age := float64(now - e.Born)
	if e.Calls < warmCalls || age <= 0 || age >= 4*tau {
		return d
	}
	return d / (1 - math.Exp(-age/tau))
}

// Apply takes in Redis's reply to the call in flight, at now: the tokens
// Redis counts as this instance's, less what was spent since the send, may
// be spent until the deadline (rule 1); a denial is remembered (rule 4).
func (p Policy) Apply(e *Entry, r Reply, cost float64, now int64) {
	e.InFlight = false
	if r.Epoch != e.Epoch {
		// Not the record the call reported on: Redis dropped that one
		// (lapsed, or of an epoch it no longer knows) and counted all it
		// held as spent, so what went out of it since the send is no
		// part of the new record's count, nor of its reports (rule 2).
		e.Spent = 0
	}
	e.Limit, e.Epoch = e.sentLimit, r.Epoch
	e.RedisTokens = float64(r.Decision.Remaining)
	if r.Epoch == 0 {
		e.Tokens, e.Deadline = 0, 0
	} else {
		e.Tokens = max(0, r.Held-e.Spent) // Spent: what went out of the lease since the send
		e.Deadline = e.SentAt + p.TTL - p.Margin
	}
	e.noteRedis(e.Limit, r.Decision, cost, now)
}

// PlainReply takes in Redis's answer to a plain acquire of e's key (sent
// while the key's lease call was out): what Redis held, and a denial to
// remember (rule 4).
func (p Policy) PlainReply(e *Entry, l bucket.Limit, d bucket.Decision, cost float64, now int64) {
	if l == e.Limit {
		e.noteRedis(l, d, cost, now)
	}
}

// noteRedis remembers what Redis answered a call of cost under l at now
// (rule 4): what it held, and until when no call of that cost can be
// allowed by it: retry_after_ms of a denial, or, when it allowed the call
// but was left with less than the cost (a lease took what it had), the
// time the refill needs to bring the cost. Until then the key's calls are
// denied here once its lease is spent. The time counts from the reply,
// later than Redis's decision, so it never ends too early: other
// instances can only add tokens by giving back what they hold, which
// costs under-grant, never over-grant.
func (e *Entry) noteRedis(l bucket.Limit, d bucket.Decision, cost float64, now int64) {
	e.RedisTokens = float64(d.Remaining)
	switch {
	case !d.Allowed && d.RetryAfterMs > 0:
		e.DenyUntil, e.DenyCost = now+d.RetryAfterMs*1000, cost
	case d.Allowed && cost > 0 && float64(d.Remaining) < cost:
		wait := math.Ceil((cost - float64(d.Remaining)) / l.Rate * 1e6)
		e.DenyUntil, e.DenyCost = now+int64(min(wait, 1e15)), cost
	case cost > 0:
		e.DenyUntil = 0
	}
}

// Fail takes in that the call in flight got no reply (rule 2): what Redis
// did is unknown, so the lease is dropped, and the next call starts a new
// record.
func (p Policy) Fail(e *Entry) {
	e.InFlight = false
	e.Epoch, e.Tokens, e.Spent, e.Deadline = 0, 0, 0, 0
	e.Gen++
}

// GiveBack returns the call that gives the whole lease back (idle, or at
// shutdown) and marks it in flight; ok is false when there is nothing to
// give back or report, or a call is out already.
func (p Policy) GiveBack(e *Entry, now int64) (Request, bool) {
	if e.InFlight || e.Epoch == 0 {
		return Request{}, false
	}
	r := Request{Limit: e.Limit, Epoch: e.Epoch, Consumed: e.Spent, Returned: e.Tokens, Gen: e.Gen, Slack: NoHurry}
	e.Tokens, e.Spent, e.Size = 0, 0, 0
	e.InFlight, e.SentAt, e.sentLimit = true, now, e.Limit
	return r, true
}

// Unused reports whether e has gone unused long enough to give its lease
// back.
func (p Policy) Unused(e *Entry, now int64) bool { return now-e.Last >= p.Idle }

// Forgettable reports whether e holds nothing worth keeping: no lease, no
// call out, no denial in force, unused for Idle. Its demand is forgotten
// with it.
func (p Policy) Forgettable(e *Entry, now int64) bool {
	return !e.InFlight && e.Epoch == 0 && e.DenyUntil <= now && p.Unused(e, now)
}

// demandWindow is the longest time constant of the demand estimate: a
// key that becomes hot reaches its lease size within a few of them, not
// within a few lease periods, which would keep its leases small, and its
// Redis calls many, for seconds at --lease-target 1s.
const demandWindow = 200_000

// DemandWindow is the time constant of the demand estimate, µs: a key
// asked again within it of its first call is worth an entry.
func (p Policy) DemandWindow() int64 { return int64(p.tau()) }

// Observed records in e, a new entry, a call of cost at an earlier instant
// that was answered without it (the shards make an entry only for a key's
// second call).
func (p Policy) Observed(e *Entry, cost float64, at int64) { p.observe(e, cost, at) }

// tau is the time constant of the demand estimate, µs.
func (p Policy) tau() float64 { return float64(min(max(p.Target, 1), demandWindow)) }

// prior is the key's demand without the call of cost that observe just
// counted: a single call alone reads as a rate of cost/tau, which would
// size a lease for a key asked once.
func (p Policy) prior(e *Entry, cost float64, now int64) float64 {
	return p.estimate(e, max(0, e.Demand-cost*1e6/p.tau()), now)
}

// observe folds a call of cost at now into the key's demand: an
// exponentially decaying rate with a time constant of Target, at most
// demandWindow, so a lease follows a change of load quickly.
func (p Policy) observe(e *Entry, cost float64, now int64) {
	dt := now - e.Last
	if e.Last == 0 || dt < 0 {
		dt = 0
	}
	if e.Calls == 0 {
		e.Born = now
	}
	if e.Calls < warmCalls {
		e.Calls++
	}
	tau := p.tau()
	e.Demand = e.Demand*decay(float64(dt)/tau) + cost*1e6/tau
	e.Last = now
}

// decay is exp(-x) for x >= 0. A hot key's calls come microseconds apart,
// a small fraction of the time constant, where four terms of the series
// are within 7e-7 of it (the next term, x^4/24, is at most 6.4e-7 for
// x <= 1/16) at a few multiplications instead of math.Exp's call: this
// runs on every call a lease answers.
func decay(x float64) float64 {
	if x > 1.0/16 {
		return math.Exp(-x)
	}
	return 1 - x*(1-x*(0.5-x/6))
}

// remaining is what a local answer shows: the lease's tokens plus what
// Redis held at the last reply, whole tokens. Other instances' leases are
// not counted.
func (e *Entry) remaining() int64 { return int64(math.Floor(e.Tokens + e.RedisTokens)) }

// ceilMs converts microseconds to milliseconds, rounded up.
func ceilMs(us int64) int64 { return (us + 999) / 1000 }
