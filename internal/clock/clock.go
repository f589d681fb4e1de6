// Package clock is bucketd's one time base.
//
// Decisions run on a monotonic clock that counts microseconds from the
// process's start, so a wall-clock step never adds or removes tokens.
// Whatever leaves the process (the Redis copy, snapshot files) carries Unix
// time instead, so that another process, or this one after a restart, reads
// it right and counts the refill during a downtime. Base converts between
// the two; it is measured once, when the monotonic clock starts. No other
// package converts times by hand.
//
// Microseconds are the unit of the token bucket (the Lua script works in
// them); CL.THROTTLE's GCRA works in nanoseconds, and Nanos gives those.
package clock

import "time"

// Clock returns the current time in microseconds on a monotonic clock. It
// never goes backwards. bucketd's shards read it once per batch; tests pass
// a clock they move by hand.
type Clock func() int64

// Base ties a monotonic Clock to Unix time: Unix µs = monotonic µs + offset.
// The zero Base is the identity (a clock that counts Unix microseconds).
type Base struct{ offsetMicros int64 }

// Start returns a Clock that counts microseconds from now on the process's
// monotonic clock, and the Base that turns its times into Unix time.
func Start() (Clock, Base) {
	start := time.Now()
	c := func() int64 { return int64(time.Since(start) / time.Microsecond) }
	return c, Base{offsetMicros: start.UnixMicro()}
}

// NewBase returns the Base under which monotonic time mono is Unix time unix
// (both in microseconds): for a clock that a test moves by hand.
func NewBase(mono, unix int64) Base { return Base{offsetMicros: unix - mono} }

// UnixMicros converts a monotonic time to Unix microseconds.
func (b Base) UnixMicros(mono int64) int64 { return mono + b.offsetMicros }

// FromUnixMicros converts Unix microseconds to the monotonic clock. A time
// before the clock started comes out negative, which the math treats as
// long ago.
func (b Base) FromUnixMicros(unix int64) int64 { return unix - b.offsetMicros }

// UnixNanos converts a monotonic time in nanoseconds (a CL.THROTTLE
// arrival time) to Unix nanoseconds.
func (b Base) UnixNanos(monoNanos int64) int64 { return monoNanos + Nanos(b.offsetMicros) }

// FromUnixNanos converts Unix nanoseconds to monotonic nanoseconds.
func (b Base) FromUnixNanos(unixNanos int64) int64 { return unixNanos - Nanos(b.offsetMicros) }

// Nanos converts microseconds to nanoseconds.
func Nanos(micros int64) int64 { return micros * 1000 }
