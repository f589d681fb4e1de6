package bucket_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/redisscript"
	"github.com/bucketd/bucketd/internal/redistest"
)

// diffUnit is what one script call runs for one client command: a single
// operation, or an all-or-nothing group (TB.MACQUIRE) of acquires on
// distinct keys with one cost and one now.
type diffUnit struct {
	ops   []diffOp
	group bool
}

// applyGroup updates the model with the group ops as internal/shard's
// acquireAll does and returns each member's expected outcome: every bucket
// is checked (bucket.Check); if every one holds the cost, each acquires
// (stored as the shards store it); otherwise nothing changes and each
// answers its check.
func (m diffModel) applyGroup(ops []diffOp) []diffWant {
	ws := make([]diffWant, len(ops))
	all := true
	for k, o := range ops {
		st, ok := m[o.key]
		ws[k].decision = bucket.Check(st, ok, o.limit, o.cost, o.now)
		ws[k].state, ws[k].exists = st, ok
		all = all && ws[k].decision.Allowed
	}
	if !all {
		return ws
	}
	for k, o := range ops {
		ws[k] = m.apply(o) // o.kind is diffAcquire: exactly TB.ACQUIRE
	}
	return ws
}

// apply updates the model with u and returns each operation's outcome.
func (m diffModel) applyUnit(u diffUnit) []diffWant {
	if u.group {
		return m.applyGroup(u.ops)
	}
	return []diffWant{m.apply(u.ops[0])}
}

// nextGroup draws a group of 1 to 16 distinct keys of the generator's
// pool, each with its usual limit, one now and one cost: drawn as for a
// single acquire against one member's capacity or the smallest, or a small
// share of the smallest, so that groups are allowed, denied by one member,
// denied by several, of cost 0 and of cost above a capacity.
func (g *diffGen) nextGroup() diffUnit {
	g.advance()
	n := 1 + g.r.IntN(16)
	u := diffUnit{group: true, ops: make([]diffOp, n)}
	smallest := math.Inf(1)
	for k, i := range g.r.Perm(len(g.keys))[:n] {
		key := g.keys[i]
		l := g.limit(key)
		u.ops[k] = diffOp{kind: diffAcquire, key: key, limit: l, now: g.now}
		smallest = min(smallest, l.Capacity)
	}
	var cost float64
	switch g.r.IntN(4) {
	case 0:
		cost = g.cost(u.ops[g.r.IntN(n)].limit.Capacity)
	case 1:
		cost = g.cost(smallest)
	default:
		cost = smallest * g.r.Float64() / 4
	}
	for k := range u.ops {
		u.ops[k].cost = cost
	}
	g.model.applyGroup(u.ops) // keeps guardTS's choices relevant; the check recomputes
	return u
}

// calls is u as bucketd's Redis client sends it.
func (u diffUnit) calls() []redisscript.Call {
	if !u.group {
		return []redisscript.Call{u.ops[0].call()}
	}
	cs := make([]redisscript.Call, len(u.ops))
	for k, o := range u.ops {
		cs[k] = redisscript.Call{Op: redisscript.AcquireAll, Limit: o.limit, Cost: o.cost, At: o.now}
	}
	cs[0].Group = len(u.ops)
	return cs
}

// groupStats are logged so a reader can see what the random run covered.
type groupStats struct {
	groups, singles, commands, shared    int // shared: commands with several units
	allowed, denied, partial, zero, huge int
	sizes                                [17]int
	ttls, expired                        int
}

// TestDifferentialRedisGroups holds the script's all-or-nothing groups
// (acquireall, TB.MACQUIRE in store mode) equal to the Go rule of
// internal/shard's acquireAll: random groups of 1 to 16 keys drawn from a
// pool of 24 (so groups overlap), every key with its own capacity and rate
// (which sometimes change), one cost per group (0, fractional, above a
// capacity, or well within), time moving as in TestDifferentialRedis, with
// single acquires, peeks, puts and dels in between so that the buckets are
// in every state. Units are sent as bucketd's Redis client encodes them:
// half the time one unit per EVALSHA (as on a Redis Cluster), half the time
// several units of up to 64 keys in all in one EVALSHA (as on a standalone
// Redis). After every EVALSHA, every element of its reply and the stored
// state and PTTL of every key it named must equal the Go side. The keys
// are PERSISTed after each check (as in TestDifferentialRedis), so a
// denied group, which writes nothing, must leave PTTL -1.
func TestDifferentialRedisGroups(t *testing.T) {
	t.Parallel() // its own redis-server
	ctx := context.Background()
	rdb, g, seed := startDifferential(t, "group", 0x67726f7570)
	g.keys = g.keys[:0]
	for i := range 24 {
		g.keys = append(g.keys, fmt.Sprintf("group:{%d}", i))
	}
	check := diffModel{}
	total := diffTotal() / 4
	var st groupStats
	mismatches := 0
	for st.groups < total {
		units := make([]diffUnit, 40)
		for j := range units {
			if g.r.IntN(4) == 0 {
				units[j] = diffUnit{ops: []diffOp{g.next()}}
			} else {
				units[j] = g.nextGroup()
			}
		}
		report := func(format string, args ...any) {
			mismatches++
			if mismatches <= 20 {
				t.Errorf("command %d: "+format, append([]any{st.commands}, args...)...)
			}
		}
		for _, cmd := range sendUnits(ctx, t, rdb, units, g.r.IntN(2) == 0, check) {
			st.commands++
			if len(cmd.units) > 1 {
				st.shared++
			}
			checkGroupCommand(cmd, check, &st, report)
		}
		g.model = maps.Clone(check)
	}
	t.Logf("%d groups (sizes 1..16: %v) and %d single operations in %d EVALSHA (%d with several units); "+
		"groups: %d allowed, %d denied (%d of them with some bucket that alone held the cost), %d of cost 0, %d with a cost above some capacity; "+
		"%d TTLs set, %d keys expired by Redis within their command",
		st.groups, st.sizes[1:], st.singles, st.commands, st.shared, st.allowed, st.denied, st.partial, st.zero, st.huge, st.ttls, st.expired)
	t.Logf("%d group operations, %d mismatches", st.groups, mismatches)
	if mismatches != 0 {
		t.Fatalf("%d mismatches between Go and the Lua script in groups (seed %d)", mismatches, seed)
	}
}

// groupCommand is one EVALSHA of TestDifferentialRedisGroups and the
// commands that read back every key it named.
type groupCommand struct {
	units        []diffUnit
	batch        *redisscript.Batch // holds the replies
	keys         []string
	hashes       []*redis.MapStringStringCmd
	pttls        []*redis.Cmd
	persisted    []*redis.BoolCmd
	before, past *redis.TimeCmd
}

// sendUnits sends units, one per EVALSHA or (shared) as many per EVALSHA
// as fit in 64 keys, each followed by the reads of its keys, in one
// MULTI/EXEC, and returns the commands with their replies. model is the
// Go side before the units.
//
// A shared EVALSHA never names a key again after a unit of it wrote that
// key with a PEXPIRE under shortTTLMs: on a loaded machine Redis was seen
// to expire such a key (PEXPIRE 2, the least the script sets) between two
// calls of one EVALSHA, so the later call found the bucket full where the
// model, on the test's clock, still had it 2 ms short of full (and a
// reply can look the same either way, so the check could not tell). The
// keys a command wrote are PERSISTed right after it, and one that is
// gone by then is allowed for (expirySlackMs). bucketd itself passes no
// time of its own to the script in store mode (Redis TIME), so such a key
// is full by Redis's clock when it goes.
func sendUnits(ctx context.Context, t *testing.T, rdb *redis.Client, units []diffUnit, shared bool, model diffModel) []*groupCommand {
	t.Helper()
	var cmds []*groupCommand
	sim := maps.Clone(model) // the TTLs the units' writes set
	for len(units) > 0 {
		n, keys := 1, len(units[0].ops)
		short := map[string]bool{}
		noteShortTTLs(sim, units[0], short)
		if shared {
			for n < len(units) && keys+len(units[n].ops) <= redisscript.BatchKeys && n < 1+len(units)/3 && !namesAny(units[n], short) {
				keys += len(units[n].ops)
				noteShortTTLs(sim, units[n], short)
				n++
			}
		}
		cmds = append(cmds, &groupCommand{units: units[:n], batch: new(redisscript.Batch)})
		units = units[n:]
	}
	pipe := rdb.TxPipeline()
	for _, c := range cmds {
		c.batch.Reset("")
		for _, u := range c.units {
			for k, call := range u.calls() {
				c.batch.AddString(u.ops[k].key, call)
				if !slices.Contains(c.keys, u.ops[k].key) {
					c.keys = append(c.keys, u.ops[k].key)
				}
			}
		}
		built := c.batch.Build(ctx, redisscript.BatchKeys)
		if len(built) != 1 {
			t.Fatalf("%d units encoded as %d commands, want one", len(c.units), len(built))
		}
		c.before = pipe.Time(ctx)
		_ = pipe.Process(ctx, built[0]) // only queues; never fails
		for _, key := range c.keys {
			c.hashes = append(c.hashes, pipe.HGetAll(ctx, key))
			c.pttls = append(c.pttls, pipe.Do(ctx, "PTTL", key))
			c.persisted = append(c.persisted, pipe.Persist(ctx, key))
		}
		c.past = pipe.Time(ctx)
	}
	_, _ = pipe.Exec(ctx) // errors are looked at per command
	return cmds
}

// shortTTLMs is the PEXPIRE under which a key written in a shared
// EVALSHA is not named again in it (sendUnits): far above what a script
// call takes, even on a loaded machine.
const shortTTLMs = 1000

// noteShortTTLs applies u to sim and adds to short the keys it writes with
// a PEXPIRE under shortTTLMs.
func noteShortTTLs(sim diffModel, u diffUnit, short map[string]bool) {
	for k, w := range sim.applyUnit(u) {
		if w.wrote && w.ttl < shortTTLMs {
			short[u.ops[k].key] = true
		}
	}
}

// namesAny says whether u names a key of keys.
func namesAny(u diffUnit, keys map[string]bool) bool {
	for _, o := range u.ops {
		if keys[o.key] {
			return true
		}
	}
	return false
}

// checkGroupCommand applies the command's units to the model and compares
// every reply, stored state and PTTL with it.
func checkGroupCommand(c *groupCommand, check diffModel, st *groupStats, report func(string, ...any)) {
	ttl := map[string]int64{} // the PEXPIRE the command's last write to a key set
	call := 0
	for _, u := range c.units {
		ws := check.applyUnit(u)
		countUnit(u, ws, st)
		for k, o := range u.ops {
			w := ws[k]
			if w.wrote {
				ttl[o.key] = w.ttl
			}
			v, err := c.batch.Reply(call)
			call++
			switch {
			case err != nil:
				report("op %v (group %v): script error %v", o, u.group, err)
			case o.kind == diffAcquire || o.kind == diffPeek:
				checkReply(v, w.decision, func(f string, a ...any) {
					report("op %v (group %v of %d): "+f, append([]any{o, u.group, len(u.ops)}, a...)...)
				})
			case v != w.applied:
				report("op %v: reply %v, want %d", o, v, w.applied)
			}
		}
	}
	slack := c.past.Val().UnixMilli() - c.before.Val().UnixMilli()
	for k, key := range c.keys {
		h, pttl := c.hashes[k].Val(), c.pttls[k].Val()
		s, exists := check[key]
		want, set := ttl[key]
		if set {
			st.ttls++
		}
		if set && exists && want <= slack+expirySlackMs && (len(h) == 0 || !c.persisted[k].Val()) {
			st.expired++
			delete(check, key) // expired on Redis's clock within the command
			continue
		}
		compareState(h, diffWant{state: s, exists: exists}, func(f string, a ...any) { report(key+": "+f, a...) })
		switch p, _ := pttl.(int64); {
		case !exists && p != -2:
			report("%s: PTTL %d, want -2 (no key)", key, p)
		case exists && !set && p != -1:
			report("%s: PTTL %d, want -1 (nothing of the command wrote it)", key, p)
		case exists && set && (p > want || p < want-slack):
			report("%s: PTTL %d, want %d (%d ms less allowed)", key, p, want, slack)
		}
	}
}

// countUnit adds u to the statistics.
func countUnit(u diffUnit, ws []diffWant, st *groupStats) {
	if !u.group {
		st.singles++
		return
	}
	st.groups++
	st.sizes[len(u.ops)]++
	all, some, huge := true, false, false
	for k, w := range ws {
		all = all && w.decision.Allowed
		some = some || w.decision.Allowed
		huge = huge || u.ops[k].cost > u.ops[k].limit.Capacity
	}
	switch {
	case all:
		st.allowed++
	case some:
		st.denied++
		st.partial++
	default:
		st.denied++
	}
	if u.ops[0].cost == 0 {
		st.zero++
	}
	if huge {
		st.huge++
	}
}

// groupArgs returns the keys and ARGV of one script call holding the group
// of keys with limits ls, cost and now, as bucketd's Redis client encodes
// it.
func groupArgs(keys []string, ls []bucket.Limit, cost float64, now int64) []any {
	var b redisscript.Batch
	b.Reset("")
	u := diffUnit{group: true}
	for k, key := range keys {
		u.ops = append(u.ops, diffOp{kind: diffAcquire, key: key, limit: ls[k], cost: cost, now: now})
	}
	for k, c := range u.calls() {
		b.AddString(keys[k], c)
	}
	args := b.Build(context.Background(), redisscript.BatchKeys)[0].Args()[3+len(keys):]
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = *a.(*string)
	}
	return out
}

// TestScriptGroupErrorsAndTime checks what the random groups cannot reach:
// a member that cannot be checked (a key of another type, an invalid
// argument, a key named twice, another op) answers its error, the others
// their check, and nothing is written; a bad group size is an error for
// its key alone; a group of one key where a denied acquire would clamp
// writes nothing; and the members of a group that read Redis TIME all
// store the same ts.
func TestScriptGroupErrorsAndTime(t *testing.T) {
	ctx := context.Background()
	rdb := scriptServer(t)
	l, small := bucket.Limit{Capacity: 10, Rate: 1}, bucket.Limit{Capacity: 5, Rate: 1}
	const now = 1_700_000_000_000_000
	evalsha(t, rdb, "g:a", acquireArgs(l, 2, now)) // 8 left
	if err := rdb.Set(ctx, "g:str", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	a, _ := redistest.StoredBucket(t, rdb, "g:a")
	check := bucket.Check(a, true, l, 1, now)

	badRate := groupArgs([]string{"g:a", "g:new"}, []bucket.Limit{l, l}, 1, now)
	badRate[6+1] = "-1"
	otherOp := groupArgs([]string{"g:a", "g:new"}, []bucket.Limit{l, l}, 1, now)
	otherOp[6+3] = "acquire"
	for _, tc := range []struct {
		name string
		keys []string
		args []any
		bad  int // the member that fails
		want string
	}{
		{"wrong type", []string{"g:a", "g:str", "g:new"}, groupArgs([]string{"g:a", "g:str", "g:new"}, []bucket.Limit{l, l, l}, 1, now), 1, "WRONGTYPE"},
		{"invalid rate", []string{"g:a", "g:new"}, badRate, 1, "ERR invalid rate"},
		{"key named twice", []string{"g:a", "g:new", "g:a"}, groupArgs([]string{"g:a", "g:new", "g:a"}, []bucket.Limit{l, l, l}, 1, now), 2, "ERR invalid group: a key is named twice"},
		{"another op", []string{"g:a", "g:new"}, otherOp, 1, "ERR invalid group: every key"},
	} {
		v, err := rdb.EvalSha(ctx, bucket.ScriptSHA1, tc.keys, tc.args...).Result()
		r, ok := v.([]any)
		if err != nil || !ok || len(r) != len(tc.keys) {
			t.Fatalf("%s: %#v, %v; want %d replies", tc.name, v, err, len(tc.keys))
		}
		for k := range r {
			if k == tc.bad {
				if e, ok := r[k].(error); !ok || !strings.HasPrefix(e.Error(), tc.want) {
					t.Fatalf("%s: element %d = %#v, want %s…", tc.name, k+1, r[k], tc.want)
				}
				continue
			}
			want := check
			if tc.keys[k] != "g:a" {
				want = bucket.Check(bucket.State{}, false, l, 1, now)
			}
			if d, err := redisscript.ParseDecision(r[k]); err != nil || d != want {
				t.Fatalf("%s: element %d = %#v (%v), want the check %+v", tc.name, k+1, r[k], err, want)
			}
		}
		if got, _ := redistest.StoredBucket(t, rdb, "g:a"); got != a {
			t.Fatalf("%s: the failed group changed g:a: %+v, want %+v", tc.name, got, a)
		}
		if n, _ := rdb.Exists(ctx, "g:new").Result(); n != 0 {
			t.Fatalf("%s: the failed group created g:new", tc.name)
		}
	}

	// Bad sizes: an error for that key; the keys after it are calls of
	// their own (here acquireall without a size: errors too).
	for _, size := range []string{"0", "3", "1.5", "", "x"} {
		args := groupArgs([]string{"g:a", "g:new"}, []bucket.Limit{l, l}, 1, now)
		args[5] = size
		v, err := rdb.EvalSha(ctx, bucket.ScriptSHA1, []string{"g:a", "g:new"}, args...).Result()
		r, _ := v.([]any)
		if err != nil || len(r) != 2 {
			t.Fatalf("size %q: %#v, %v", size, v, err)
		}
		for k := range r {
			if e, ok := r[k].(error); !ok || !strings.Contains(e.Error(), "invalid group size") {
				t.Fatalf("size %q: element %d = %#v, want the group size error", size, k+1, r[k])
			}
		}
	}
	if got, _ := redistest.StoredBucket(t, rdb, "g:a"); got != a {
		t.Fatalf("bad sizes changed g:a: %+v, want %+v", got, a)
	}

	// A group of one key, alone in the call: the plain reply. Denied with
	// a smaller capacity (cost above it), it clamps nothing, where an
	// acquire stores the clamped state.
	v := evalsha(t, rdb, "g:a", groupArgs([]string{"g:a"}, []bucket.Limit{small}, 6, now+1))
	if d, err := redisscript.ParseDecision(v); err != nil || d != bucket.Check(a, true, small, 6, now+1) || d.RetryAfterMs != -1 {
		t.Fatalf("group of one, cost above capacity: %#v (%v), want %+v", v, err, bucket.Check(a, true, small, 6, now+1))
	}
	if got, _ := redistest.StoredBucket(t, rdb, "g:a"); got != a {
		t.Fatalf("a denied group of one wrote g:a: %+v, want %+v", got, a)
	}
	if pttl, _ := rdb.PTTL(ctx, "g:a").Result(); pttl < 0 {
		t.Fatalf("PTTL %v: the key lost its expiry", pttl)
	}

	// Redis TIME, read once for the group.
	v, err := rdb.EvalSha(ctx, bucket.ScriptSHA1, []string{"g:t1", "g:t2", "g:t3"},
		groupArgs([]string{"g:t1", "g:t2", "g:t3"}, []bucket.Limit{l, l, l}, 1, redisscript.RedisTime)...).Result()
	if r, ok := v.([]any); err != nil || !ok || len(r) != 3 {
		t.Fatalf("group at Redis TIME: %#v, %v", v, err)
	}
	t1, _ := rdb.HGet(ctx, "g:t1", "ts").Result()
	for _, k := range []string{"g:t2", "g:t3"} {
		if ts, _ := rdb.HGet(ctx, k, "ts").Result(); t1 == "" || ts != t1 {
			t.Fatalf("ts of %s %q, of g:t1 %q: want one TIME for the group", k, ts, t1)
		}
	}
}
