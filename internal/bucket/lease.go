package bucket

import (
	"cmp"
	"math"
	"slices"
)

// Lease mode on Redis, the Go mirror of the script's "lease" and "reset"
// ops and of how every op honours lease records (internal/lease is the
// instance side). Redis keeps, beside a bucket's state, one record per
// holder (an instance and its record generation): the tokens Redis counts
// as that holder's (Held), under an epoch, until Expiry. The bucket refills
// only up to its room, capacity minus what the live records hold, so the
// bucket plus every lease never exceeds capacity, and tokens only ever
// appear by refill at rate: the grants of all holders over any window w
// are at most capacity + rate*w, as one bucket would allow.
//
// Records lapse at their Expiry: their Held is counted as spent and never
// goes back into tokens. The refill is computed piecewise, each stretch up
// to a lapse with the room of the records still live then, so a bucket
// never refills, after a lapse, the time during which the lapsed lease
// still filled it (a lease taken, spent, and then a bucket refilled as if
// it had been empty of leases all along would grant twice the capacity).
//
// Every sum over records runs in one order, by (Expiry, holder) from the
// last to the first, as the script runs it, so Go and Lua agree bit for bit.

// Record is one holder's lease record in a Redis bucket. Times are the
// Redis clock's microseconds.
type Record struct {
	Epoch  int64   // set when the record was created; never repeats for a holder
	Held   float64 // tokens counted as the holder's; > 0 for a stored record
	Expiry int64   // the record lapses at this instant (live while now < Expiry)
}

// Stored is one key as Redis holds it when leases may exist: the bucket's
// state and its records. The zero value is a key Redis does not hold.
// Records lapsed by now may still be in it: every method lapses them
// first, and the ones that write drop them. State.Tokens is +Inf only
// after Reset: the bucket was full to its room at State.Last.
type Stored struct {
	State   State
	Exists  bool // State is stored; without it the bucket holds its room
	Records map[string]Record
}

// LeaseCall is the lease op's own arguments (the script's ARGV[6]).
type LeaseCall struct {
	Holder   string
	Epoch    int64   // the record's epoch as the holder knows it; 0: none
	Consumed float64 // spent from the record since the last report
	Returned float64 // unspent tokens given back
	Want     float64 // tokens to hold beyond the call's cost
	TTL      int64   // µs the record lives after this call; > 0
}

// LeaseReply is the lease op's answer: the call's own decision (Remaining
// is what the bucket holds after the call, leases not counted) and the
// holder's record after it (Epoch 0 and Held 0: no record).
type LeaseReply struct {
	Decision Decision
	Epoch    int64
	Held     float64
}

// held is one record with its holder, for the sorted walks.
type held struct {
	holder string
	Record
}

// sortedRecords returns s's records by (Expiry, holder).
func (s *Stored) sortedRecords() []held {
	rs := make([]held, 0, len(s.Records))
	for h, r := range s.Records {
		rs = append(rs, held{h, r})
	}
	slices.SortFunc(rs, func(a, b held) int {
		if c := cmp.Compare(a.Expiry, b.Expiry); c != 0 {
			return c
		}
		return cmp.Compare(a.holder, b.holder)
	})
	return rs
}

// sumHeld is what rs hold, summed from the last to the first.
func sumHeld(rs []held) float64 {
	sum := 0.0
	for i := len(rs) - 1; i >= 0; i-- {
		sum += rs[i].Held
	}
	return sum
}

// room is what the bucket may hold beside leases of sum: capacity - sum,
// at least 0.
func room(capacity, sum float64) float64 {
	return math.Max(0, capacity-sum)
}

// refilled is a key brought to now: the bucket's tokens, the live records
// (sorted), and the records that lapsed by now.
type refilled struct {
	tokens float64
	live   []held
	lapsed []held
}

// refill lapses the records with Expiry <= now and refills the bucket to
// now under l, piecewise: up to each lapse with the room of the records
// live until then, then to now with the room of those still live. With no
// records it is State.TokensAt exactly; with no stored state the bucket
// holds the room at now.
func (s *Stored) refill(l Limit, now int64) refilled {
	rs := s.sortedRecords()
	n := 0
	for n < len(rs) && rs[n].Expiry <= now {
		n++
	}
	r := refilled{live: rs[n:], lapsed: rs[:n]}
	if !s.Exists {
		r.tokens = room(l.Capacity, sumHeld(r.live))
		return r
	}
	st := s.State
	for i := range n {
		st.Tokens = st.TokensAt(Limit{Capacity: room(l.Capacity, sumHeld(rs[i:])), Rate: l.Rate}, rs[i].Expiry)
		st.Last = max(st.Last, rs[i].Expiry)
	}
	r.tokens = st.TokensAt(Limit{Capacity: room(l.Capacity, sumHeld(r.live)), Rate: l.Rate}, now)
	return r
}

// decideRoom is decide for a bucket whose room is rm: remaining and
// reset_after_ms count towards the room (leases are not the bucket's), and
// retry_after_ms is -1 only when the cost exceeds the capacity itself
// (tokens in leases come back). With rm == l.Capacity it is decide.
func decideRoom(l Limit, rm, cost, after float64, allowed bool) Decision {
	d := decide(Limit{Capacity: rm, Rate: l.Rate}, cost, after, allowed)
	if !allowed && cost <= l.Capacity && cost > rm {
		d.RetryAfterMs = ceilMillis(cost-after, l.Rate)
	}
	return d
}

// Peek is Peek (TB.PEEK) honouring the records: what Acquire with this
// cost would answer at now. It changes nothing, not even the lapses.
func (s *Stored) Peek(l Limit, cost float64, now int64) Decision {
	r := s.refill(l, now)
	t, allowed := r.tokens, r.tokens >= cost
	if allowed {
		t -= cost
	}
	return decideRoom(l, room(l.Capacity, sumHeld(r.live)), cost, t, allowed)
}

// Check is Check honouring the records: whether the bucket alone holds
// cost at now, taking nothing and changing nothing.
func (s *Stored) Check(l Limit, cost float64, now int64) Decision {
	r := s.refill(l, now)
	return decideRoom(l, room(l.Capacity, sumHeld(r.live)), cost, r.tokens, r.tokens >= cost)
}

// Acquire is Acquire (TB.ACQUIRE) honouring the records: cost is taken
// from the bucket's room, never from leases. A cost of 0 is Peek. For
// cost > 0 the key is stored whether or not the call was allowed, as
// Acquire's state is.
func (s *Stored) Acquire(l Limit, cost float64, now int64) Decision {
	if cost == 0 {
		return s.Peek(l, 0, now)
	}
	r := s.refill(l, now)
	t, allowed := r.tokens, r.tokens >= cost
	if allowed {
		t -= cost
	}
	s.store(l, t, r.live, now)
	return decideRoom(l, room(l.Capacity, sumHeld(r.live)), cost, t, allowed)
}

// AcquireAll is TB.MACQUIRE's all-or-nothing group honouring the records,
// as internal/shard's acquireAll and the script's acquireall: every
// member is checked; only when each alone holds cost does each acquire
// it; otherwise nothing changes and each answers its check. The members
// are distinct keys.
func AcquireAll(members []*Stored, limits []Limit, cost float64, now int64) (bool, []Decision) {
	ds := make([]Decision, len(members))
	all := true
	for i, s := range members {
		ds[i] = s.Check(limits[i], cost, now)
		all = all && ds[i].Allowed
	}
	if !all {
		return false, ds
	}
	for i, s := range members {
		ds[i] = s.Acquire(limits[i], cost, now)
	}
	return true, ds
}

// Lease is the script's "lease" op for holder c.Holder: it takes in the
// holder's report on its record (Consumed, spent; Returned, given back),
// answers the call's own cost, and, when that is allowed, grants up to
// c.Want more into the record. A record of another epoch than c.Epoch is
// dropped as spent (the holder no longer knows it: a late call, or one
// after a lapse), and so is the report made under it. A cost above the
// capacity is denied with retry -1 and grants nothing.
func (s *Stored) Lease(l Limit, cost float64, now int64, c LeaseCall) LeaseReply {
	r := s.refill(l, now)
	t := r.tokens
	prev := int64(-1) // the epoch of the holder's record this call dropped or that lapsed
	for _, h := range r.lapsed {
		if h.holder == c.Holder {
			prev = h.Epoch
		}
	}
	live := r.live[:0:0]
	var own Record
	found := false
	for _, h := range r.live {
		if h.holder != c.Holder {
			live = append(live, h)
			continue
		}
		if h.Epoch != c.Epoch {
			prev = h.Epoch
			continue
		}
		own, found = h.Record, true
		own.Held = math.Max(0, own.Held-c.Consumed)
		give := math.Min(c.Returned, own.Held)
		own.Held -= give
		t += give
	}
	allowed := t >= cost
	if allowed {
		t -= cost
		g := math.Max(0, math.Min(c.Want, t))
		t -= g
		own.Held += g
	}
	reply := LeaseReply{}
	if own.Held > 0 {
		if !found {
			own.Epoch = max(now, prev+1, 1)
		}
		own.Expiry = now + c.TTL
		live = insertHeld(live, held{c.Holder, own})
		reply.Epoch, reply.Held = own.Epoch, own.Held
	}
	s.store(l, t, live, now)
	reply.Decision = decideRoom(l, room(l.Capacity, sumHeld(live)), cost, t, allowed)
	return reply
}

// insertHeld puts h into rs, keeping the (Expiry, holder) order.
func insertHeld(rs []held, h held) []held {
	i, _ := slices.BinarySearchFunc(rs, h, func(a, b held) int {
		if c := cmp.Compare(a.Expiry, b.Expiry); c != 0 {
			return c
		}
		return cmp.Compare(a.holder, b.holder)
	})
	return slices.Insert(rs, i, h)
}

// store writes the key after an op at now that leaves tokens t and the
// live records: with no records, as the shards store a bucket (a full one
// is deleted); with records, always, stamped max(Last, now).
func (s *Stored) store(l Limit, t float64, live []held, now int64) {
	last := now
	if s.Exists {
		last = max(s.State.Last, now)
	}
	s.Records = nil
	if len(live) == 0 && t >= l.Capacity {
		s.State, s.Exists = State{}, false
		return
	}
	s.State, s.Exists = State{Tokens: t, Last: last}, true
	if len(live) > 0 {
		s.Records = make(map[string]Record, len(live))
		for _, h := range live {
			s.Records[h.holder] = h.Record
		}
	}
}

// Reset is TB.RESET in lease mode (the script's op "reset", which, as
// TB.RESET, knows no limit): true if the key existed. With no live records
// the key is deleted. With records the bucket's own state is forgotten and
// the records stay, so the tokens holders have are still counted (a DEL
// here would let the bucket grant them again): the state becomes "full to
// its room at now", Tokens = +Inf with Last = now, which the next op
// refills piecewise like any state (min(room, +Inf) is the room), so the
// bucket grows by refill only, also when the records lapse later. Under
// any other op a state is finite.
func (s *Stored) Reset(now int64) bool {
	existed := s.Exists || len(s.Records) > 0
	last := now
	if s.Exists {
		last = max(s.State.Last, now)
	}
	live := map[string]Record{}
	for h, r := range s.Records {
		if r.Expiry > now {
			live[h] = r
		}
	}
	if len(live) == 0 {
		*s = Stored{}
		return existed
	}
	*s = Stored{State: State{Tokens: math.Inf(1), Last: last}, Exists: true, Records: live}
	return existed
}

// Held is the sum of the live records' Held at now.
func (s *Stored) Held(now int64) float64 {
	rs := s.sortedRecords()
	n := 0
	for n < len(rs) && rs[n].Expiry <= now {
		n++
	}
	return sumHeld(rs[n:])
}

// ExpireMillis is the PEXPIRE the script sets on the key s after an op at
// now under l: the ms until the bucket, refilled piecewise through every
// record's lapse, is full to capacity (so never before the latest record's
// expiry), rounded up, in [2, 10 years]. A deleted key has none (0).
func (s *Stored) ExpireMillis(l Limit, now int64) int64 {
	if !s.Exists && len(s.Records) == 0 {
		return 0
	}
	rs := s.sortedRecords()
	if len(rs) == 0 {
		return ttlMs(l, s.State, now)
	}
	latest := rs[len(rs)-1].Expiry
	if s.Exists && math.IsInf(s.State.Tokens, 1) { // reset: full once the records lapse
		return ttlMs(Limit{Capacity: 0, Rate: 1}, State{Last: latest}, now)
	}
	full := s.refill(l, latest) // every record lapses by latest
	return ttlMs(l, State{Tokens: full.tokens, Last: max(s.State.Last, latest)}, now)
}

// maxTTLMs is the script's MAX_TTL_MS, 10 years of 365 days.
const maxTTLMs = 315360000000

// ttlMs mirrors the script's ttl_ms: the ms from now until st is full
// under l, rounded up, in [2, maxTTLMs].
func ttlMs(l Limit, st State, now int64) int64 {
	ms := float64((l.Capacity-st.Tokens)/l.Rate*1000) + float64(st.Last-now)/1000
	if !(ms < maxTTLMs) {
		return maxTTLMs
	}
	ms = math.Ceil(ms)
	if ms < 2 {
		return 2
	}
	return int64(ms)
}
