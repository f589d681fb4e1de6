package bucket

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// Worked instants for the lease tables: t0 and the TTL every call uses.
const (
	lt0  = int64(1_000_000)
	lTTL = int64(2_000_000)
)

// leasedA is a key after holder "a"'s first lease at lt0 on {10, 1}: it
// paid 1, holds 4, and the bucket keeps 5 (room 6).
func leasedA() *Stored {
	return &Stored{
		State:   State{Tokens: 5, Last: lt0},
		Exists:  true,
		Records: map[string]Record{"a": {Epoch: lt0, Held: 4, Expiry: lt0 + lTTL}},
	}
}

func TestStoredLeaseSteps(t *testing.T) {
	l := Limit{Capacity: 10, Rate: 1}
	for _, tc := range []struct {
		name  string
		s     *Stored
		cost  float64
		now   int64
		call  LeaseCall
		want  LeaseReply
		after Stored
	}{
		{
			name: "first lease on a key nobody used",
			s:    &Stored{}, cost: 1, now: lt0,
			call:  LeaseCall{Holder: "a", Want: 4, TTL: lTTL},
			want:  LeaseReply{Decision{true, 5, 0, 1000}, lt0, 4}, // reset_after: to the room, 6
			after: *leasedA(),
		},
		{
			name: "report under the record's epoch: spent 3, given back 1, nothing left",
			s:    leasedA(), now: lt0 + 500_000,
			call: LeaseCall{Holder: "a", Epoch: lt0, Consumed: 3, Returned: 1, TTL: lTTL},
			// 5 refilled to 5.5 (room 6), plus the 1 given back; the record is gone.
			want:  LeaseReply{Decision{true, 6, 0, 3500}, 0, 0},
			after: Stored{State: State{Tokens: 6.5, Last: lt0 + 500_000}, Exists: true},
		},
		{
			name: "a stale epoch drops the record as spent, report and all; the new epoch is later",
			s:    leasedA(), cost: 1, now: lt0 + 500_000,
			call: LeaseCall{Holder: "a", Epoch: 77, Consumed: 3, Returned: 1, Want: 2, TTL: lTTL},
			// 5.5 (room 6, counting the dropped record), pays 1, grants 2.
			want: LeaseReply{Decision{true, 2, 0, 5500}, lt0 + 500_000, 2},
			after: Stored{State: State{Tokens: 2.5, Last: lt0 + 500_000}, Exists: true,
				Records: map[string]Record{"a": {lt0 + 500_000, 2, lt0 + 500_000 + lTTL}}},
		},
		{
			name: "a record dropped in the microsecond it was made: the epoch never repeats",
			s:    leasedA(), now: lt0,
			call: LeaseCall{Holder: "a", Want: 1, TTL: lTTL},
			want: LeaseReply{Decision{true, 4, 0, 5000}, lt0 + 1, 1},
			after: Stored{State: State{Tokens: 4, Last: lt0}, Exists: true,
				Records: map[string]Record{"a": {lt0 + 1, 1, lt0 + lTTL}}},
		},
		{
			name: "another holder's record is not touched; its tokens stay out of the room",
			s:    leasedA(), cost: 1, now: lt0 + 1_000_000,
			call: LeaseCall{Holder: "b", Want: 3, TTL: lTTL},
			// 6 (room 6), pays 1, grants 3: 2 left, room 3.
			want: LeaseReply{Decision{true, 2, 0, 1000}, lt0 + 1_000_000, 3},
			after: Stored{State: State{Tokens: 2, Last: lt0 + 1_000_000}, Exists: true, Records: map[string]Record{
				"a": {lt0, 4, lt0 + lTTL}, "b": {lt0 + 1_000_000, 3, lt0 + 1_000_000 + lTTL}}},
		},
		{
			name: "cost above capacity: denied with -1, nothing granted, the report still taken",
			s:    leasedA(), cost: 11, now: lt0,
			call:  LeaseCall{Holder: "a", Epoch: lt0, Consumed: 4, Want: 5, TTL: lTTL},
			want:  LeaseReply{Decision{false, 5, -1, 5000}, 0, 0},
			after: Stored{State: State{Tokens: 5, Last: lt0}, Exists: true},
		},
		{
			name: "denied with tokens in leases: the retry counts on them coming back",
			s: &Stored{State: State{Tokens: 0, Last: lt0}, Exists: true,
				Records: map[string]Record{"a": {lt0, 10, lt0 + lTTL}}},
			cost: 1, now: lt0,
			call: LeaseCall{Holder: "b", Want: 1, TTL: lTTL},
			want: LeaseReply{Decision{false, 0, 1000, 0}, 0, 0},
			after: Stored{State: State{Tokens: 0, Last: lt0}, Exists: true,
				Records: map[string]Record{"a": {lt0, 10, lt0 + lTTL}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.s.Lease(l, tc.cost, tc.now, tc.call)
			if got != tc.want {
				t.Errorf("reply %+v, want %+v", got, tc.want)
			}
			equalStored(t, *tc.s, tc.after)
		})
	}
}

// equalStored fails t unless got and want hold the same key.
func equalStored(t *testing.T, got, want Stored) {
	t.Helper()
	if got.Exists != want.Exists || got.State != want.State || len(got.Records) != len(want.Records) {
		t.Fatalf("stored %+v, want %+v", got, want)
	}
	for h, r := range want.Records {
		if got.Records[h] != r {
			t.Fatalf("stored %+v, want %+v", got, want)
		}
	}
}

// TestStoredLapseRefillsPiecewise is the trap lease mode must avoid: a
// holder leases 9 of 10 tokens, spends them, and its record lapses. The
// bucket refilled at most to its room (1) while the record lived, so two
// seconds after the lease and one after the lapse it holds 2, not the 3 a
// refill over all three seconds at full capacity would give.
func TestStoredLapseRefillsPiecewise(t *testing.T) {
	l := Limit{Capacity: 10, Rate: 1}
	s := &Stored{}
	r := s.Lease(l, 1, lt0, LeaseCall{Holder: "a", Want: 9, TTL: lTTL})
	if r.Held != 9 || r.Decision.Remaining != 0 {
		t.Fatalf("lease %+v, want 9 held and nothing left", r)
	}
	if got := s.Held(lt0 + lTTL - 1); got != 9 {
		t.Fatalf("Held just before the expiry = %v, want 9", got)
	}
	if got := s.Held(lt0 + lTTL); got != 0 {
		t.Fatalf("Held at the expiry = %v, want 0", got)
	}
	if got, want := s.ExpireMillis(l, lt0), int64(2000+9000); got != want {
		t.Fatalf("ExpireMillis = %d, want %d: 1 by the lapse, then 9 s to fill", got, want)
	}
	if d := s.Peek(l, 0, lt0+3_000_000); d.Remaining != 2 {
		t.Fatalf("peek 3 s after the lease: %+v, want 2 left", d)
	}
	d := s.Acquire(l, 2, lt0+3_000_000)
	if !d.Allowed || d.Remaining != 0 || s.Records != nil {
		t.Fatalf("acquire 2 after the lapse: %+v, stored %+v; want allowed, 0 left, no records", d, s)
	}
}

// TestStoredPlainOpsHonourRecords checks acquire, peek, check and groups
// against the room, and that with no records they are the plain math.
func TestStoredPlainOpsHonourRecords(t *testing.T) {
	l := Limit{Capacity: 10, Rate: 1}
	s := leasedA()
	if d := s.Peek(l, 6, lt0+2_000_000-1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("peek 6 with 4 leased: %+v, want allowed (room 6) with 0 left", d)
	}
	if d := s.Check(l, 7, lt0+1_000_000); d.Allowed || d.Remaining != 6 || d.RetryAfterMs != 1000 {
		t.Fatalf("check 7 with 4 leased: %+v, want denied, 6 held, retry 1 s", d)
	}
	if d := s.Acquire(l, 1, lt0+1_000_000); !d.Allowed || d.Remaining != 5 || d.ResetAfterMs != 1000 {
		t.Fatalf("acquire 1 with 4 leased: %+v, want 5 left of a room of 6", d)
	}
	other := &Stored{}
	ok, ds := AcquireAll([]*Stored{s, other}, []Limit{l, l}, 6, lt0+1_000_000)
	if ok || ds[0].Allowed || !ds[1].Allowed || other.Exists {
		t.Fatalf("group of 6 over the leased key: %v %+v; want denied by it alone, nothing written", ok, ds)
	}
	ok, _ = AcquireAll([]*Stored{s, other}, []Limit{l, l}, 5, lt0+1_000_000)
	if !ok || s.State.Tokens != 0 || other.State.Tokens != 5 {
		t.Fatalf("group of 5: %v, stored %+v and %+v", ok, s, other)
	}

	// No records: the plain math, bit for bit, a full bucket deleted.
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		l := Limit{Capacity: 1 + r.Float64()*100, Rate: r.Float64() * 10}
		st := State{Tokens: r.Float64() * l.Capacity, Last: r.Int64N(1e7)}
		now, cost := r.Int64N(2e7), float64(r.IntN(4))
		next, want := Acquire(st, true, l, cost, now)
		s := &Stored{State: st, Exists: true}
		if got := s.Acquire(l, cost, now); got != want {
			t.Fatalf("Acquire %+v, want %+v", got, want)
		}
		if cost > 0 && next.IsFull(l, now) == s.Exists {
			t.Fatalf("stored %+v after %+v: a full bucket is deleted, another kept", s, next)
		}
	}
}

// TestStoredReset checks TB.RESET in lease mode: with records the state
// is forgotten but the records are still counted, and the bucket refills
// from its room only when they lapse; with none the key is deleted.
func TestStoredReset(t *testing.T) {
	l := Limit{Capacity: 10, Rate: 1}
	s := leasedA()
	s.State.Tokens = 0
	if !s.Reset(lt0 + 100_000) {
		t.Fatal("Reset of a key with records: false, want true")
	}
	if d := s.Peek(l, 0, lt0+100_000); d.Remaining != 6 {
		t.Fatalf("after reset: %+v, want the room, 6", d)
	}
	if got := s.ExpireMillis(l, lt0+100_000); got != 1900 {
		t.Fatalf("ExpireMillis after reset = %d, want 1900 (the record's expiry)", got)
	}
	// At the lapse the room grows to 10, but tokens only come by refill:
	// 6 at the lapse, 7 a second later.
	if d := s.Peek(l, 0, lt0+lTTL+1_000_000); d.Remaining != 7 {
		t.Fatalf("1 s after the lapse: %+v, want 7", d)
	}
	if !s.Reset(lt0+lTTL) || s.Exists || s.Records != nil {
		t.Fatalf("Reset with the record lapsed: %+v, want the key deleted", s)
	}
	if s.Reset(lt0 + lTTL) {
		t.Fatal("Reset of no key: true")
	}
}

// propHolder is one holder in TestStoredLeaseNeverOverGrants, as
// internal/lease runs one instance's lease of one key: it spends only what
// Redis told it it holds, only before the record's expiry, and reports
// what it spent.
type propHolder struct {
	base   string
	gen    int
	epoch  int64
	tokens float64 // held and not spent
	spent  float64 // spent since the last report
	until  int64   // spends only before this
}

func (h *propHolder) name() string { return h.base + "-" + strconv.Itoa(h.gen) }

// propEvent is one grant, or a reset, in the order they happened.
type propEvent struct {
	at     int64
	amount float64
	reset  bool
}

// TestStoredLeaseNeverOverGrants drives random sequences of lease calls
// from several holders (epochs right, 0 and stale; calls whose reply is
// lost, some run by Redis later), holders spending, plain acquires and
// peeks, resets, limit changes and lapses, and checks after every step
// that the bucket plus the live records never exceed capacity and grow
// only by refill, and at the end that the grants (counted when holders
// spend them) over every window w are at most capacity + rate*w, plus a
// capacity per reset inside the window (TB.RESET fills a bucket).
func TestStoredLeaseNeverOverGrants(t *testing.T) {
	seqs, steps := 300, 400
	if testing.Short() {
		seqs = 60
	}
	r := rand.New(rand.NewPCG(0x6c65617365, 7))
	for seq := range seqs {
		runLeaseSequence(t, r, seq, steps)
	}
}

// leaseModel is the state of one sequence of TestStoredLeaseNeverOverGrants.
type leaseModel struct {
	t       *testing.T
	r       *rand.Rand
	seq     int
	s       Stored
	l       Limit
	maxCap  float64
	maxRate float64
	now     int64
	holders []*propHolder
	late    []lateCall
	events  []propEvent
	prevP   float64 // tokens + held after the last op
	prevAt  int64
	ttl     int64
}

// lateCall is a lease call whose reply was lost, not yet run by Redis.
type lateCall struct {
	cost float64
	c    LeaseCall
}

func runLeaseSequence(t *testing.T, r *rand.Rand, seq, steps int) {
	caps := []float64{10, 3.7, 100, 1e6, 1}
	rates := []float64{1, 0.5, 100, 1e-3, 1e4}
	m := &leaseModel{t: t, r: r, seq: seq, now: 1_000_000, ttl: int64(1+r.IntN(4)) * 500_000,
		l: Limit{Capacity: caps[r.IntN(len(caps))], Rate: rates[r.IntN(len(rates))]}}
	m.maxCap, m.maxRate = m.l.Capacity, m.l.Rate
	for i := range 1 + r.IntN(4) {
		m.holders = append(m.holders, &propHolder{base: "h" + strconv.Itoa(i)})
	}
	m.prevP, m.prevAt = m.l.Capacity, m.now
	for range steps {
		m.step()
	}
	m.checkWindows()
}

// potential is the bucket's tokens plus the live records' held at now.
func (m *leaseModel) potential() (tokens, heldSum float64) {
	f := m.s.refill(m.l, m.now)
	return f.tokens, sumHeld(f.live)
}

func (m *leaseModel) fail(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("sequence %d at %d (limit %+v): "+format, append([]any{m.seq, m.now, m.l}, args...)...)
}

// step moves time and runs one random operation.
func (m *leaseModel) step() {
	r := m.r
	switch n := r.IntN(10); {
	case n < 3:
	case n < 8:
		m.now += r.Int64N(m.ttl / 2)
	default:
		m.now += r.Int64N(3 * m.ttl)
	}
	changed := r.IntN(25) == 0
	if changed { // a limit change
		m.l = Limit{Capacity: m.l.Capacity * (0.5 + r.Float64()), Rate: m.l.Rate * (0.5 + r.Float64())}
		m.maxCap, m.maxRate = max(m.maxCap, m.l.Capacity), max(m.maxRate, m.l.Rate)
	}
	tokens, heldSum := m.potential()
	eps := 1e-9 * m.maxCap
	// A new limit refills the time since the stored state's ts up to the
	// new capacity (one bucket does the same), and a reset bucket is full
	// to its room under the limit of the next call: then the potential may
	// grow more.
	if bound := m.prevP + m.maxRate*float64(m.now-m.prevAt)/1e6 + eps; tokens+heldSum > bound && !changed {
		m.fail("tokens %v + held %v grew past %v since the last op", tokens, heldSum, bound)
	}
	before, reset := tokens+heldSum, false
	h := m.holders[r.IntN(len(m.holders))]
	switch n := r.IntN(100); {
	case n < 30:
		m.spend(h)
	case n < 60:
		m.lease(h, false)
	case n < 68:
		m.lease(h, true)
	case n < 76:
		if len(m.late) > 0 {
			i := r.IntN(len(m.late))
			lc := m.late[i]
			m.late = append(m.late[:i], m.late[i+1:]...)
			m.run(lc.cost, lc.c)
		}
	case n < 90:
		cost := float64(r.IntN(3))
		peek, twin := m.s.Peek(m.l, cost, m.now), m.clone()
		if d := m.s.Acquire(m.l, cost, m.now); d.Allowed {
			m.events = append(m.events, propEvent{at: m.now, amount: cost})
		} else if d != peek {
			m.fail("acquire %+v, peek %+v", d, peek)
		}
		if got := twin.Peek(m.l, cost, m.now); got != peek {
			m.fail("peek %+v, then %+v", peek, got)
		}
	case n < 93:
		m.s.Reset(m.now)
		m.events = append(m.events, propEvent{at: m.now, reset: true})
		reset = true
	default: // a peek at a later instant changes nothing
		twin := m.clone()
		m.s.Peek(m.l, 1, m.now+m.ttl)
		equalStored(m.t, m.s, twin)
	}
	tokens, heldSum = m.potential()
	if tokens+heldSum > before+eps && !reset {
		m.fail("tokens %v + held %v grew from %v in one op", tokens, heldSum, before)
	}
	if tokens+heldSum > max(m.l.Capacity, heldSum)+eps {
		m.fail("tokens %v + held %v exceed the capacity", tokens, heldSum)
	}
	if tokens < 0 || heldSum < 0 || math.IsNaN(tokens+heldSum) {
		m.fail("tokens %v, held %v", tokens, heldSum)
	}
	m.prevP, m.prevAt = tokens+heldSum, m.now
}

func (m *leaseModel) clone() Stored {
	c := m.s
	if m.s.Records != nil {
		c.Records = map[string]Record{}
		for k, v := range m.s.Records {
			c.Records[k] = v
		}
	}
	return c
}

// spend has h spend part of what it holds, if its record is still live.
func (m *leaseModel) spend(h *propHolder) {
	if h.tokens <= 0 || m.now >= h.until {
		return
	}
	x := h.tokens
	if m.r.IntN(2) == 0 {
		x = math.Ceil(h.tokens * m.r.Float64())
		x = min(x, h.tokens)
	}
	h.tokens -= x
	h.spent += x
	m.events = append(m.events, propEvent{at: m.now, amount: x})
}

// lease has h send a lease call: its report, what it gives back, and a
// want; its epoch sometimes 0 or stale. lost: the reply never comes, so h
// drops its lease and moves to a new record (internal/lease rule 2), and
// Redis runs the call now or later.
func (m *leaseModel) lease(h *propHolder, lost bool) {
	r := m.r
	c := LeaseCall{Holder: h.name(), Epoch: h.epoch, Consumed: h.spent, TTL: m.ttl,
		Want: []float64{0, 1, 3, m.l.Capacity / 10, m.l.Capacity}[r.IntN(5)]}
	switch r.IntN(10) {
	case 0:
		c.Epoch = 0
	case 1:
		c.Epoch = h.epoch - 1
	}
	if m.now >= h.until { // past its deadline: all of it goes back
		c.Returned, h.tokens = h.tokens, 0
	} else if r.IntN(4) == 0 {
		c.Returned = h.tokens * r.Float64()
		h.tokens -= c.Returned
	}
	cost := float64(r.IntN(3))
	if r.IntN(20) == 0 {
		cost = m.l.Capacity * 2
	}
	if lost {
		*h = propHolder{base: h.base, gen: h.gen + 1}
		if r.IntN(2) == 0 {
			m.run(cost, c)
		} else {
			m.late = append(m.late, lateCall{cost, c})
		}
		return
	}
	reply := m.run(cost, c)
	h.epoch, h.tokens, h.spent, h.until = reply.Epoch, reply.Held, 0, 0
	if reply.Epoch != 0 {
		h.until = m.now + m.ttl
	}
}

// run has Redis run a lease call now, counting the call's own cost.
func (m *leaseModel) run(cost float64, c LeaseCall) LeaseReply {
	reply := m.s.Lease(m.l, cost, m.now, c)
	if reply.Decision.Allowed && cost > 0 {
		m.events = append(m.events, propEvent{at: m.now, amount: cost})
	}
	if reply.Held < 0 || (reply.Epoch == 0) != (reply.Held == 0) {
		m.fail("reply %+v", reply)
	}
	return reply
}

// checkWindows checks every window of consecutive events.
func (m *leaseModel) checkWindows() {
	ev := m.events
	for i := range ev {
		sum, resets := 0.0, 0
		for j := i; j < len(ev); j++ {
			if ev[j].reset {
				resets++
				continue
			}
			sum += ev[j].amount
			w := float64(ev[j].at-ev[i].at) / 1e6
			bound := m.maxCap*float64(1+resets) + m.maxRate*w
			if sum > bound*(1+1e-9) {
				m.fail("%v granted between %d and %d (%d resets), more than %v", sum, ev[i].at, ev[j].at, resets, bound)
			}
		}
	}
}
