package testkit

import (
	"sync/atomic"
	"time"

	"github.com/bucketd/bucketd/internal/clock"
)

// Clock is a monotonic clock that moves only when the test calls Advance,
// so refill, expiry and WITHINFO timings are exact and take no real time.
// Its Now method is a clock.Clock for shard.Config.Clock, and Base ties it
// to Unix time for what leaves a shard group (records, changes).
//
// It starts at 1 s (not 0, so that no time a test sees is the zero value
// of a time field). Safe for concurrent use: the shards read it from their
// own goroutines while the test advances it.
type Clock struct {
	micros atomic.Int64
	base   clock.Base
}

// startMicros is where every Clock starts.
const startMicros = 1_000_000

// NewClock returns a Clock at its start, whose Base maps that start to the
// wall time of the call: a plausible Unix time next to a real Redis's TIME.
func NewClock() *Clock {
	c := &Clock{base: clock.NewBase(startMicros, time.Now().UnixMicro())}
	c.micros.Store(startMicros)
	return c
}

// Now returns the current time in microseconds.
func (c *Clock) Now() int64 { return c.micros.Load() }

// Advance moves the clock forward by d, truncated to whole microseconds.
// A monotonic clock never goes back, so a negative d panics.
func (c *Clock) Advance(d time.Duration) {
	if d < 0 {
		panic("testkit: Clock.Advance with a negative duration; a monotonic clock never goes back")
	}
	c.micros.Add(int64(d / time.Microsecond))
}

// Base returns the Base that converts this clock's times to Unix time.
func (c *Clock) Base() clock.Base { return c.base }
