package leasesim

import (
	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/lease"
)

// Shape is how a key's demand is spread over the instances and in time.
type Shape uint8

const (
	// Uniform: every live instance gets the same share, steadily.
	Uniform Shape = iota
	// Zipf: instance i gets a share in proportion to 1/(i+1)^1.1, steadily:
	// a few hot instances and a long tail of cold ones.
	Zipf
	// Bursts: every instance the same share, in cycles of a calm 300 ms
	// at half the rate, a silence of 0.5 to 3.5 s and a burst of 200 ms
	// at the Demand level: leases fill, sit idle while the buckets refill
	// and records may lapse, then meet a burst.
	Bursts
)

func (s Shape) String() string {
	switch s {
	case Zipf:
		return "zipf"
	case Bursts:
		return "bursts"
	}
	return "uniform"
}

// Key is one bucket the instances share.
type Key struct {
	Name  string
	Limit bucket.Limit
	// Then, when set, is the limit the calls carry from the true instant
	// At on: a parameter change, which every lease of the old limit must
	// survive (lease rule 3).
	Then bucket.Limit
	At   int64
}

// limitAt is the limit a call at true instant t carries.
func (k Key) limitAt(t int64) bucket.Limit {
	if k.Then != (bucket.Limit{}) && t >= k.At {
		return k.Then
	}
	return k.Limit
}

// DefaultKeys are three buckets of different shapes: a plain one, one
// whose capacity is ten seconds of refill (big leases), and a tiny one
// whose leases are a single token (cost 2 is never answered by one).
var DefaultKeys = []Key{
	{Name: "k0", Limit: bucket.Limit{Capacity: 100, Rate: 100}},
	{Name: "k1", Limit: bucket.Limit{Capacity: 1000, Rate: 100}},
	{Name: "k2", Limit: bucket.Limit{Capacity: 10, Rate: 1}},
}

// TrapKeys are a plain bucket and one that refills in 100 ms, so that
// the leases of ten instances (a tenth of the capacity each) can hold as
// much as the bucket itself: where a lease spent on top of a refilled
// bucket shows most. The Bursts rows and the naive designs' tests use
// them.
var TrapKeys = []Key{
	DefaultKeys[0],
	{Name: "fast", Limit: bucket.Limit{Capacity: 100, Rate: 1000}},
}

// Config is one run. Times are microseconds. The zero value of each
// optional field is named in its comment.
type Config struct {
	Seed      uint64
	Instances int   // at the start, and slots for the whole run
	Duration  int64 // of the true clock
	Shape     Shape
	// Demand is each key's demand, in tokens a second, as a multiple of
	// its rate, over all instances.
	Demand float64
	Keys   []Key   // DefaultKeys when nil
	Net    Network // a zero Network delivers everything at once
	// Timeout is how long, on its own clock, an instance waits for a
	// reply before it counts the call failed (lease.Policy.Fail) and
	// denies its client (fail-closed); 50 ms (the --redis-timeout
	// default) when 0.
	Timeout int64
	// Crashes instances are killed at random instants between 10% and
	// 90% of the run (kill -9: nothing is given back), and each is
	// replaced, Restart later (500 ms when 0), by a new instance with a
	// new name in its slot.
	Crashes int
	Restart int64
	// Joins of the slots start empty and fill at random instants in the
	// first half of the run; meanwhile their share goes to the next slot.
	Joins int
	// ReuseNames: an instance that replaces a crashed one takes its name,
	// as a process restarted with the same instance id does; otherwise
	// every instance has a name of its own.
	ReuseNames bool
	// ClockSkew: each instance's clock runs at a rate drawn uniformly in
	// [1-ClockSkew, 1+ClockSkew] of the true clock's, times ClockRate (1
	// when 0; 0.5 is every clock 50% slow).
	ClockSkew float64
	ClockRate float64
	Policy    lease.Policy // lease.DefaultPolicy when zero

	// The naive designs, which the tests show fail.

	// IgnoreDeadline: instances spend a lease whatever its age, after
	// Redis may have let its record lapse (lease rule 1 broken).
	IgnoreDeadline bool
	// ForgetHeld: Redis refills buckets to capacity whatever the leases
	// hold (the twice-capacity trap).
	ForgetHeld bool
}

// withDefaults fills the zero optional fields.
func (c Config) withDefaults() Config {
	if c.Keys == nil {
		c.Keys = DefaultKeys
	}
	if c.Timeout == 0 {
		c.Timeout = 50_000
	}
	if c.Restart == 0 {
		c.Restart = 500_000
	}
	if c.ClockRate == 0 {
		c.ClockRate = 1
	}
	if c.Policy == (lease.Policy{}) {
		c.Policy = lease.DefaultPolicy
	}
	return c
}
