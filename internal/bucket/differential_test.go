package bucket_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/redisscript"
	"github.com/bucketd/bucketd/internal/redistest"
)

var (
	diffSeed = flag.Uint64("bucket.diffseed", 0, "seed of TestDifferentialRedis (0: a new one, logged)")
	diffOps  = flag.Int("bucket.diffops", 50000, "operations of TestDifferentialRedis (under -short a tenth, unless given)")
)

// diffTotal is the operations of TestDifferentialRedis (the batch and
// group tests run a share of them): -bucket.diffops, whose default the
// inner loop (-short) cuts to a tenth; the full suite runs them all.
func diffTotal() int {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "bucket.diffops" })
	if testing.Short() && !given {
		return *diffOps / 10
	}
	return *diffOps
}

type diffKind int

const (
	diffAcquire diffKind = iota
	diffPeek
	diffPut
	diffDel
)

func (k diffKind) String() string {
	return [...]string{"acquire", "peek", "put", "del"}[k]
}

// diffOp is one random operation.
type diffOp struct {
	kind  diffKind
	key   string
	limit bucket.Limit
	cost  float64      // acquire, peek
	now   int64        // acquire, peek: the call's time; put, del: the ts
	put   bucket.State // put: the state to store (put.Last == now)
}

// diffWant is what the Go side says about one operation.
type diffWant struct {
	decision bucket.Decision // acquire, peek
	applied  int64           // put, del: 1 or 0
	state    bucket.State    // stored state after the op
	exists   bool            // whether a state is stored after the op
	wrote    bool            // the op stored a state (and so set PEXPIRE)
	ttl      int64           // the PEXPIRE the op set, when wrote
}

func (o diffOp) String() string {
	switch o.kind {
	case diffPut:
		return fmt.Sprintf("put %s cap=%v rate=%v ts=%d tokens=%v", o.key, o.limit.Capacity, o.limit.Rate, o.now, o.put.Tokens)
	case diffDel:
		return fmt.Sprintf("del %s ts=%d", o.key, o.now)
	}
	return fmt.Sprintf("%s %s cap=%v rate=%v cost=%v now=%d", o.kind, o.key, o.limit.Capacity, o.limit.Rate, o.cost, o.now)
}

// diffModel is the Go side: key → State, managed exactly like
// internal/shard/owner.go manages its map.
type diffModel map[string]bucket.State

// apply updates the model with o and returns the expected outcome.
func (m diffModel) apply(o diffOp) diffWant {
	var w diffWant
	st, ok := m[o.key]
	switch o.kind {
	case diffAcquire:
		next, d := bucket.Acquire(st, ok, o.limit, o.cost, o.now)
		w.decision = d
		if o.cost != 0 { // cost 0 is a peek: nothing stored, nothing created
			if next.Tokens >= o.limit.Capacity { // the shard's "full": delete
				delete(m, o.key)
			} else {
				m[o.key] = next
				w.wrote, w.ttl = true, ttlMillis(o.limit, next, o.now)
			}
		}
	case diffPeek:
		w.decision = bucket.Peek(st, ok, o.limit, o.cost, o.now)
	case diffPut:
		if ok && st.Last > o.now {
			break // an older state never overwrites a newer one
		}
		w.applied = 1
		if o.put.Tokens >= o.limit.Capacity {
			delete(m, o.key)
		} else {
			m[o.key] = o.put
			w.wrote, w.ttl = true, ttlMillis(o.limit, o.put, o.now)
		}
	case diffDel:
		if ok && st.Last > o.now {
			break
		}
		w.applied = 1
		delete(m, o.key)
	}
	w.state, w.exists = m[o.key]
	return w
}

// diffGen draws random operations.
type diffGen struct {
	r      *rand.Rand
	keys   []string
	limits map[string]bucket.Limit // each key's usual limit
	now    int64
	model  diffModel
}

// pick returns fixed[i] for a draw i < len(fixed) out of slots, and for
// the other draws a random value from 1e-3 to 1e12 with any fraction.
func (g *diffGen) pick(slots int, fixed ...float64) float64 {
	if i := g.r.IntN(slots); i < len(fixed) {
		return fixed[i]
	}
	return math.Pow(10, g.r.Float64()*15-3)
}

func (g *diffGen) capacity() float64 {
	return g.pick(10, 1e-3, 1e12, 1e15, 0.5, 1, 10, 3.7)
}

func (g *diffGen) rate() float64 {
	// 1e-300: reset_after_ms and retry_after_ms saturate.
	return g.pick(12, 1e-3, 1e12, 1e15, 0.5, 1, 1e-300, 1e-9, 123.456)
}

func (g *diffGen) cost(capacity float64) float64 {
	var c float64
	switch g.r.IntN(12) {
	case 0, 1:
		c = 0
	case 2, 3:
		c = 1
	case 4:
		c = g.r.Float64() * 2 // fractional
	case 5:
		c = capacity
	case 6:
		c = capacity * (1 + g.r.Float64()) // more than capacity
	case 7:
		c = capacity * g.r.Float64()
	case 8:
		c = 1e-4
	case 9:
		c = math.Pow(10, g.r.Float64()*18-3)
	default:
		c = float64(1 + g.r.IntN(5))
	}
	return min(c, 1e15) // the protocol's bound
}

// expirySlackMs widens the window in which a key with a tiny PEXPIRE (2 ms,
// the least the script sets) may be gone by the time the test reads it:
// TIME, which measures the window, and Redis's expiry checks round to the
// millisecond separately, so a key can be gone at a measured slack one or
// two milliseconds below its TTL (seen on a loaded machine: 1 run in ~20).
// Only keys that are gone get this allowance; a key still there is
// compared in full.
const expirySlackMs = 2

// step moves the clock: often not at all, often a little, sometimes far,
// and sometimes backwards.
func (g *diffGen) step() int64 {
	switch n := g.r.IntN(40); {
	case n < 10:
		return 0
	case n < 20:
		return 1 + g.r.Int64N(1000) // up to 1 ms
	case n < 26:
		return 1000 + g.r.Int64N(1_000_000) // up to 1 s
	case n < 29:
		return g.r.Int64N(3_600_000_000) // up to 1 h
	case n < 30:
		return g.r.Int64N(86_400_000_000) // up to 1 day
	case n < 36:
		return -(1 + g.r.Int64N(2_000_000)) // back up to 2 s
	default:
		return -g.r.Int64N(1000)
	}
}

// advance moves the clock by a step, staying below 2^53 µs.
func (g *diffGen) advance() {
	if step := g.step(); g.now+step < maxMicros {
		g.now += step
	} else {
		g.now -= g.r.Int64N(2_000_000) // the script takes times below 2^53 µs
	}
}

// limit returns key's usual limit, which sometimes changes.
func (g *diffGen) limit(key string) bucket.Limit {
	l, ok := g.limits[key]
	if !ok || g.r.IntN(7) == 0 { // keys sometimes change capacity and rate
		l = bucket.Limit{Capacity: g.capacity(), Rate: g.rate()}
		g.limits[key] = l
	}
	return l
}

func (g *diffGen) next() diffOp {
	g.advance()
	key := g.keys[g.r.IntN(len(g.keys))]
	l := g.limit(key)
	o := diffOp{key: key, limit: l, now: g.now}
	switch n := g.r.IntN(100); {
	case n < 72:
		o.kind, o.cost = diffAcquire, g.cost(l.Capacity)
	case n < 86:
		o.kind, o.cost = diffPeek, g.cost(l.Capacity)
	case n < 94:
		o.kind = diffPut
		o.now = g.guardTS(key)
		tokens := l.Capacity * g.r.Float64()
		switch g.r.IntN(6) {
		case 0:
			tokens = 0
		case 1:
			tokens = l.Capacity // full: deletes
		case 2:
			tokens = l.Capacity * 1.5
		}
		o.put = bucket.State{Tokens: tokens, Last: o.now}
	default:
		o.kind = diffDel
		o.now = g.guardTS(key)
	}
	g.model.apply(o) // keeps guardTS's choices relevant; the check recomputes
	return o
}

// guardTS picks the ts of a put or del: around now, sometimes older and
// sometimes exactly the stored ts, so the newer-wins guard is exercised.
func (g *diffGen) guardTS(key string) int64 {
	if st, ok := g.model[key]; ok && g.r.IntN(4) == 0 {
		return st.Last + g.r.Int64N(3) - 1 // one less, equal or one more
	}
	return max(0, g.now-3_000_000+g.r.Int64N(4_000_000))
}

// call is o as bucketd's Redis client sends it.
func (o diffOp) call() redisscript.Call {
	switch o.kind {
	case diffPeek:
		return redisscript.Call{Op: redisscript.Peek, Limit: o.limit, Cost: o.cost, At: o.now}
	case diffPut:
		return redisscript.Call{Op: redisscript.Put, Limit: o.limit, State: o.put}
	case diffDel:
		return redisscript.Call{Op: redisscript.Del, At: o.now}
	}
	return redisscript.Call{Op: redisscript.Acquire, Limit: o.limit, Cost: o.cost, At: o.now}
}

// commands encodes ops with bucketd's Redis client (internal/redisscript),
// per keys to a script command: 1 as on a Redis Cluster, or up to
// redisscript.BatchKeys as on a standalone Redis.
func commands(ctx context.Context, ops []diffOp, per int) []*redis.Cmd {
	var b redisscript.Batch
	b.Reset("")
	for _, o := range ops {
		b.AddString(o.key, o.call())
	}
	return b.Build(ctx, per)
}

// maxMicros bounds the times the script accepts (2^53 µs, the year 2255).
// From Redis TIME today, a million operations move the clock about 2e15 µs.
const maxMicros = 1 << 53

// diffStats are logged so a reader can see what the random run covered.
type diffStats struct {
	kinds                       [4]int
	allowed, denied, tooBig     int
	saturated, deletes, skipped int
	backwards, expired          int
	ttls, exactTTL, maxSlackMs  int64
}

// TestDifferentialRedis runs the same random operations through the Go math
// and through the Lua script on a real redis-server, with the same explicit
// timestamps, and demands equal replies and equal stored state after every
// operation: the tokens field read back bit for bit, ts, whether the key
// exists, and the key's PTTL.
//
// Each operation runs in the batch's MULTI/EXEC as
//
//	TIME, EVALSHA, HGETALL, PTTL, PERSIST, TIME
//
// PERSIST keeps Redis from expiring the key later on its own clock while the
// test's clock, which jumps and goes backwards, says the bucket is not full
// yet. It also proves that peeks and skipped puts set no expiry: their PTTL
// stays -1. The two TIMEs bound the real time the commands took: Redis
// counts a PEXPIRE from its clock in whole milliseconds, so PTTL may be
// below the TTL by the milliseconds that passed, and a key whose TTL is
// shorter than that may be gone already (then the Go map forgets it too,
// as Redis did).
// startDifferential starts a redis-server with the script loaded and a
// generator of random operations on 8 keys named prefix:{i}, starting at
// Redis's clock; stream tells the random streams of two tests apart.
func startDifferential(t *testing.T, prefix string, stream uint64) (*redis.Client, *diffGen, uint64) {
	t.Helper()
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	if sha, err := rdb.ScriptLoad(ctx, bucket.Script).Result(); err != nil || sha != bucket.ScriptSHA1 {
		t.Fatalf("SCRIPT LOAD = %q, %v; want %s", sha, err, bucket.ScriptSHA1)
	}
	start, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	seed := *diffSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -bucket.diffseed=%d)", seed, seed)
	g := &diffGen{
		r:      rand.New(rand.NewPCG(seed, stream)),
		limits: map[string]bucket.Limit{},
		now:    start.UnixMicro(),
		model:  diffModel{},
	}
	for i := range 8 {
		g.keys = append(g.keys, fmt.Sprintf("%s:{%d}", prefix, i))
	}
	return rdb, g, seed
}

func TestDifferentialRedis(t *testing.T) {
	t.Parallel() // its own redis-server
	ctx := context.Background()
	rdb, g, seed := startDifferential(t, "diff", 0x6275636b657464)
	check := diffModel{} // the Go side, as Redis should hold it

	const batch = 250
	var st diffStats
	mismatches, total := 0, diffTotal()
	prevNow := g.now
	for done := 0; done < total; done += batch {
		ops := make([]diffOp, min(batch, total-done))
		type cmds struct {
			before, past *redis.TimeCmd
			eval, pttl   *redis.Cmd
			hash         *redis.MapStringStringCmd
			persist      *redis.BoolCmd
		}
		got := make([]cmds, len(ops))
		for j := range ops {
			ops[j] = g.next()
		}
		evals := commands(ctx, ops, 1) // one EVALSHA per op
		pipe := rdb.TxPipeline()
		for j, o := range ops {
			got[j].before = pipe.Time(ctx)
			got[j].eval = evals[j]
			_ = pipe.Process(ctx, evals[j]) // only queues; never fails
			got[j].hash = pipe.HGetAll(ctx, o.key)
			got[j].pttl = pipe.Do(ctx, "PTTL", o.key)
			got[j].persist = pipe.Persist(ctx, o.key)
			got[j].past = pipe.Time(ctx)
		}
		// Errors are looked at per command below; Exec's is the first of them.
		_, _ = pipe.Exec(ctx)

		for j, o := range ops {
			i := done + j
			report := func(format string, args ...any) {
				mismatches++
				if mismatches <= 20 {
					t.Errorf("op %d (%v): "+format, append([]any{i, o}, args...)...)
				}
			}
			w := check.apply(o)
			c := got[j]
			st.kinds[o.kind]++
			if o.now < prevNow {
				st.backwards++
			}
			prevNow = o.now

			// The reply.
			v, err := c.eval.Result()
			if err != nil {
				report("script error: %v", err)
				continue
			}
			switch o.kind {
			case diffAcquire, diffPeek:
				checkReply(v, w.decision, report)
				switch {
				case w.decision.Allowed:
					st.allowed++
				case w.decision.RetryAfterMs == -1:
					st.tooBig++
				default:
					st.denied++
				}
				if w.decision.ResetAfterMs == math.MaxInt64 || w.decision.RetryAfterMs == math.MaxInt64 {
					st.saturated++
				}
			default:
				if v != w.applied {
					report("reply %v, want %d", v, w.applied)
				}
				if w.applied == 0 {
					st.skipped++
				}
			}

			// Gone already on Redis's clock? Only possible for a TTL
			// shorter than the milliseconds the commands took.
			h, hErr := c.hash.Result()
			pttl, pErr := c.pttl.Int64()
			persisted, sErr := c.persist.Result()
			if hErr != nil || pErr != nil || sErr != nil {
				report("HGETALL, PTTL, PERSIST: %v, %v, %v", hErr, pErr, sErr)
				continue
			}
			slack := c.past.Val().UnixMilli() - c.before.Val().UnixMilli()
			if w.wrote && w.ttl <= slack+expirySlackMs && (len(h) == 0 || pttl == -2 || !persisted) {
				st.expired++
				if len(h) != 0 {
					compareState(h, w, report)
				}
				delete(check, o.key)
				continue
			}

			// The stored state.
			if !w.exists {
				st.deletes++
			}
			compareState(h, w, report)

			// The expiry.
			switch {
			case !w.exists:
				if pttl != -2 {
					report("PTTL %d, want -2 (no key)", pttl)
				}
			case !w.wrote:
				if pttl != -1 {
					report("PTTL %d, want -1: the op must not touch the expiry", pttl)
				}
			default:
				st.ttls++
				if pttl > w.ttl || pttl < w.ttl-slack {
					report("PTTL %d, want %d (%d ms less allowed)", pttl, w.ttl, slack)
				}
				st.maxSlackMs = max(st.maxSlackMs, w.ttl-pttl)
				if pttl == w.ttl {
					st.exactTTL++
				}
			}
		}
		g.model = maps.Clone(check)
	}
	t.Logf("kinds: %d acquire, %d peek, %d put, %d del; %d allowed, %d denied, %d cost>capacity, "+
		"%d saturated, %d skipped put/del, %d ops with no key after, %d with time going back; "+
		"%d TTLs set, %d read back exactly, the others at most %d ms below; %d keys expired by Redis within their op",
		st.kinds[0], st.kinds[1], st.kinds[2], st.kinds[3], st.allowed, st.denied, st.tooBig,
		st.saturated, st.skipped, st.deletes, st.backwards, st.ttls, st.exactTTL, st.maxSlackMs, st.expired)
	t.Logf("%d operations, %d mismatches", total, mismatches)
	if mismatches != 0 {
		t.Fatalf("%d mismatches between Go and the Lua script (seed %d)", mismatches, seed)
	}
}

// compareState compares a stored hash with the expected state.
func compareState(h map[string]string, w diffWant, report func(string, ...any)) {
	if !w.exists {
		if len(h) != 0 {
			report("key holds %v, want no key (Go has no state)", h)
		}
		return
	}
	s, err := redistest.ParseBucket(h)
	switch {
	case err != nil:
		report("stored %v: %v; want %+v", h, err, w.state)
	case math.Float64bits(s.Tokens) != math.Float64bits(w.state.Tokens) || s.Last != w.state.Last:
		report("stored tokens=%s ts=%s, want tokens=%s ts=%d",
			h["tokens"], h["ts"], strconv.FormatFloat(w.state.Tokens, 'g', -1, 64), w.state.Last)
	}
}

// checkReply compares a raw script reply with want: equal numbers, every
// field an integer except a saturated one, which must be the string
// "9223372036854775807".
func checkReply(v any, want bucket.Decision, fail func(string, ...any)) {
	d, err := redisscript.ParseDecision(v)
	if err != nil {
		fail("%v", err)
		return
	}
	if d != want {
		fail("reply %+v, want %+v", d, want)
		return
	}
	for i, e := range v.([]any) {
		_, isString := e.(string)
		if saturated := []int64{0, d.Remaining, d.RetryAfterMs, d.ResetAfterMs}[i] == math.MaxInt64; saturated != isString {
			fail("reply element %d is %T(%v); want a string exactly when saturated", i+1, e, e)
		} else if isString && e != "9223372036854775807" {
			fail("reply element %d is %q", i+1, e)
		}
	}
}

// TestDifferentialRedisBatch runs random operations through the script in
// batches, several keys in one EVALSHA as bucketd's Redis client encodes
// them for a standalone Redis (the form replication and store mode send),
// and holds every element of every reply and the stored state and
// PTTL of every key after each batch equal to the Go math applied one
// operation at a time.
func TestDifferentialRedisBatch(t *testing.T) {
	t.Parallel() // its own redis-server
	ctx := context.Background()
	rdb, g, seed := startDifferential(t, "batch", 0x6261746368)
	check := diffModel{}
	total := diffTotal() / 2
	mismatches, batches, largest := 0, 0, 0
	var carried *diffOp // drawn for a batch it could not join: the next one's first
	for done := 0; done < total; {
		// As in TestDifferentialRedisGroups (sendUnits), a batch never names
		// a key again after one of its ops wrote it with a PEXPIRE under
		// shortTTLMs: Redis may expire it between the two calls.
		n := min(1+g.r.IntN(24), total-done)
		ops := make([]diffOp, 0, n)
		sim, short := maps.Clone(check), map[string]bool{}
		for len(ops) < n {
			var o diffOp
			if carried != nil {
				o, carried = *carried, nil
			} else {
				o = g.next()
			}
			if short[o.key] {
				carried = &o
				break
			}
			if w := sim.apply(o); w.wrote && w.ttl < shortTTLMs {
				short[o.key] = true
			}
			ops = append(ops, o)
		}
		cmds := commands(ctx, ops, redisscript.BatchKeys)
		if len(cmds) != 1 {
			t.Fatalf("%d ops encoded as %d commands, want one batch", len(ops), len(cmds))
		}
		eval := cmds[0]
		pipe := rdb.TxPipeline()
		before := pipe.Time(ctx)
		_ = pipe.Process(ctx, eval) // only queues; never fails
		hashes := make([]*redis.MapStringStringCmd, len(g.keys))
		pttls := make([]*redis.Cmd, len(g.keys))
		for k, key := range g.keys {
			hashes[k] = pipe.HGetAll(ctx, key)
			pttls[k] = pipe.Do(ctx, "PTTL", key)
			pipe.Persist(ctx, key)
		}
		past := pipe.Time(ctx)
		_, _ = pipe.Exec(ctx) // errors are looked at per command

		report := func(format string, args ...any) {
			mismatches++
			if mismatches <= 20 {
				t.Errorf("batch %d (ops %d..%d): "+format, append([]any{batches, done, done + len(ops) - 1}, args...)...)
			}
		}
		v, err := eval.Result()
		replies, isArray := v.([]any)
		switch {
		case err != nil:
			report("EVALSHA: %v", err)
		case len(ops) == 1:
			replies = []any{v} // one key: the plain reply, as before batches existed
		case !isArray || len(replies) != len(ops):
			report("reply %v, want an array of %d replies", v, len(ops))
		}
		ttl := map[string]int64{} // the PEXPIRE the batch's last write to a key set
		for j, o := range ops {
			w := check.apply(o)
			if w.wrote {
				ttl[o.key] = w.ttl
			}
			if j >= len(replies) {
				continue
			}
			if o.kind == diffAcquire || o.kind == diffPeek {
				checkReply(replies[j], w.decision, func(f string, a ...any) { report("op %v: "+f, append([]any{o}, a...)...) })
			} else if replies[j] != w.applied {
				report("op %v: reply %v, want %d", o, replies[j], w.applied)
			}
		}
		slack := past.Val().UnixMilli() - before.Val().UnixMilli()
		for k, key := range g.keys {
			h, pttl := hashes[k].Val(), pttls[k].Val()
			st, exists := check[key]
			want, set := ttl[key]
			if set && exists && want <= slack+expirySlackMs && len(h) == 0 {
				delete(check, key) // expired on Redis's clock within the batch
				continue
			}
			compareState(h, diffWant{state: st, exists: exists}, func(f string, a ...any) { report(key+": "+f, a...) })
			switch p, _ := pttl.(int64); {
			case !exists && p != -2:
				report("%s: PTTL %d, want -2 (no key)", key, p)
			case exists && !set && p != -1:
				report("%s: PTTL %d, want -1 (no op of the batch wrote it)", key, p)
			case exists && set && (p > want || p < want-slack):
				report("%s: PTTL %d, want %d (%d ms less allowed)", key, p, want, slack)
			}
		}
		g.model = maps.Clone(check)
		done += len(ops)
		batches++
		largest = max(largest, len(ops))
	}
	t.Logf("%d operations in %d batches of 1..%d keys, %d mismatches", total, batches, largest, mismatches)
	if mismatches != 0 {
		t.Fatalf("%d mismatches between Go and the Lua script in batches (seed %d)", mismatches, seed)
	}
}

// TestScriptBatchErrorsAndTime checks what the random batches cannot reach:
// an invalid call is an error element that leaves the other calls of its
// batch applied, a batch with the wrong number of arguments is refused
// whole, and calls that read Redis TIME in one batch all get the same time.
func TestScriptBatchErrorsAndTime(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	l := bucket.Limit{Capacity: 10, Rate: 1}

	args := append(acquireArgs(l, 3, redisscript.RedisTime), acquireArgs(bucket.Limit{Capacity: 10, Rate: -1}, 1, redisscript.RedisTime)...)
	args = append(args, acquireArgs(l, 4, redisscript.RedisTime)...)
	v, err := rdb.Eval(ctx, bucket.Script, []string{"e:a", "e:bad", "e:b"}, args...).Result()
	if err != nil {
		t.Fatalf("batch with one invalid call: %v", err)
	}
	r, ok := v.([]any)
	if !ok || len(r) != 3 {
		t.Fatalf("reply %#v, want 3 elements", v)
	}
	if e, ok := r[1].(error); !ok || !strings.Contains(e.Error(), "invalid rate") {
		t.Fatalf("element 2 = %#v, want the invalid rate error", r[1])
	}
	for i, want := range map[int]int64{0: 7, 2: 6} {
		if d, err := redisscript.ParseDecision(r[i]); err != nil || !d.Allowed || d.Remaining != want {
			t.Fatalf("element %d = %#v (%v), want allowed with %d left", i+1, r[i], err, want)
		}
	}
	if n, _ := rdb.Exists(ctx, "e:bad").Result(); n != 0 {
		t.Fatalf("the invalid call created its key")
	}
	ta, _ := rdb.HGet(ctx, "e:a", "ts").Result()
	tb, _ := rdb.HGet(ctx, "e:b", "ts").Result()
	if ta == "" || ta != tb {
		t.Fatalf("ts of two calls in one batch reading TIME: %q and %q, want equal", ta, tb)
	}

	// A key of another type answers WRONGTYPE for itself only, whatever
	// the op; the batch's other calls still run.
	if err := rdb.Set(ctx, "e:str", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	args = nil
	for _, a := range [][]any{
		acquireArgs(l, 1, redisscript.RedisTime), peekArgs(l, 1, redisscript.RedisTime),
		putArgs(l, bucket.State{Tokens: 1, Last: 1}), delArgs(1),
		acquireArgs(l, 1, redisscript.RedisTime),
	} {
		args = append(args, a...)
	}
	v, err = rdb.Eval(ctx, bucket.Script, []string{"e:str", "e:str", "e:str", "e:str", "e:c"}, args...).Result()
	if r, ok := v.([]any); err != nil || !ok || len(r) != 5 {
		t.Fatalf("batch over a string key: %#v, %v; want 5 replies", v, err)
	} else {
		for i := range 4 {
			if e, ok := r[i].(error); !ok || !strings.HasPrefix(e.Error(), "WRONGTYPE") {
				t.Fatalf("element %d = %#v, want WRONGTYPE", i+1, r[i])
			}
		}
		if d, err := redisscript.ParseDecision(r[4]); err != nil || d.Remaining != 9 {
			t.Fatalf("element 5 = %#v (%v), want allowed with 9 left", r[4], err)
		}
	}
	if got, _ := rdb.Get(ctx, "e:str").Result(); got != "x" {
		t.Fatalf("the string key was changed to %q", got)
	}

	err = rdb.Eval(ctx, bucket.Script, []string{"e:a", "e:b"}, acquireArgs(l, 1, redisscript.RedisTime)...).Err()
	if err == nil || !strings.Contains(err.Error(), "2 keys need 12 arguments") {
		t.Fatalf("2 keys with 6 arguments: %v, want the batch refused", err)
	}
	if got, _ := rdb.HGet(ctx, "e:a", "tokens").Result(); got != "7" {
		t.Fatalf("refused batch changed e:a: tokens %q, want 7", got)
	}
}
