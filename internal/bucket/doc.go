// Package bucket is the token-bucket math of bucketd: pure functions over a
// small pointer-free State value. It never reads a clock, starts goroutines,
// locks, logs or does I/O; time is passed in as an argument.
//
// Units: time is int64 microseconds on a clock the caller chooses (bucketd's
// shards use a monotonic clock; the Lua script on Redis uses Unix time), and
// tokens, capacity, rate and cost are float64, with rate in tokens per second.
// Microseconds are the unit because they are what the Redis Lua script works
// in: the same sequence of float64 operations on the same integers gives the
// same bits in Go and in Lua, which the differential test relies on.
//
// Invariants every function keeps, for any input the callers validate
// (0 < capacity, rate <= 1e15; 0 <= cost <= 1e15):
//   - 0 <= Tokens <= capacity of the last call, never NaN;
//   - refill is continuous: Last moves to the call's time and the fraction of
//     a token earned so far stays in Tokens, so frequent callers are never
//     starved by rounding;
//   - a time earlier than Last counts as no elapsed time and does not move
//     Last back, so a clock that goes backwards never adds tokens.
package bucket
