// Package decide is the vocabulary between bucketd's protocol front and the
// stores that keep buckets: what a client command asks of one bucket
// (Request), what the store answers (Answer), the errors an answer can
// carry, and the counters every store keeps (Stats).
//
// Two stores speak it: the in-memory shards (internal/shard) and the Redis
// store (internal/redisstore). The protocol front (internal/resp) declares
// the interface it calls them through in its own package, in these terms,
// so neither store depends on the other. Maintenance (loading, dumping,
// collecting changes) is not part of this vocabulary: it belongs to the
// store that has it.
package decide

import (
	"errors"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/lease"
)

// Kind says what a Request does to its bucket. What each kind is, as far
// as a store needs to know besides how to answer it, is its Spec: the
// shards and the Redis store consult that one table instead of switching
// on the kind, so a new kind is one constant, one row, and one function
// in each store that answers it.
type Kind uint8

const (
	// Acquire spends Request.Cost tokens if the bucket holds them (TB.ACQUIRE).
	Acquire Kind = iota
	// Peek answers what Acquire would, changing nothing (TB.PEEK).
	Peek
	// Reset forgets the bucket (TB.RESET); Answer.Removed says whether it existed.
	Reset
	// Throttle runs redis-cell's CL.THROTTLE with Request.Quota.
	Throttle
	// LeaseTake is a TB.ACQUIRE in lease mode, at the shards: answered
	// from this instance's lease of the bucket, or with the call to send
	// Redis in Request.Lease (internal/lease).
	LeaseTake
	// LeaseApply hands the shards Redis's reply to a lease call
	// (Request.Lease.Reply); LeaseFail says the call got none.
	LeaseApply
	LeaseFail
	// LeaseReset tells the shards a TB.RESET of the key went to Redis:
	// the denial the entry remembers ends.
	LeaseReset
	// Lease is the lease call itself, on Redis (Request.Lease.Call),
	// answered with Request.Lease.Reply and the call's decision.
	Lease
	// NumKinds is the number of kinds: the length of tables indexed by Kind.
	NumKinds
)

// Counts says under which counter of Stats a kind's answers are counted.
type Counts uint8

const (
	CountsDecisions Counts = iota // Allowed or Denied, by the answer's decision
	CountsPeeks                   // Peeks
	CountsResets                  // Resets, when the bucket existed
	CountsNothing                 // not a client's request: not counted
)

// Spec is what one Kind is, for every store.
type Spec struct {
	Name   string // lower case, for errors and tables
	Counts Counts
	// Changes: the request may change its bucket (what replication and
	// change tracking follow).
	Changes bool
	// GCRA: the request works on a CL.THROTTLE state (a theoretical
	// arrival time) rather than a token bucket; a key holds one or the
	// other, and a request of the other gets ErrWrongType.
	GCRA bool
	// Scripted: the Lua script answers it on Redis (store mode); a store
	// without it answers ErrUnsupported.
	Scripted bool
	// Policy: when the store cannot answer in time (Redis down), the
	// fail-open or fail-closed policy answers it; otherwise it gets
	// ErrNotApplied, since the client cannot be told it happened.
	Policy bool
}

// specs is the table of every kind; init checks it is complete.
var specs = [NumKinds]Spec{
	Acquire:  {Name: "acquire", Counts: CountsDecisions, Changes: true, Scripted: true, Policy: true},
	Peek:     {Name: "peek", Counts: CountsPeeks, Scripted: true, Policy: true},
	Reset:    {Name: "reset", Counts: CountsResets, Changes: true, Scripted: true},
	Throttle: {Name: "throttle", Counts: CountsDecisions, Changes: true, GCRA: true},
	// In lease mode the client's decision is counted once, where it is
	// made: at the shards for a local answer, by the lease store for an
	// answer from Redis (LeaseTake counts nothing itself).
	LeaseTake:  {Name: "lease-take", Counts: CountsNothing},
	LeaseApply: {Name: "lease-apply", Counts: CountsNothing},
	LeaseFail:  {Name: "lease-fail", Counts: CountsNothing},
	LeaseReset: {Name: "lease-reset", Counts: CountsNothing},
	// Lease: the script's lease op answers it (a Redis store answers it
	// only in lease mode, Config.Leases, else ErrUnsupported); it changes
	// the bucket; without a reply in time the call's own decision is the
	// fail policy's, as an acquire's, and its exchange stays unreplied.
	Lease: {Name: "lease", Counts: CountsNothing, Changes: true, Scripted: true, Policy: true},
}

func init() {
	for k, s := range specs {
		if s.Name == "" {
			panic("decide: kind " + string(rune('0'+k)) + " has no Spec")
		}
	}
}

// Spec returns what k is.
func (k Kind) Spec() *Spec { return &specs[k] }

// Request is one client operation on one bucket. Key is only read until the
// call that answers it returns, so it may point into a connection's read
// buffer; a store that keeps the key copies it.
type Request struct {
	Key   []byte
	Limit bucket.Limit // Acquire, Peek and the lease kinds
	Cost  float64      // Acquire, Peek and the lease kinds
	Quota bucket.GCRA  // Throttle
	Kind  Kind
	// Lease is the lease kinds' exchange, owned by whoever adds the
	// request (a pointer, so that other requests carry 8 bytes for it).
	Lease *LeaseOp
}

// LeaseOp is what lease mode's requests carry besides the common fields.
type LeaseOp struct {
	// Outcome, set by the shards at LeaseTake: answered (lease.Local), or
	// Redis must answer (lease.Ask with Call, or lease.Plain or lease.Cold).
	Outcome lease.Outcome
	// Call is the lease call: set by the shards at LeaseTake (lease.Ask),
	// read by the Redis store for Lease.
	Call lease.Request
	// Reply is Redis's answer to Call: set by the Redis store for Lease,
	// read by the shards at LeaseApply. Replied says Redis did answer:
	// without it the call's decision is the fail policy's and Reply means
	// nothing.
	Reply   lease.Reply
	Replied bool
}

// Answer is the answer to one Request. When Err is set the other fields
// mean nothing and the client gets the error instead.
type Answer struct {
	Decision bucket.Decision       // Acquire and Peek
	Throttle bucket.ThrottleResult // Throttle
	Removed  bool                  // Reset: the bucket existed and was removed
	Err      error                 // nil, or one of the errors below
}

// The errors an Answer can carry. The protocol front maps each to its reply.
var (
	// ErrWrongType: the key holds a CL.THROTTLE state and the request is a
	// token-bucket one, or the other way round. Nothing was changed.
	ErrWrongType = errors.New("decide: the key holds the other kind of bucket")
	// ErrNotApplied: the store could not tell whether a TB.RESET took
	// effect (Redis did not answer in time).
	ErrNotApplied = errors.New("decide: the store did not answer; the reset may not have been applied")
	// ErrUnsupported: the store has no implementation of the request's
	// kind (CL.THROTTLE in Redis store mode).
	ErrUnsupported = errors.New("decide: not supported by this store")
	// ErrCrossSlot: requests that must be answered as one (an
	// all-or-nothing group, TB.MACQUIRE, or a transaction, RunIsolated)
	// have keys in different hash slots of a Redis Cluster (Redis store
	// mode), so no one call can hold them. Nothing took effect: a group's
	// every request carries it; RunIsolated returns it with no answers.
	// Keys that share a {hash tag} share a slot.
	ErrCrossSlot = errors.New("decide: the keys hash to different Redis Cluster slots")
)

// Stats are the counters every store keeps, read from atomics without
// stopping it. A store leaves at zero what it does not have (the Redis
// store has no shards, no sweeper and no tables in bucketd's memory).
type Stats struct {
	Buckets    int64 // live buckets (DBSIZE)
	Allowed    int64 // acquires and throttles allowed
	Denied     int64 // acquires and throttles denied
	Peeks      int64 // peeks answered
	Resets     int64 // buckets removed by TB.RESET
	Expired    int64 // full buckets deleted by the sweeper
	Evicted    int64 // buckets evicted to stay within --max-buckets
	Shards     int64 // shards (0: the store keeps no buckets in memory)
	QueueDepth int64 // work waiting for the store right now
	// TableBytes is the memory the bucket tables hold outside the Go heap,
	// so that INFO can add it to the heap.
	TableBytes int64
}
