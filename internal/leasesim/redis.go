package leasesim

import "github.com/bucketd/bucketd/internal/bucket"

// redis is what the simulated Redis does with the calls that reach it:
// the lease op and the plain acquire of the script, on one key. The true
// clock is Redis's clock.
type redis interface {
	lease(key string, l bucket.Limit, cost float64, now int64, c bucket.LeaseCall) bucket.LeaseReply
	acquire(key string, l bucket.Limit, cost float64, now int64) bucket.Decision
}

// mirror is the real thing: internal/bucket's Stored, the Go mirror of
// the script, one per key.
type mirror struct{ keys map[string]*bucket.Stored }

func newMirror() *mirror { return &mirror{keys: make(map[string]*bucket.Stored)} }

func (m *mirror) stored(key string) *bucket.Stored {
	s, ok := m.keys[key]
	if !ok {
		s = new(bucket.Stored)
		m.keys[key] = s
	}
	return s
}

func (m *mirror) lease(key string, l bucket.Limit, cost float64, now int64, c bucket.LeaseCall) bucket.LeaseReply {
	return m.stored(key).Lease(l, cost, now, c)
}

func (m *mirror) acquire(key string, l bucket.Limit, cost float64, now int64) bucket.Decision {
	return m.stored(key).Acquire(l, cost, now)
}

// forgetful is a naive Redis that does not count leases in its refill:
// it refills the bucket to the full capacity whatever the records hold,
// the twice-capacity trap of the spec. It is the mirror called with the
// capacity raised by what the records hold, so that the mirror's cap
// (capacity minus held) comes out at the capacity itself.
type forgetful struct{ *mirror }

func (f forgetful) lease(key string, l bucket.Limit, cost float64, now int64, c bucket.LeaseCall) bucket.LeaseReply {
	l.Capacity += f.stored(key).Held(now)
	return f.mirror.lease(key, l, cost, now, c)
}

func (f forgetful) acquire(key string, l bucket.Limit, cost float64, now int64) bucket.Decision {
	l.Capacity += f.stored(key).Held(now)
	return f.mirror.acquire(key, l, cost, now)
}
