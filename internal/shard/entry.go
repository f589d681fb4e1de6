package shard

import (
	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/clock"
)

// Kind is the algorithm a bucket follows: a key holds one kind for its
// whole life, and a request of the other kind gets decide.ErrWrongType.
type Kind uint8

const (
	// TokenBucket is a TB.* bucket: tokens refilled continuously at a rate.
	TokenBucket Kind = iota
	// GCRA is a CL.THROTTLE key: redis-cell's theoretical arrival time.
	GCRA
)

// entry is one live bucket: 48 bytes and no pointers. What it remembers
// depends on its kind, and only the methods in this file look at the
// kind: the rest of the package asks an entry whether it is full, how much
// it would lose if evicted, or for its Record, whatever it holds.
type entry struct {
	// last is a token bucket's time of its last spending call
	// (microseconds, shard clock), or a GCRA's theoretical arrival time
	// (nanoseconds, shard clock): the one number each kind keeps in time.
	last   int64
	tokens float64      // token bucket: tokens right after the last call
	limit  bucket.Limit // token bucket: the limit of the last spending call
	keyOff uint32       // the key is arena[keyOff : keyOff+keyLen]
	keyLen uint32
	fp     uint32 // the key hash's upper 32 bits: slot position and fingerprint
	kind   Kind
	dirty  bool // the key is in the shard's change set (replication)
	// restored: the state was loaded (Restore) and no call has decided
	// on it since, so a newer loaded copy may replace it. Every write of
	// a decision builds a fresh entry, which clears it.
	restored bool
	// phase differs from its shard's phase while the walk in progress
	// has yet to hand out the entry's state at the walk's cut, which is
	// then still the entry's state (walk.go); otherwise, and whenever no
	// walk is in progress, it equals the shard's.
	phase bool
}

func tokenEntry(s bucket.State, l bucket.Limit) entry {
	return entry{last: s.Last, tokens: s.Tokens, limit: l, kind: TokenBucket}
}

func gcraEntry(tatNanos int64) entry { return entry{last: tatNanos, kind: GCRA} }

// bucketState returns a token bucket's state.
func (e *entry) bucketState() bucket.State { return bucket.State{Tokens: e.tokens, Last: e.last} }

// tat returns a GCRA's theoretical arrival time in nanoseconds.
func (e *entry) tat() int64 { return e.last }

// full reports whether the entry holds no information any more at now
// (microseconds): a token bucket refilled to capacity, or a GCRA whose
// theoretical arrival time has passed. Either answers like a key never used.
func (e *entry) full(now int64) bool {
	if e.kind == GCRA {
		return e.tat() <= clock.Nanos(now)
	}
	return e.bucketState().IsFull(e.limit, now)
}

// missingShare ranks entries for eviction: the share of its capacity a
// token bucket is missing at now (0 when full, 1 when empty). A GCRA has no
// token count to compare and ranks in the middle unless it has expired.
func (e *entry) missingShare(now int64) float64 {
	switch {
	case e.full(now):
		return 0
	case e.kind == GCRA:
		return 0.5
	}
	return 1 - e.bucketState().TokensAt(e.limit, now)/e.limit.Capacity
}

// replicated reports whether the entry's changes are copied to Redis: the
// Lua script implements the token bucket only.
func (e *entry) replicated() bool { return e.kind == TokenBucket }

// record returns the entry as a Record in Unix time.
func (e *entry) record(key []byte, base clock.Base) Record {
	r := Record{Key: string(key), Kind: e.kind}
	if e.kind == GCRA {
		r.TAT = base.UnixNanos(e.tat())
		return r
	}
	r.State = bucket.State{Tokens: e.tokens, Last: base.UnixMicros(e.last)}
	r.Limit = e.limit
	return r
}

// Record is one bucket as it leaves the process or comes back in: in a
// snapshot file, or read from the Redis copy. Its times are Unix time, so a
// restarted process, whose monotonic clock starts again, counts the refill
// during the downtime.
type Record struct {
	Key   string
	Kind  Kind
	State bucket.State // TokenBucket: tokens, and Last in Unix microseconds
	Limit bucket.Limit // TokenBucket
	TAT   int64        // GCRA: theoretical arrival time in Unix nanoseconds
}

// entry returns r as an entry on the shard clock.
func (r *Record) entry(base clock.Base) entry {
	if r.Kind == GCRA {
		return gcraEntry(base.FromUnixNanos(r.TAT))
	}
	return tokenEntry(bucket.State{Tokens: r.State.Tokens, Last: base.FromUnixMicros(r.State.Last)}, r.Limit)
}
