package decide

// Limiter is a bucket store as the protocol front uses it: a Caller per
// connection, and the counters INFO and DBSIZE report. The in-memory shards
// (shard.Group, through shard.Memory) and the Redis store
// (internal/redisstore) implement it; neither imports the protocol front,
// as database/sql/driver's drivers do not import database/sql.
type Limiter interface {
	NewCaller() Caller
	Stats() Stats
}

// Caller runs one connection's bucket requests. Add queues a request; Run
// answers every request queued since the last Run, in order (requests on
// one key take effect in the order they were added), and returns the
// answers, valid until the next Run. A Caller is used by one goroutine.
//
// AddAll queues Acquire requests on distinct keys with one cost as one
// all-or-nothing group (TB.MACQUIRE, a policy with several limits): either
// every bucket holds the cost and each gives it, or no bucket changes.
// Each request gets its bucket's answer (allowed: that bucket alone held
// the cost); the group was allowed when every answer is. A group counts as
// one decision in Stats. When the store cannot answer the group as one
// (store mode on a Redis Cluster, keys in several hash slots) every
// request gets decide.ErrCrossSlot. AddAll does not keep reqs.
//
// RunIsolated is Run for EXEC: it answers the queued requests as one unit,
// so that no request of another Caller is answered between the first and
// the last of them, whatever buckets they touch. When the store cannot
// answer them as one unit (store mode on a Redis Cluster, keys in several
// hash slots) it answers none and returns ErrCrossSlot.
type Caller interface {
	Add(r Request)
	AddAll(reqs []Request)
	Run() ([]Answer, error)
	RunIsolated() ([]Answer, error)
}
