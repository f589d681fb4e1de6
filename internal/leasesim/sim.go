package leasesim

import (
	"math"
	"math/rand/v2"
	"sort"
	"strconv"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/lease"
)

// keyState is one key's demand and its checker.
type keyState struct {
	Key
	check checker
}

// sim is one run in progress.
type sim struct {
	cfg    Config
	rng    *rand.Rand
	loop   loop
	redis  redis
	keys   []*keyState
	slots  []*instance // nil: no instance there now (crashed, not yet joined)
	cum    []float64   // cumulative demand share of the slots
	phases []phase     // the demand's schedule, in order
	res    Result
}

// The Bursts shape's phases: calm, then silence, then a burst.
const (
	calmLen   = 300_000
	calmLevel = 0.5
	burstLen  = 200_000
)

// Run runs one simulation and returns what the checker found.
func Run(cfg Config) Result {
	cfg = cfg.withDefaults()
	s := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x1ea5e))}
	s.res.Config = cfg
	s.redis = newMirror()
	if cfg.ForgetHeld {
		s.redis = forgetful{newMirror()}
	}
	s.setShares()
	s.setPhases()
	s.slots = make([]*instance, cfg.Instances)
	for i := range cfg.Instances - cfg.Joins {
		s.join(i)
	}
	for i := cfg.Instances - cfg.Joins; i < cfg.Instances; i++ {
		s.loop.at(uniform(s.rng, 0, cfg.Duration/2), func() { s.join(i) })
	}
	for range cfg.Crashes {
		s.loop.at(uniform(s.rng, cfg.Duration/10, cfg.Duration*9/10), s.crash)
	}
	for _, k := range cfg.Keys {
		ks := &keyState{Key: k, check: checker{key: k}}
		s.keys = append(s.keys, ks)
		s.loop.at(s.nextArrival(ks, 0), func() { s.arrive(ks) })
	}
	s.loop.run(cfg.Duration)
	s.res.Events = s.loop.runs
	for _, k := range s.keys {
		s.res.Keys = append(s.res.Keys, k.result())
	}
	return s.res
}

// setShares sets the slots' cumulative shares of the demand.
func (s *sim) setShares() {
	sum := 0.0
	for i := range s.cfg.Instances {
		w := 1.0
		if s.cfg.Shape == Zipf {
			w = 1 / math.Pow(float64(i+1), 1.1)
		}
		sum += w
		s.cum = append(s.cum, sum)
	}
	for i := range s.cum {
		s.cum[i] /= sum
	}
}

// phase is a stretch of the true clock with a steady demand, a multiple
// of each key's rate.
type phase struct {
	start, end int64
	level      float64
}

// setPhases draws the demand's schedule: one steady phase, or for the
// Bursts shape cycles of a calm 300 ms at half the rate (which fills
// the leases without draining the buckets), a silence of 0.5 to 3.5 s
// (the leases sit idle, the buckets refill, records may lapse), and a
// 200 ms burst at the Demand level (which spends whatever is there).
func (s *sim) setPhases() {
	if s.cfg.Shape != Bursts {
		s.phases = []phase{{0, s.cfg.Duration, s.cfg.Demand}}
		return
	}
	for t := int64(100_000); t < s.cfg.Duration; {
		s.phases = append(s.phases, phase{t, t + calmLen, calmLevel})
		t += calmLen + uniform(s.rng, 500_000, 3_500_000)
		s.phases = append(s.phases, phase{t, t + burstLen, s.cfg.Demand})
		t += burstLen
	}
}

// join starts a new instance in slot i, with its own clock and name.
func (s *sim) join(i int) {
	rate := s.cfg.ClockRate * (1 + s.cfg.ClockSkew*(2*s.rng.Float64()-1))
	in := &instance{
		s:       s,
		name:    s.name(i),
		alive:   true,
		clock:   clock{start: s.loop.now, offset: uniform(s.rng, 1_000_000, 1_000_000_000), rate: rate},
		entries: make(map[string]*lease.Entry),
		pending: make(map[uint64]call),
	}
	s.res.Joined++
	s.slots[i] = in
	s.loop.at(s.loop.now+in.clock.trueDur(uniform(s.rng, 1, sweepEvery)), in.sweep)
}

// name is the name of the next instance to join slot i.
func (s *sim) name(i int) string {
	if s.cfg.ReuseNames {
		return "i" + strconv.Itoa(i)
	}
	return "i" + strconv.Itoa(i) + "." + strconv.Itoa(s.res.Joined)
}

// crash kills a random live instance (kill -9) and has a new one join
// its slot Restart later.
func (s *sim) crash() {
	i := s.rng.IntN(len(s.slots))
	in := s.live(i)
	if in == nil {
		return
	}
	in.alive = false
	s.res.Crashed++
	for j, x := range s.slots {
		if x == in {
			s.slots[j] = nil
			s.loop.at(s.loop.now+s.cfg.Restart, func() { s.join(j) })
		}
	}
}

// live returns the instance in slot i or, when it is empty, in the next
// slot that has one: a load balancer sends the share of a missing
// instance to another.
func (s *sim) live(i int) *instance {
	for k := range s.slots {
		if in := s.slots[(i+k)%len(s.slots)]; in != nil {
			return in
		}
	}
	return nil
}

// arrive is a client's call on key k: the ideal bucket sees it, an
// instance answers it, and the next arrival is scheduled.
func (s *sim) arrive(k *keyState) {
	cost := 1.0
	if s.rng.Float64() < 0.1 {
		cost = float64(uniform(s.rng, 2, 5))
	}
	s.res.Calls++
	k.check.demand(cost, s.loop.now)
	slot := sort.SearchFloat64s(s.cum, s.rng.Float64())
	if in := s.live(min(slot, len(s.slots)-1)); in != nil {
		in.take(k, cost)
	}
	if t := s.nextArrival(k, s.loop.now); t < s.cfg.Duration {
		s.loop.at(t, func() { s.arrive(k) })
	}
}

// meanCost is the mean of the calls' costs: 1, or 2 to 5 one time in ten.
const meanCost = 0.9 + 0.1*3.5

// nextArrival draws the next arrival after t on key k: Poisson at the
// rate of calls of the phase t is in (relative to the key's first rate) (memoryless, so a draw that leaves
// the phase starts afresh at the next one).
func (s *sim) nextArrival(k *keyState, t int64) int64 {
	for _, p := range s.phases {
		if t >= p.end {
			continue
		}
		t = max(t, p.start)
		perMicro := p.level * k.Limit.Rate / meanCost / 1e6
		if perMicro <= 0 {
			continue
		}
		if next := t + int64(math.Ceil(s.rng.ExpFloat64()/perMicro)); next < p.end {
			return next
		}
	}
	return math.MaxInt64
}

// serve is Redis running a call that reached it at the current instant,
// whether or not its sender still waits, and sending the reply back.
func (s *sim) serve(in *instance, id uint64, c call) {
	now := s.loop.now
	var r bucket.LeaseReply
	if c.kind == clientPlain {
		r.Decision = s.redis.acquire(c.key.Name, c.limit, c.cost, now)
	} else {
		q := c.req
		r = s.redis.lease(c.key.Name, q.Limit, q.Cost, now, bucket.LeaseCall{
			Holder: in.holder(q.Gen), Epoch: q.Epoch,
			Consumed: q.Consumed, Returned: q.Returned, Want: q.Want, TTL: s.cfg.Policy.TTL,
		})
	}
	if _, waiting := in.pending[id]; !waiting || !in.alive {
		s.res.Late++
	}
	d, lost := s.cfg.Net.leg(s.rng)
	if lost {
		s.res.Lost++
		return
	}
	s.loop.at(now+d, func() { in.reply(id, r, now) })
}
