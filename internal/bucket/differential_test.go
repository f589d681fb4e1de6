package bucket_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/redistest"
)

var (
	diffSeed = flag.Uint64("bucket.diffseed", 0, "seed of TestDifferentialRedis (0: a new one, logged)")
	diffOps  = flag.Int("bucket.diffops", 50000, "operations of TestDifferentialRedis")
)

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
				w.wrote, w.ttl = true, bucket.TTLMillis(o.limit, next, o.now)
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
			w.wrote, w.ttl = true, bucket.TTLMillis(o.limit, o.put, o.now)
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

func (g *diffGen) capacity() float64 {
	switch g.r.IntN(10) {
	case 0:
		return 1e-3
	case 1:
		return 1e12
	case 2:
		return 1e15
	case 3:
		return 0.5
	case 4:
		return 1
	case 5:
		return 10
	case 6:
		return 3.7
	default:
		return math.Pow(10, g.r.Float64()*15-3) // 1e-3 .. 1e12, any fraction
	}
}

func (g *diffGen) rate() float64 {
	switch g.r.IntN(12) {
	case 0:
		return 1e-3
	case 1:
		return 1e12
	case 2:
		return 1e15
	case 3:
		return 0.5
	case 4:
		return 1
	case 5:
		return 1e-300 // reset_after_ms and retry_after_ms saturate
	case 6:
		return 1e-9
	case 7:
		return 123.456
	default:
		return math.Pow(10, g.r.Float64()*15-3)
	}
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

func (g *diffGen) next() diffOp {
	if step := g.step(); g.now+step < maxMicros {
		g.now += step
	} else {
		g.now -= g.r.Int64N(2_000_000) // the script takes times below 2^53 µs
	}
	key := g.keys[g.r.IntN(len(g.keys))]
	l, ok := g.limits[key]
	if !ok || g.r.IntN(7) == 0 { // keys sometimes change capacity and rate
		l = bucket.Limit{Capacity: g.capacity(), Rate: g.rate()}
		g.limits[key] = l
	}
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

func (o diffOp) args() []any {
	switch o.kind {
	case diffPeek:
		return bucket.PeekArgs(o.limit, o.cost, o.now)
	case diffPut:
		return bucket.PutArgs(o.limit, o.put)
	case diffDel:
		return bucket.DelArgs(o.now)
	}
	return bucket.AcquireArgs(o.limit, o.cost, o.now)
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
func TestDifferentialRedis(t *testing.T) {
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
		r:      rand.New(rand.NewPCG(seed, 0x6275636b657464)),
		limits: map[string]bucket.Limit{},
		now:    start.UnixMicro(),
		model:  diffModel{},
	}
	for i := range 8 {
		g.keys = append(g.keys, fmt.Sprintf("diff:{%d}", i))
	}
	check := diffModel{} // the Go side, as Redis should hold it

	const batch = 250
	var st diffStats
	mismatches, total := 0, *diffOps
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
		pipe := rdb.TxPipeline()
		for j := range ops {
			ops[j] = g.next()
			o := ops[j]
			got[j].before = pipe.Time(ctx)
			got[j].eval = pipe.EvalSha(ctx, bucket.ScriptSHA1, []string{o.key}, o.args()...)
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
			if w.wrote && w.ttl < slack && (len(h) == 0 || pttl == -2 || !persisted) {
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
	s, err := parseState(h)
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
	d, err := bucket.ParseReply(v)
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

// parseState reads a stored hash: exactly the fields tokens and ts.
func parseState(h map[string]string) (bucket.State, error) {
	if len(h) != 2 {
		return bucket.State{}, fmt.Errorf("want exactly the fields tokens and ts")
	}
	tokens, err := strconv.ParseFloat(h["tokens"], 64)
	if err != nil {
		return bucket.State{}, err
	}
	ts, err := strconv.ParseInt(h["ts"], 10, 64)
	if err != nil {
		return bucket.State{}, err
	}
	return bucket.State{Tokens: tokens, Last: ts}, nil
}
