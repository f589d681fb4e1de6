package bucket_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/redisscript"
)

// requireRedisServer fails t when there is no redis-server, where
// redistest would skip unless BUCKETD_REQUIRE_REDIS is set: the lease
// differential test is what holds the script's lease mode to the Go
// mirror, and a run without it must not pass.
func requireRedisServer(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err == nil {
		return
	}
	if fi, err := os.Stat("/usr/bin/redis-server"); err == nil && fi.Mode()&0o111 != 0 {
		return
	}
	t.Fatal("redis-server not found in PATH or /usr/bin: the lease differential test needs it (apt-get install -y redis-server)")
}

// leaseKind is what one operation of the lease differential test does.
type leaseKind int

const (
	lkLease leaseKind = iota
	lkAcquire
	lkPeek
	lkReset
	lkGroup // one member of an all-or-nothing group
)

// leaseOp is one operation; a group is several with kind lkGroup.
type leaseOp struct {
	kind  leaseKind
	key   string
	limit bucket.Limit
	cost  float64
	now   int64
	call  bucket.LeaseCall // lkLease
}

func (o leaseOp) String() string {
	return fmt.Sprintf("%d %s cap=%v rate=%v cost=%v now=%d %+v", o.kind, o.key, o.limit.Capacity, o.limit.Rate, o.cost, o.now, o.call)
}

// redisCall is o as bucketd's Redis client sends it.
func (o leaseOp) redisCall() redisscript.Call {
	c := redisscript.Call{Limit: o.limit, Cost: o.cost, At: o.now}
	switch o.kind {
	case lkLease:
		c.Op, c.Lease = redisscript.Lease, o.call
	case lkAcquire:
		c.Op = redisscript.Acquire
	case lkPeek:
		c.Op = redisscript.Peek
	case lkReset:
		c = redisscript.Call{Op: redisscript.LeaseReset, At: o.now}
	case lkGroup:
		c.Op = redisscript.AcquireAll
	}
	return c
}

// leaseModel is the Go side: every key as bucket.Stored.
type leaseModel map[string]*bucket.Stored

func (m leaseModel) get(key string) *bucket.Stored {
	s, ok := m[key]
	if !ok {
		s = &bucket.Stored{}
		m[key] = s
	}
	return s
}

// leaseWant is the Go side's answer to one operation.
type leaseWant struct {
	reply   bucket.LeaseReply // lease; acquire, peek, group: the decision
	existed bool              // reset
	wrote   bool              // the op wrote the key (and so set its PEXPIRE)
}

// apply runs a unit (one op, or a group's ops) on the model.
func (m leaseModel) apply(u []leaseOp) []leaseWant {
	ws := make([]leaseWant, len(u))
	if u[0].kind == lkGroup {
		ss, ls := make([]*bucket.Stored, len(u)), make([]bucket.Limit, len(u))
		for i, o := range u {
			ss[i], ls[i] = m.get(o.key), o.limit
		}
		ok, ds := bucket.AcquireAll(ss, ls, u[0].cost, u[0].now)
		for i := range u {
			ws[i] = leaseWant{reply: bucket.LeaseReply{Decision: ds[i]}, wrote: ok && u[0].cost > 0}
		}
		return ws
	}
	o, s := u[0], m.get(u[0].key)
	switch o.kind {
	case lkLease:
		ws[0] = leaseWant{reply: s.Lease(o.limit, o.cost, o.now, o.call), wrote: true}
	case lkAcquire:
		ws[0] = leaseWant{reply: bucket.LeaseReply{Decision: s.Acquire(o.limit, o.cost, o.now)}, wrote: o.cost > 0}
	case lkPeek:
		ws[0] = leaseWant{reply: bucket.LeaseReply{Decision: s.Peek(o.limit, o.cost, o.now)}}
	case lkReset:
		ws[0] = leaseWant{existed: s.Reset(o.now), wrote: true}
	}
	return ws
}

// leaseGen draws the operations: a few keys, holders (one with a blank in
// its name), each key's usual limit, and time moving as in
// TestDifferentialRedis.
type leaseGen struct {
	*diffGen
	holders []string
	model   leaseModel // what the generator believes Redis holds, for epochs
}

// epoch picks the epoch a holder sends: the record's (it matches), 0, or
// a stale one.
func (g *leaseGen) epoch(key, holder string) int64 {
	s := g.model.get(key)
	r, ok := s.Records[holder]
	switch n := g.r.IntN(10); {
	case n < 6 && ok:
		return r.Epoch
	case n < 8:
		return 0
	case ok:
		return r.Epoch - 1 - g.r.Int64N(3)
	default:
		return g.r.Int64N(g.now + 1)
	}
}

// amount draws a report or a want against x (what is held, or the
// capacity).
func (g *leaseGen) amount(x float64) float64 {
	switch g.r.IntN(6) {
	case 0, 1:
		return 0
	case 2:
		return x
	case 3:
		return min(x*2, bucket.MaxValue)
	default:
		return x * g.r.Float64()
	}
}

// advance moves the clock on the scale of the TTLs, so that records are
// renewed, reported on and lapse: often not at all, mostly by up to
// 20 ms, sometimes by up to a second or a minute, and sometimes backwards.
func (g *leaseGen) advance() {
	var step int64
	switch n := g.r.IntN(20); {
	case n < 6:
	case n < 16:
		step = 1 + g.r.Int64N(20_000)
	case n < 18:
		step = g.r.Int64N(1_000_000)
	case n < 19:
		step = g.r.Int64N(60_000_000)
	default:
		step = -g.r.Int64N(100_000)
	}
	g.now = max(0, g.now+step)
}

func (g *leaseGen) nextUnit() []leaseOp {
	g.advance()
	key := g.keys[g.r.IntN(len(g.keys))]
	l := g.limit(key)
	o := leaseOp{key: key, limit: l, now: g.now, cost: g.cost(l.Capacity)}
	if g.r.IntN(3) == 0 {
		o.cost = min(1, l.Capacity) // the common call
	}
	var u []leaseOp
	switch n := g.r.IntN(100); {
	case n < 50:
		h := g.holders[g.r.IntN(len(g.holders))]
		held := g.model.get(key).Records[h].Held
		o.kind = lkLease
		if g.r.IntN(3) == 0 {
			o.cost = 0 // a renewal or a give-back
		}
		o.call = bucket.LeaseCall{Holder: h, Epoch: g.epoch(key, h), Consumed: g.amount(held),
			Returned: g.amount(held), Want: g.amount(l.Capacity / 4),
			TTL: []int64{1_000, 50_000, 500_000, 2_000_000, 30_000_000}[g.r.IntN(5)]}
		u = []leaseOp{o}
	case n < 72:
		o.kind = lkAcquire
		u = []leaseOp{o}
	case n < 82:
		o.kind = lkPeek
		u = []leaseOp{o}
	case n < 90:
		o.kind = lkReset
		u = []leaseOp{o}
	default:
		for _, i := range g.r.Perm(len(g.keys))[:1+g.r.IntN(3)] {
			k := g.keys[i]
			u = append(u, leaseOp{kind: lkGroup, key: k, limit: g.limit(k), now: g.now, cost: o.cost})
		}
	}
	g.model.apply(u) // keeps the epochs relevant; the check recomputes
	return u
}

// parseStored reads a key's hash as bucket.Stored: tokens and ts, the
// records l:<holder>, and leases, which must count them. The form reset
// leaves (records and ts, no tokens) is Tokens +Inf.
func parseStored(h map[string]string) (bucket.Stored, error) {
	var s bucket.Stored
	if len(h) == 0 {
		return s, nil
	}
	for f, v := range h {
		holder, ok := strings.CutPrefix(f, "l:")
		if !ok {
			continue
		}
		var r bucket.Record
		var held string
		if _, err := fmt.Sscanf(v, "%d %s %d", &r.Epoch, &held, &r.Expiry); err != nil {
			return s, fmt.Errorf("record %s = %q: %w", f, v, err)
		}
		var err error
		if r.Held, err = strconv.ParseFloat(held, 64); err != nil {
			return s, fmt.Errorf("record %s = %q: %w", f, v, err)
		}
		if s.Records == nil {
			s.Records = map[string]bucket.Record{}
		}
		s.Records[holder] = r
	}
	fields := 2 + len(s.Records)
	if len(s.Records) > 0 {
		fields++
		if h["leases"] != strconv.Itoa(len(s.Records)) {
			return s, fmt.Errorf("leases = %q with %d records", h["leases"], len(s.Records))
		}
	}
	tokens, hasTokens := h["tokens"]
	if !hasTokens && len(s.Records) > 0 {
		tokens, fields = "+Inf", fields-1
	}
	if len(h) != fields {
		return s, fmt.Errorf("fields %v, want tokens, ts and the records", h)
	}
	var err error
	if s.State.Tokens, err = strconv.ParseFloat(tokens, 64); err != nil {
		return s, fmt.Errorf("tokens: %w", err)
	}
	if s.State.Last, err = strconv.ParseInt(h["ts"], 10, 64); err != nil {
		return s, fmt.Errorf("ts: %w", err)
	}
	s.Exists = true
	return s, nil
}

// sameStored reports whether two keys hold the same bits.
func sameStored(a, b bucket.Stored) bool {
	if a.Exists != b.Exists || len(a.Records) != len(b.Records) {
		return false
	}
	if a.Exists && (math.Float64bits(a.State.Tokens) != math.Float64bits(b.State.Tokens) || a.State.Last != b.State.Last) {
		return false
	}
	for h, r := range a.Records {
		q, ok := b.Records[h]
		if !ok || q.Epoch != r.Epoch || q.Expiry != r.Expiry || math.Float64bits(q.Held) != math.Float64bits(r.Held) {
			return false
		}
	}
	return true
}

// leaseCommand is one EVALSHA of the test and the reads of its keys.
type leaseCommand struct {
	units        [][]leaseOp
	batch        redisscript.Batch
	keys         []string
	hashes       []*redis.MapStringStringCmd
	pttls        []*redis.Cmd
	persisted    []*redis.BoolCmd
	before, past *redis.TimeCmd
}

// leaseStats are logged so a reader can see what the run covered.
type leaseStats struct {
	leases, matched, dropped, granted, denied, tooBig int
	acquires, peeks, resets, keptRecords, groups      int
	commands, lapsed, expired, maxRecords             int
}

// TestDifferentialRedisLease holds the script's lease mode equal to
// bucket.Stored on a real redis-server: random lease calls from three
// holders on three keys (epochs matching, 0 and stale; reports of what is
// held, of more, of nothing; wants up to the capacity; TTLs from 1 ms to
// 30 s, so records lapse, some within a step), acquires, peeks and groups
// over keys with records, resets with records live and lapsed, and limits
// that change, with time moving as in TestDifferentialRedis (also
// backwards). Commands carry one unit, or several units of up to 64 keys
// (the batch form). After each EVALSHA every reply and the stored state
// (tokens and ts bit for bit, every record, the leases count) and PTTL of
// every key it named must equal the Go side's; the keys are then
// PERSISTed, so an op that writes nothing must leave PTTL -1.
func TestDifferentialRedisLease(t *testing.T) {
	requireRedisServer(t)
	t.Parallel() // its own redis-server
	ctx := context.Background()
	rdb, dg, seed := startDifferential(t, "lease", 0x6c65617365)
	dg.keys = dg.keys[:3]
	g := &leaseGen{diffGen: dg, holders: []string{"i1-0", "i1-1", "an instance-7"}, model: leaseModel{}}
	check := leaseModel{}
	total := diffTotal() / 2
	var st leaseStats
	mismatches := 0
	for done := 0; done < total; {
		var cmds []*leaseCommand
		pipe := rdb.TxPipeline()
		for range 20 {
			c := &leaseCommand{}
			for keys, shared := 0, g.r.IntN(2) == 0; ; {
				u := g.nextUnit()
				c.units, keys = append(c.units, u), keys+len(u)
				done++
				if !shared || keys > 40 || g.r.IntN(6) == 0 {
					break
				}
			}
			c.queue(ctx, pipe)
			cmds = append(cmds, c)
		}
		_, _ = pipe.Exec(ctx) // errors are looked at per command
		for _, c := range cmds {
			st.commands++
			report := func(format string, args ...any) {
				mismatches++
				if mismatches <= 20 {
					t.Errorf("command %d: "+format, append([]any{st.commands}, args...)...)
				}
			}
			c.check(check, &st, report)
		}
		g.model = cloneModel(check)
	}
	t.Logf("%d lease calls (%d under the record's epoch, %d dropping a record of another epoch, %d granting, %d denied, %d cost>capacity); "+
		"%d acquires, %d peeks, %d resets (%d keeping records), %d group members; %d EVALSHA; "+
		"up to %d records on a key, %d records lapsed; %d keys expired by Redis within their command",
		st.leases, st.matched, st.dropped, st.granted, st.denied, st.tooBig, st.acquires, st.peeks, st.resets, st.keptRecords,
		st.groups, st.commands, st.maxRecords, st.lapsed, st.expired)
	t.Logf("%d operations, %d mismatches", total, mismatches)
	if mismatches != 0 {
		t.Fatalf("%d mismatches between Go and the Lua script in lease mode (seed %d)", mismatches, seed)
	}
}

func cloneModel(m leaseModel) leaseModel {
	c := leaseModel{}
	for k, s := range m {
		cs := *s
		if s.Records != nil {
			cs.Records = map[string]bucket.Record{}
			for h, r := range s.Records {
				cs.Records[h] = r
			}
		}
		c[k] = &cs
	}
	return c
}

// queue encodes c's units into one EVALSHA and queues it in pipe between
// two TIMEs, followed by the reads of every key it names.
func (c *leaseCommand) queue(ctx context.Context, pipe redis.Pipeliner) {
	c.batch.Reset("")
	for _, u := range c.units {
		for i, o := range u {
			call := o.redisCall()
			if o.kind == lkGroup && i == 0 {
				call.Group = len(u)
			}
			c.batch.AddString(o.key, call)
			if !slices.Contains(c.keys, o.key) {
				c.keys = append(c.keys, o.key)
			}
		}
	}
	built := c.batch.Build(ctx, redisscript.BatchKeys)
	c.before = pipe.Time(ctx)
	for _, cmd := range built {
		_ = pipe.Process(ctx, cmd) // only queues; never fails
	}
	for _, key := range c.keys {
		c.hashes = append(c.hashes, pipe.HGetAll(ctx, key))
		c.pttls = append(c.pttls, pipe.Do(ctx, "PTTL", key))
		c.persisted = append(c.persisted, pipe.Persist(ctx, key))
	}
	c.past = pipe.Time(ctx)
}

// check applies c's units to the model and compares every reply, and the
// stored state and PTTL of every key c named.
func (c *leaseCommand) check(m leaseModel, st *leaseStats, report func(string, ...any)) {
	ttl := map[string]int64{} // the PEXPIRE the command's last write to a key set
	call := 0
	for _, u := range c.units {
		before := m.get(u[0].key).Records[u[0].call.Holder]
		for _, r := range m.get(u[0].key).Records {
			if r.Expiry <= u[0].now {
				st.lapsed++
			}
		}
		ws := m.apply(u)
		for i, o := range u {
			w := ws[i]
			v, err := c.batch.Reply(call)
			call++
			if err != nil {
				report("op %v: script error %v", o, err)
				continue
			}
			s := m.get(o.key)
			if w.wrote {
				ttl[o.key] = s.ExpireMillis(o.limit, o.now)
			}
			countLease(o, before, w, s, st)
			checkLeaseReply(o, v, w, report)
		}
	}
	slack := c.past.Val().UnixMilli() - c.before.Val().UnixMilli()
	for k, key := range c.keys {
		h, pttl := c.hashes[k].Val(), c.pttls[k].Val()
		want := *m.get(key)
		got, err := parseStored(h)
		exists := want.Exists || len(want.Records) > 0
		w, set := ttl[key]
		if set && exists && w <= slack+expirySlackMs && (len(h) == 0 || !c.persisted[k].Val()) {
			st.expired++
			delete(m, key) // expired on Redis's clock within the command
			continue
		}
		if err != nil || !sameStored(got, want) {
			report("%s: stored %v (%v), want %+v", key, h, err, want)
		}
		switch p, _ := pttl.(int64); {
		case !exists && p != -2:
			report("%s: PTTL %d, want -2 (no key)", key, p)
		case exists && !set && p != -1:
			report("%s: PTTL %d, want -1 (nothing of the command wrote it)", key, p)
		case exists && set && (p > w || p < w-slack):
			report("%s: PTTL %d, want %d (%d ms less allowed)", key, p, w, slack)
		}
	}
}

// checkLeaseReply compares one reply with the Go side's.
func checkLeaseReply(o leaseOp, v any, w leaseWant, report func(string, ...any)) {
	switch o.kind {
	case lkLease:
		got, err := redisscript.ParseLease(v)
		if err != nil || got != w.reply {
			report("op %v: reply %v (%+v, %v), want %+v", o, v, got, err, w.reply)
		}
	case lkReset:
		want := int64(0)
		if w.existed {
			want = 1
		}
		if v != want {
			report("op %v: reply %v, want %d", o, v, want)
		}
	default:
		checkReply(v, w.reply.Decision, func(f string, a ...any) { report("op %v: "+f, append([]any{o}, a...)...) })
	}
}

// countLease adds one operation to the statistics.
func countLease(o leaseOp, before bucket.Record, w leaseWant, s *bucket.Stored, st *leaseStats) {
	st.maxRecords = max(st.maxRecords, len(s.Records))
	switch o.kind {
	case lkLease:
		st.leases++
		switch {
		case before.Epoch != 0 && before.Epoch == o.call.Epoch && before.Expiry > o.now:
			st.matched++
		case before.Epoch != 0 && before.Expiry > o.now:
			st.dropped++
		}
		switch d := w.reply.Decision; {
		case d.RetryAfterMs == -1:
			st.tooBig++
		case !d.Allowed:
			st.denied++
		case w.reply.Held > before.Held:
			st.granted++
		}
	case lkAcquire:
		st.acquires++
	case lkPeek:
		st.peeks++
	case lkReset:
		st.resets++
		if len(s.Records) > 0 {
			st.keptRecords++
		}
	case lkGroup:
		st.groups++
	}
}

// TestScriptLeaseKeyKeepsOnlyItsFields: a key with lease records that
// also holds a field the script does not know and malformed records ends
// up, after any op that writes it, with exactly the fields the Go mirror
// stores: the bucket's, leases and the live records, as a DEL and an HSET
// of them all would leave it, though the script writes only the fields
// that change.
func TestScriptLeaseKeyKeepsOnlyItsFields(t *testing.T) {
	requireRedisServer(t)
	ctx := context.Background()
	rdb := scriptServer(t)
	l := bucket.Limit{Capacity: 100, Rate: 1}
	const now = 1_000_000_000
	lease := func(holder string, epoch int64, at int64) bucket.LeaseReply {
		t.Helper()
		v := evalsha(t, rdb, "k", argv(redisscript.Call{Op: redisscript.Lease, Limit: l, Cost: 1, At: at,
			Lease: bucket.LeaseCall{Holder: holder, Epoch: epoch, Want: 5, TTL: 10_000_000}}))
		r, err := redisscript.ParseLease(v)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := lease("a", 0, now)
	lease("b 2", 0, now)
	junk := map[string]any{"note": "x", "l:bad": "not a record", "l:short": "1 2", "l:neg": "1 -5 99999999999"}
	ops := []struct {
		name string
		run  func(at int64)
		want []string
	}{
		{"lease renewal", func(at int64) { lease("a", a.Epoch, at) }, []string{"l:a", "l:b 2", "leases", "tokens", "ts"}},
		{"acquire", func(at int64) {
			evalsha(t, rdb, "k", acquireArgs(l, 1, at))
		}, []string{"l:a", "l:b 2", "leases", "tokens", "ts"}},
		{"reset", func(at int64) {
			evalsha(t, rdb, "k", argv(redisscript.Call{Op: redisscript.LeaseReset, At: at}))
		}, []string{"l:a", "l:b 2", "leases", "ts"}},
	}
	for i, op := range ops {
		if err := rdb.HSet(ctx, "k", junk).Err(); err != nil {
			t.Fatal(err)
		}
		op.run(now + int64(i+1)*1000)
		h, err := rdb.HGetAll(ctx, "k").Result()
		if err != nil {
			t.Fatal(err)
		}
		got := slices.Sorted(maps.Keys(h))
		if !slices.Equal(got, op.want) {
			t.Errorf("after the %s the key holds %q, want %q", op.name, got, op.want)
		}
		if h["leases"] != "2" {
			t.Errorf("after the %s leases = %q, want 2", op.name, h["leases"])
		}
		if s, err := parseStored(h); err != nil || len(s.Records) != 2 {
			t.Errorf("after the %s: %+v, %v", op.name, s, err)
		}
	}
}
