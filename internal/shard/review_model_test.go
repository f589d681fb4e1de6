package shard

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
)

// mixedRuns builds random Runs over a small set of keys: plain TB.ACQUIRE,
// TB.PEEK, TB.RESET and CL.THROTTLE requests, and all-or-nothing groups,
// in every add order. Groups mix keys without a tag (on any shard, so a
// vote) with co-tagged ones (one shard), include CL.THROTTLE keys (wrong
// type), cost 0 and costs above a capacity, and a Run may hold a key both
// in a group and in a plain request, before or after it.
type mixedRuns struct {
	rng  *rand.Rand
	keys [][]byte
	gcra bucket.GCRA
}

func newMixedRuns(seed uint64) *mixedRuns {
	m := &mixedRuns{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for i := range 10 {
		m.keys = append(m.keys, []byte(fmt.Sprint("m", i)))
	}
	for i := range 3 {
		m.keys = append(m.keys, []byte(fmt.Sprint("{tag}x", i)))
	}
	m.keys = append(m.keys, []byte("th0"), []byte("th1")) // CL.THROTTLE keys, mostly
	m.gcra, _ = bucket.NewGCRA(3, 2, 1, 1)
	return m
}

func (m *mixedRuns) key() []byte { return m.keys[m.rng.IntN(len(m.keys))] }

// limit is the key's usual limit, now and then a smaller one (clamping).
func (m *mixedRuns) limit(k []byte) bucket.Limit {
	l := bucket.Limit{Capacity: float64(5 + 5*(int(k[len(k)-1])%3)), Rate: []float64{0.5, 2}[int(k[0])%2]}
	if m.rng.IntN(8) == 0 {
		l.Capacity = 3
	}
	return l
}

func (m *mixedRuns) cost(l bucket.Limit) float64 {
	return []float64{0, 1, 1, 2, 3, l.Capacity + 1}[m.rng.IntN(6)]
}

func (m *mixedRuns) plain() decide.Request {
	k := m.key()
	l := m.limit(k)
	switch m.rng.IntN(10) {
	case 0:
		return decide.Request{Kind: decide.Peek, Key: k, Limit: l, Cost: m.cost(l)}
	case 1:
		return decide.Request{Kind: decide.Reset, Key: k}
	case 2, 3:
		return decide.Request{Kind: decide.Throttle, Key: k, Quota: m.gcra}
	}
	if k[0] == 't' && m.rng.IntN(2) == 0 { // keep the throttle keys mostly GCRA
		return decide.Request{Kind: decide.Throttle, Key: k, Quota: m.gcra}
	}
	return decide.Request{Kind: decide.Acquire, Key: k, Limit: l, Cost: m.cost(l)}
}

func (m *mixedRuns) group() []decide.Request {
	n := 1 + m.rng.IntN(4)
	perm := m.rng.Perm(len(m.keys))[:n]
	cost := []float64{0, 1, 2, 11}[m.rng.IntN(4)]
	var reqs []decide.Request
	for _, i := range perm {
		k := m.keys[i]
		reqs = append(reqs, decide.Request{Kind: decide.Acquire, Key: k, Limit: m.limit(k), Cost: cost})
	}
	return reqs
}

// next adds one Run's requests to every caller, the same on each.
func (m *mixedRuns) next(callers ...*Caller) (desc []string) {
	for range 1 + m.rng.IntN(6) {
		if m.rng.IntN(3) == 0 {
			g := m.group()
			for _, c := range callers {
				c.AddAll(g)
			}
			desc = append(desc, fmt.Sprintf("group%v", groupDesc(g)))
			continue
		}
		r := m.plain()
		for _, c := range callers {
			c.Add(r)
		}
		desc = append(desc, fmt.Sprintf("%v %s cost %v cap %v", r.Kind, r.Key, r.Cost, r.Limit.Capacity))
	}
	return desc
}

func groupDesc(g []decide.Request) []string {
	var s []string
	for _, r := range g {
		s = append(s, fmt.Sprintf("%s/%v/%v", r.Key, r.Cost, r.Limit.Capacity))
	}
	return s
}

// TestReviewRunsAcrossShardsAnswerAsOnOneShard: the same random Runs on a
// group of one shard (every group decided by acquireAll, no vote, no
// post across queues) and on one of eight (votes, posts to several
// queues, co-tagged groups on one shard) give the same answers and the
// same counters, Run after Run. The one-shard group is the reference:
// requests take effect in the order they were added and a group is all
// or nothing, whatever the shards.
func TestReviewRunsAcrossShardsAnswerAsOnOneShard(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	m := newMixedRuns(seed)
	one, clk1 := newTestGroup(t, Config{Shards: 1, SweepInterval: time.Hour})
	eight, clk8 := newTestGroup(t, Config{Shards: 8, SweepInterval: time.Hour})
	c1, c8 := one.NewCaller(), eight.NewCaller()
	votes := 0
	for run := range 3000 {
		desc := m.next(c1, c8)
		votes += c8.nvotes
		a1, err1 := c1.Run()
		a8, err8 := c8.Run()
		if err1 != nil || err8 != nil {
			t.Fatalf("seed %d, Run %d: errors %v, %v", seed, run, err1, err8)
		}
		if !reflect.DeepEqual(a1, a8) {
			t.Fatalf("seed %d, Run %d %q:\none shard   %+v\neight shards %+v", seed, run, desc, a1, a8)
		}
		s1, s8 := one.Stats().Stats, eight.Stats().Stats
		s1.Shards, s8.Shards, s1.TableBytes, s8.TableBytes, s1.QueueDepth, s8.QueueDepth = 0, 0, 0, 0, 0, 0
		if s1 != s8 {
			t.Fatalf("seed %d, Run %d %q: counters differ:\none shard   %+v\neight shards %+v", seed, run, desc, s1, s8)
		}
		d := time.Duration(m.rng.IntN(1500)) * time.Millisecond
		clk1.Advance(d)
		clk8.Advance(d)
	}
	if votes < 300 {
		t.Fatalf("seed %d: only %d votes in 3000 Runs: the probe does not exercise them", seed, votes)
	}
}
