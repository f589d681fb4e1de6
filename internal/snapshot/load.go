package snapshot

import (
	"math"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/clock"
	"github.com/bucketd/bucketd/internal/shard"
)

// loadRules is what Load does to each record of a CRC-valid file before
// the shards get it, so that a loaded bucket is one the commands could
// have left, and answers as they promise. It counts what it changed, for
// the load log line. The file's checks (ErrCorrupt) have passed already:
// what is left here is what a sound file can hold and this process must
// still not take as it is.
//
//   - Time later than the load instant. A snapshot written on a host
//     whose clock was ahead, or loaded after this host's clock stepped
//     back, can hold a last call after the load instant. A bucket never
//     refills before its last call (time that appears to go back adds no
//     tokens), so it would stay as it is until the clock got there, while
//     every answer's retry_after_ms promised the refill now. Such a last
//     call is set to the load instant: the bucket refills from now, and
//     the time between the snapshot and the load counts as none, the
//     least a load can assume. A CL.THROTTLE arrival time is later than
//     the snapshot by nature (it is how GCRA remembers a spent burst), so
//     it is moved back by how far the snapshot's own time is later than
//     the load instant instead, which keeps the wait it had when the
//     snapshot was taken.
//   - A capacity or rate above bucket.MaxValue (finite: the file refuses
//     infinite ones) is capped to it, tokens with it: no command accepts
//     more, and the next call brings its own limit anyway.
//   - A key longer than maxKeyBytes (--max-key-bytes, which may have been
//     lowered since the snapshot) is left out: every command refuses such
//     a key, so its bucket could never be used.
type loadRules struct {
	nowUnixMicros   int64 // the load instant
	takenUnixMicros int64 // when the snapshot was taken, from its header
	maxKeyBytes     int   // 0: no bound

	clamped  int // times moved to (or by) the load instant
	capped   int // limits capped to bucket.MaxValue
	longKeys int // records left out for their key
}

// admit applies the rules to r and reports whether it goes to the shards.
func (lr *loadRules) admit(r *shard.Record) bool {
	if lr.maxKeyBytes > 0 && len(r.Key) > lr.maxKeyBytes {
		lr.longKeys++
		return false
	}
	if r.Kind == shard.GCRA {
		now := clock.Nanos(lr.nowUnixMicros)
		if skew := clock.Nanos(lr.takenUnixMicros - lr.nowUnixMicros); skew > 0 && r.TAT > now {
			r.TAT = max(r.TAT-skew, now) // at now: the key is full, and Restore leaves it out
			lr.clamped++
		}
		return true
	}
	if r.State.Last > lr.nowUnixMicros {
		r.State.Last = lr.nowUnixMicros
		lr.clamped++
	}
	if l := &r.Limit; l.Capacity > bucket.MaxValue || l.Rate > bucket.MaxValue {
		l.Capacity, l.Rate = math.Min(l.Capacity, bucket.MaxValue), math.Min(l.Rate, bucket.MaxValue)
		r.State.Tokens = math.Min(r.State.Tokens, l.Capacity)
		lr.capped++
	}
	return true
}
