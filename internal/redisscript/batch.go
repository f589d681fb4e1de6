package redisscript

import (
	"context"
	"math"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
)

// Op is what a call does to its key.
type Op uint8

const (
	// Acquire spends Call.Cost tokens if the bucket holds them (TB.ACQUIRE).
	Acquire Op = iota
	// Peek answers what Acquire would, writing nothing (TB.PEEK).
	Peek
	// Put stores Call.State unless Redis holds a newer one (replication).
	Put
	// Del deletes the key unless Redis holds a state newer than Call.At
	// (replication).
	Del
	// Reset deletes the key with a plain DEL, not the script (TB.RESET in
	// store mode); its reply is the number of keys deleted.
	Reset
	// AcquireAll is one member of an all-or-nothing group (TB.MACQUIRE):
	// the script's "acquireall". The first call of a group carries the
	// group's size in Call.Group and the others follow it at once, with
	// Group 0. Every bucket is checked first, and only if every one holds
	// its cost does each spend it; a denied group writes nothing. Each
	// call's reply is that bucket's four numbers, as ParseDecision reads
	// them. A group is always one script command, never split.
	AcquireAll
	// Lease is a lease call (lease mode): the script's "lease", with
	// Call.Lease as its ARGV[6], Limit, Cost and At as for Acquire. Its
	// reply is read by ParseLease.
	Lease
	// LeaseReset is TB.RESET in lease mode: the script's "reset" as of
	// Call.At (or RedisTime), which keeps the key's live lease records
	// where a DEL would let the bucket grant their tokens again. Its reply
	// is 1 when the key existed, else 0, as DEL's.
	LeaseReset
)

// RedisTime, as Call.At of an Acquire or Peek, leaves the script's now
// empty so that it reads the Redis server's TIME. Any negative At does.
const RedisTime int64 = -1

// Call is one operation on one key. The script accepts integer times in
// [0, 2^53) µs (until the year 2255).
type Call struct {
	Op    Op
	Limit bucket.Limit // Acquire, Peek, Put (Put: for the key's expiry)
	Cost  float64      // Acquire, Peek
	// At is the call's now for Acquire and Peek (Unix microseconds, or
	// RedisTime), and the timestamp of a Del.
	At    int64
	State bucket.State // Put: the state, stamped State.Last (Unix µs)
	// Group is, on the first call of an all-or-nothing group (AcquireAll),
	// the number of calls in it (the calls added next are the others); 0
	// on every other call. bucketd gives a group's calls one Cost and one
	// At, so that they decide at one instant.
	Group int
	// Lease is a Lease call's own arguments (holder, epoch, report, want,
	// TTL); TTL is microseconds.
	Lease bucket.LeaseCall
}

// BatchKeys is how many calls share one script command on a standalone
// Redis. Redis pays its per-call cost (argument tables, the Lua call, the
// reply) once for all of them, about a third of its work per operation;
// the calls of one command decide at one Redis TIME, as a shard's batch
// decides at one instant.
const BatchKeys = 64

// KeysPerCall is how many calls one command carries on client: BatchKeys,
// or 1 on a Redis Cluster, where the keys of one command would have to
// share a hash slot.
func KeysPerCall(client redis.UniversalClient) int {
	if _, cluster := client.(*redis.ClusterClient); cluster {
		return 1
	}
	return BatchKeys
}

// The command words, the script, its SHA-1, the ops and the numkeys values
// as variables, so that commands carry pointers to them: go-redis writes a
// *string argument as the string, and a pointer goes into an interface
// without an allocation where a string value would be copied to the heap.
var (
	wordEvalSha = "evalsha"
	wordEval    = "eval"
	wordDel     = "del"
	scriptSHA   = bucket.ScriptSHA1
	scriptSrc   = bucket.Script
	opWords     = [...]string{Acquire: "acquire", Peek: "peek", Put: "put", Del: "del", AcquireAll: "acquireall",
		Lease: "lease", LeaseReset: "reset"}
	numKeys = func() []string {
		n := make([]string, BatchKeys+1)
		for i := range n {
			n[i] = strconv.Itoa(i)
		}
		return n
	}()
)

// Batch is the calls of one pipeline: Add them, Build the commands, Send
// them (or queue them in a pipeline of your own), and read each call's
// Reply. Reset starts the next batch and reuses the buffers. Not safe for
// concurrent use.
type Batch struct {
	prefix string
	buf    []byte  // every string of the batch, one after the other
	ends   []int32 // ends[k]: where string k ends in buf; string 0 is ""
	calls  []call
	// The strings of the last limit formatted, shared by the calls after
	// it with the same limit: most buckets share a few limits, and
	// formatting floats is the larger part of the work here.
	limit   bucket.Limit
	limitAt int32 // index of its capacity, rate at limitAt+1; 0: none

	// Made by Build, new each time (see the package doc).
	strs []string
	args []any
	cmds []*redis.Cmd
}

// call is one added call: the indexes in strs of its key and of ARGV[1],
// [2], [3], [5] and [6] (0: empty), and where Build put it.
type call struct {
	op    Op
	group int32 // Call.Group
	key   int32
	argv  [5]int32
	cmd   int32 // index in cmds
	elem  int32 // index in the command's array reply; -1: the whole reply
}

// Reset empties b for a new batch whose keys all get prefix.
func (b *Batch) Reset(prefix string) {
	b.prefix = prefix
	b.buf = b.buf[:0]
	b.ends = append(b.ends[:0], 0)
	b.calls = b.calls[:0]
	b.limitAt = 0
	b.strs, b.args, b.cmds = nil, nil, nil
}

// Add adds a call on key (the prefix goes before it). key is copied.
func (b *Batch) Add(key []byte, c Call) {
	b.buf = append(b.buf, b.prefix...)
	b.buf = append(b.buf, key...)
	b.add(c)
}

// AddString is Add for a key held as a string.
func (b *Batch) AddString(key string, c Call) {
	b.buf = append(b.buf, b.prefix...)
	b.buf = append(b.buf, key...)
	b.add(c)
}

// add formats c's arguments after its key, which is in buf already.
func (b *Batch) add(c Call) {
	r := call{op: c.Op, key: b.end()}
	switch c.Op {
	case Acquire, Peek, AcquireAll, Lease:
		r.argv[0], r.argv[1] = b.limitStrings(c.Limit)
		b.buf = strconv.AppendFloat(b.buf, c.Cost, 'g', -1, 64)
		r.argv[2] = b.end()
		if c.At >= 0 {
			b.buf = strconv.AppendInt(b.buf, c.At, 10)
			r.argv[3] = b.end()
		}
		if c.Op == AcquireAll && c.Group > 0 {
			r.group = int32(c.Group)
			b.buf = strconv.AppendInt(b.buf, int64(c.Group), 10)
			r.argv[4] = b.end()
		}
		if c.Op == Lease {
			b.appendLease(c.Lease)
			r.argv[4] = b.end()
		}
	case Put:
		r.argv[0], r.argv[1] = b.limitStrings(c.Limit)
		b.buf = strconv.AppendInt(b.buf, c.State.Last, 10)
		r.argv[3] = b.end()
		b.buf = strconv.AppendFloat(b.buf, c.State.Tokens, 'g', -1, 64)
		r.argv[4] = b.end()
	case Del:
		b.buf = strconv.AppendInt(b.buf, c.At, 10)
		r.argv[3] = b.end()
	case LeaseReset:
		if c.At >= 0 {
			b.buf = strconv.AppendInt(b.buf, c.At, 10)
			r.argv[3] = b.end()
		}
	}
	b.calls = append(b.calls, r)
}

// appendLease writes a lease call's ARGV[6]: "<holder> <epoch> <consumed>
// <returned> <want> <ttl_us>", the numbers in the shortest form that reads
// back as the same float64.
func (b *Batch) appendLease(l bucket.LeaseCall) {
	b.buf = append(b.buf, l.Holder...)
	b.buf = append(b.buf, ' ')
	b.buf = strconv.AppendInt(b.buf, l.Epoch, 10)
	for _, f := range [...]float64{l.Consumed, l.Returned, l.Want} {
		b.buf = append(b.buf, ' ')
		b.buf = strconv.AppendFloat(b.buf, f, 'g', -1, 64)
	}
	b.buf = append(b.buf, ' ')
	b.buf = strconv.AppendInt(b.buf, l.TTL, 10)
}

// end closes the string being written in buf and returns its index.
func (b *Batch) end() int32 {
	b.ends = append(b.ends, int32(len(b.buf)))
	return int32(len(b.ends) - 1)
}

// limitStrings returns the indexes of l's capacity and rate, formatting
// them unless the limit before had the same bits.
func (b *Batch) limitStrings(l bucket.Limit) (capacity, rate int32) {
	same := math.Float64bits(l.Capacity) == math.Float64bits(b.limit.Capacity) &&
		math.Float64bits(l.Rate) == math.Float64bits(b.limit.Rate)
	if b.limitAt == 0 || !same {
		b.buf = strconv.AppendFloat(b.buf, l.Capacity, 'g', -1, 64)
		b.limitAt = b.end()
		b.buf = strconv.AppendFloat(b.buf, l.Rate, 'g', -1, 64)
		b.end()
		b.limit = l
	}
	return b.limitAt, b.limitAt + 1
}

// Build makes the commands of the calls added since Reset, per calls to a
// script command at most (KeysPerCall; 1 to BatchKeys), each Reset a DEL of
// its own, and returns them. An all-or-nothing group is never split: it
// starts a command of its own unless it fits in the one being filled, and a
// group larger than per is a command by itself. They are EVALSHA; Send
// swaps in EVAL where Redis answers NOSCRIPT. The commands point into
// strings of their own, so the keys given to Add may change once Build
// returns.
func (b *Batch) Build(ctx context.Context, per int) []*redis.Cmd {
	per = min(max(per, 1), BatchKeys)
	b.format()
	// Room for every command: 7 arguments per call (key and ARGV) plus 3
	// per script command; a DEL's 2 and the command it may split off a run
	// fit in the 7 of its call.
	n := len(b.calls)
	b.args = make([]any, 0, 7*n+3*((n+per-1)/per))
	b.cmds = make([]*redis.Cmd, 0, len(b.calls))
	for i := 0; i < len(b.calls); {
		if b.calls[i].op == Reset {
			b.calls[i].cmd, b.calls[i].elem = int32(len(b.cmds)), -1
			start := len(b.args)
			b.args = append(b.args, &wordDel, &b.strs[b.calls[i].key])
			b.cmds = append(b.cmds, newCmd(ctx, b.args[start:], 1))
			i++
			continue
		}
		end := b.runEnd(i, per)
		b.cmds = append(b.cmds, b.script(ctx, i, end))
		i = end
	}
	return b.cmds
}

// runEnd returns where the script command that starts at call i ends: after
// at most per calls, before a Reset, and never inside a group; its first
// call or group is always in it.
func (b *Batch) runEnd(i, per int) int {
	end := i
	for end < len(b.calls) && b.calls[end].op != Reset {
		n := 1
		if g := int(b.calls[end].group); g > 1 {
			n = min(g, len(b.calls)-end) // a group cut short fails in the script
		}
		if end > i && end-i+n > per {
			break
		}
		end += n
	}
	return end
}

// format turns buf into the one string the commands point into.
func (b *Batch) format() {
	all := string(b.buf)
	b.strs = make([]string, len(b.ends))
	from := int32(0)
	for k, end := range b.ends {
		b.strs[k] = all[from:end]
		from = end
	}
}

// script returns the EVALSHA of calls from..end-1 and notes where their
// replies are.
func (b *Batch) script(ctx context.Context, from, end int) *redis.Cmd {
	n := end - from
	for j := from; j < end; j++ {
		b.calls[j].cmd, b.calls[j].elem = int32(len(b.cmds)), int32(j-from)
		if n == 1 {
			b.calls[j].elem = -1 // one key: the plain reply
		}
	}
	start := len(b.args)
	nk := &numKeys[min(n, BatchKeys)]
	if n > BatchKeys { // a group larger than a batch: rare, so formatted here
		s := strconv.Itoa(n)
		nk = &s
	}
	b.args = append(b.args, &wordEvalSha, &scriptSHA, nk)
	for j := from; j < end; j++ {
		b.args = append(b.args, &b.strs[b.calls[j].key])
	}
	for j := from; j < end; j++ {
		c := &b.calls[j]
		b.args = append(b.args, &b.strs[c.argv[0]], &b.strs[c.argv[1]], &b.strs[c.argv[2]],
			&opWords[c.op], &b.strs[c.argv[3]], &b.strs[c.argv[4]])
	}
	return newCmd(ctx, b.args[start:], 3)
}

// newCmd returns the command with args (clipped, so that appending to the
// batch's arguments never writes into it) and its first key at keyPos,
// where go-redis looks for the key to route by on a cluster.
func newCmd(ctx context.Context, args []any, keyPos int8) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args[:len(args):len(args)]...)
	cmd.SetFirstKeyPos(keyPos)
	return cmd
}
