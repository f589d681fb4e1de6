package shard

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
)

// firstErr keeps the first error the goroutines of a probe met, for the
// test's goroutine to report: a goroutine still stuck when the test gives
// up must not log after it ended.
type firstErr struct {
	mu  sync.Mutex
	err error
}

func (f *firstErr) set(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
}

func (f *firstErr) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// spendLog counts, per key, the tokens that allowed answers took.
type spendLog struct {
	mu    sync.Mutex
	spent map[string]float64
}

func (l *spendLog) add(key []byte, cost float64) {
	l.mu.Lock()
	l.spent[string(key)] += cost
	l.mu.Unlock()
}

// item is one piece of a Run: a plain request or a group.
type item struct {
	reqs  []decide.Request
	group bool
}

// addItems adds items to c in the order given and returns, per item, the
// position of its first answer.
func addItems(c *Caller, items []item) []int {
	at := make([]int, len(items))
	n := 0
	for i, it := range items {
		at[i] = n
		if it.group {
			c.AddAll(it.reqs)
		} else {
			c.Add(it.reqs[0])
		}
		n += len(it.reqs)
	}
	return at
}

// account checks one Run's answers and logs what they took: an allowed
// group took its cost from every member, a denied one from none; a plain
// allowed TB.ACQUIRE took its cost.
func account(log *spendLog, items []item, at []int, res []decide.Answer) {
	for i, it := range items {
		ans := res[at[i] : at[i]+len(it.reqs)]
		allowed := true
		for _, a := range ans {
			allowed = allowed && a.Err == nil && a.Decision.Allowed
		}
		if !allowed {
			continue
		}
		for _, r := range it.reqs {
			log.add(r.Key, r.Cost)
		}
	}
}

// runItems adds items to c, runs them, and logs what the allowed answers
// took.
func runItems(c *Caller, log *spendLog, items []item) (res []decide.Answer, at []int, err error) {
	at = addItems(c, items)
	res, err = c.Run()
	if err == nil {
		account(log, items, at, res)
	}
	return res, at, err
}

// checkSpent peeks every key of log and of keys (with capacity caps[key])
// and fails unless each bucket lost exactly what the allowed answers
// took. The clock does not move, so nothing refills.
func checkSpent(t *testing.T, g *Group, log *spendLog, caps map[string]float64) {
	t.Helper()
	c := g.NewCaller()
	for key, capacity := range caps {
		d := runOne(t, c, decide.Request{Kind: decide.Acquire, Key: []byte(key), Limit: bucket.Limit{Capacity: capacity, Rate: 1}}).Decision
		if lost, took := capacity-float64(d.Remaining), log.spent[key]; lost != took {
			t.Errorf("%s: the bucket lost %v tokens, the allowed answers took %v (capacity %v)", key, lost, took, capacity)
		}
	}
}

// TestReviewGroupsAcrossShardsNeverOverGrant: 32 goroutines, each Run a
// random order of: groups across two shards sharing the hot buckets H1
// and H2 with the goroutine's own bucket, a group over the hot pair in
// either key order, a group of three shards, a co-tagged group on one
// shard, plain TB.ACQUIREs on the hot buckets, a group whose member is a
// CL.THROTTLE key, a group of cost 0 and one costing more than a
// capacity. Shards sweep every millisecond, so sweeps interleave with the
// votes. Every bucket ends having lost exactly what the allowed answers
// took, and no denied group took anything. A hang shows as the 30 s bound.
func TestReviewGroupsAcrossShardsNeverOverGrant(t *testing.T) {
	g, _ := newProbeGroup(t, Config{Shards: 8, SweepInterval: time.Millisecond})
	d := keysOnDistinctShards(t, g, 3)
	p, q, r := shardOfKey(g, d[0]), shardOfKey(g, d[1]), shardOfKey(g, d[2])
	h1s, h2s, h3s := keysOnShard(t, g, p, 2, "h1-"), keysOnShard(t, g, q, 2, "h2-"), keysOnShard(t, g, r, 1, "h3-")
	h1, h1b, h2, h2b, h3 := h1s[0], h1s[1], h2s[0], h2s[1], h3s[0]
	caps := map[string]float64{string(h1): 400, string(h1b): 300, string(h2): 400, string(h2b): 300, string(h3): 200,
		"{hot}a": 250, "{hot}b": 250}
	req := func(k []byte, cost float64) decide.Request {
		c := caps[string(k)]
		return decide.Request{Kind: decide.Acquire, Key: k, Limit: bucket.Limit{Capacity: c, Rate: 1}, Cost: cost}
	}
	c := g.NewCaller()
	q0, _ := bucket.NewGCRA(5, 1, 60, 1)
	thr := []byte("throttled")
	if a := runOne(t, c, decide.Request{Kind: decide.Throttle, Key: thr, Quota: q0}); a.Err != nil {
		t.Fatal(a.Err)
	}
	log := &spendLog{spent: map[string]float64{}}
	var errs firstErr
	const workers, rounds = 32, 150
	for w := range workers { // before the goroutines, which read caps
		caps[fmt.Sprint("user-", w)] = 1e6
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		user := []byte(fmt.Sprint("user-", w))
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			c := g.NewCaller()
			all := []item{
				{group: true, reqs: []decide.Request{req(user, 1), req(h1, 1)}},
				{group: true, reqs: []decide.Request{req(h1, 2), req(h2, 2)}},
				{group: true, reqs: []decide.Request{req(h2b, 1), req(h1b, 1)}}, // the opposite key order of the next
				{group: true, reqs: []decide.Request{req(h1b, 1), req(h2b, 1), req(user, 1)}},
				{group: true, reqs: []decide.Request{req(h3, 1), req(h2, 1), req(h1, 1)}},
				{group: true, reqs: []decide.Request{req([]byte("{hot}a"), 1), req([]byte("{hot}b"), 1)}},
				{reqs: []decide.Request{req(h1, 1)}},
				{reqs: []decide.Request{req(h2, 1)}},
				{group: true, reqs: []decide.Request{req(h1, 1), req(thr, 1)}},
				{group: true, reqs: []decide.Request{req(h1, 0), req(h2, 0), req(user, 0)}},
				{group: true, reqs: []decide.Request{req(h2, 401), req(user, 401)}},
			}
			<-start
			for range rounds {
				perm := rng.Perm(len(all))[:2+rng.IntN(5)]
				items := make([]item, len(perm))
				for k, i := range perm {
					items[k] = all[i]
				}
				res, at, err := runItems(c, log, items)
				if err != nil {
					errs.set(err)
					return
				}
				for k, it := range items {
					switch perm[k] {
					case 8:
						if res[at[k]+1].Err != decide.ErrWrongType || res[at[k]].Err != nil {
							errs.set(fmt.Errorf("group with a CL.THROTTLE key answered %+v", res[at[k]:at[k]+2]))
						}
					case 9:
						for _, a := range res[at[k] : at[k]+len(it.reqs)] {
							if !a.Decision.Allowed {
								errs.set(fmt.Errorf("a group of cost 0 was refused: %+v", a))
							}
						}
					case 10:
						if a := res[at[k]]; a.Decision.Allowed || a.Decision.RetryAfterMs != -1 {
							errs.set(fmt.Errorf("a cost above H2's capacity answered %+v", a))
						}
					}
				}
			}
		})
	}
	close(start)
	if !within(30*time.Second, wg.Wait) {
		t.Fatal("the callers did not all finish within 30 s")
	}
	if err := errs.get(); err != nil {
		t.Fatal(err)
	}
	for _, k := range [][]byte{h1, h2} {
		if log.spent[string(k)] != caps[string(k)] {
			t.Logf("%s: %v of %v taken (the demand was meant to exhaust it)", k, log.spent[string(k)], caps[string(k)])
		}
	}
	checkSpent(t, g, log, caps)
	if a := runOne(t, c, decide.Request{Kind: decide.Throttle, Key: thr, Quota: q0}); a.Err != nil {
		t.Fatalf("the CL.THROTTLE key after the groups: %v", a.Err)
	}
}

// TestReviewVotesOverEveryPairOfShardsNeverDeadlock: each Run holds two
// groups over the same two shards in opposite key order, a group over
// three shards in a rotating order, a co-tagged group and plain requests
// on the same keys as the groups, before and after them. Every pair of
// the eight shards is used, by 24 goroutines at once. All finish, and
// every bucket lost exactly what was granted (all are large enough to
// grant everything).
func TestReviewVotesOverEveryPairOfShardsNeverDeadlock(t *testing.T) {
	g, _ := newProbeGroup(t, Config{Shards: 8, SweepInterval: time.Hour})
	var ks [8][2][]byte
	for s := range 8 {
		k := keysOnShard(t, g, s, 2, fmt.Sprint("s", s, "-"))
		ks[s] = [2][]byte{k[0], k[1]}
	}
	const capacity = 1e9
	req := func(k []byte) decide.Request {
		return decide.Request{Kind: decide.Acquire, Key: k, Limit: bucket.Limit{Capacity: capacity, Rate: 1}, Cost: 1}
	}
	log := &spendLog{spent: map[string]float64{}}
	var errs firstErr
	caps := map[string]float64{}
	for s := range 8 {
		caps[string(ks[s][0])], caps[string(ks[s][1])] = capacity, capacity
	}
	const workers, rounds = 24, 200
	var progress [workers]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			c := g.NewCaller()
			for r := range rounds {
				a := rng.IntN(8)
				b := (a + 1 + rng.IntN(7)) % 8
				x := (b + 1 + rng.IntN(7)) % 8
				items := []item{
					{group: true, reqs: []decide.Request{req(ks[a][0]), req(ks[b][0])}},
					{group: true, reqs: []decide.Request{req(ks[b][1]), req(ks[a][1])}},
					{reqs: []decide.Request{req(ks[a][0])}},
					{reqs: []decide.Request{req(ks[b][1])}},
				}
				if x != a {
					tri := []decide.Request{req(ks[a][1]), req(ks[b][0]), req(ks[x][0])}
					for range r % 3 {
						tri = append(tri[1:], tri[0])
					}
					items = append(items, item{group: true, reqs: tri})
				}
				items = append(items, item{group: true, reqs: []decide.Request{
					req([]byte(fmt.Sprint("{w", w, "}a"))), req([]byte(fmt.Sprint("{w", w, "}b")))}})
				rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
				if _, _, err := runItems(c, log, items); err != nil {
					errs.set(err)
					return
				}
				progress[w].Add(1)
			}
		})
	}
	if !within(30*time.Second, wg.Wait) {
		var stuck []string
		for w := range workers {
			if n := progress[w].Load(); n < rounds {
				stuck = append(stuck, fmt.Sprintf("goroutine %d after %d Runs", w, n))
			}
		}
		t.Fatalf("Runs with votes over every pair of shards did not finish within 30 s: %v; queues %v", stuck, g.QueueDepths(nil))
	}
	if err := errs.get(); err != nil {
		t.Fatal(err)
	}
	checkSpent(t, g, log, caps)
	var total float64
	for _, k := range ks {
		total += log.spent[string(k[0])] + log.spent[string(k[1])]
	}
	if total == 0 {
		t.Fatal("nothing was granted: the probe proves nothing")
	}
}

// TestReviewNoLostWakeUps: posts that find a shard's goroutine busy, idle
// or going idle are all run. The sweep interval is an hour, so nothing but
// a post's wake signal gets an idle shard going again: a lost wake-up
// leaves a Run waiting until the 30 s bound. First one caller per shard,
// so that the shard goes idle after every Run and the next post races its
// going idle (a post landing between the owner's empty take and its
// marking itself idle, say, is lost); then four callers per shard, Runs on
// two shards and maintenance calls, so that the owner's double buffer is
// swapped while others append: the race detector sees any append into
// the list being run.
func TestReviewNoLostWakeUps(t *testing.T) {
	g, _ := newProbeGroup(t, Config{Shards: 4, SweepInterval: time.Hour})
	var keys [4][]byte
	for s := range 4 {
		keys[s] = keysOnShard(t, g, s, 1, fmt.Sprint("w", s, "-"))[0]
	}
	want := int64(0)
	for _, phase := range []struct{ posters, rounds int }{{4, 10000}, {16, 1000}} {
		progress := make([]atomic.Int64, phase.posters+4)
		var errs firstErr
		var wg sync.WaitGroup
		for w := range phase.posters {
			wg.Go(func() {
				c := g.NewCaller()
				for r := range phase.rounds {
					c.Add(acquire(string(keys[w%4]), 1e9, 1, 1))
					if phase.posters > 4 && r%5 == 0 { // a Run on two shards
						c.Add(acquire(string(keys[(w+1)%4]), 1e9, 1, 1))
					}
					if _, err := c.Run(); err != nil {
						errs.set(err)
						return
					}
					progress[w].Add(1)
				}
			})
			want += int64(phase.rounds)
			if phase.posters > 4 {
				want += int64((phase.rounds + 4) / 5)
			}
		}
		for m := range 4 {
			if phase.posters == 4 {
				break
			}
			wg.Go(func() {
				for range phase.rounds / 5 {
					if _, err := g.Live([]string{string(keys[m])}); err != nil {
						errs.set(err)
						return
					}
					progress[phase.posters+m].Add(1)
				}
			})
		}
		if !within(30*time.Second, wg.Wait) {
			var p []int64
			for i := range progress {
				p = append(p, progress[i].Load())
			}
			t.Fatalf("%d callers: posts were not all run within 30 s (a lost wake-up): progress %v, queues %v",
				phase.posters, p, g.QueueDepths(nil))
		}
		if err := errs.get(); err != nil {
			t.Fatal(err)
		}
	}
	if st := g.Stats(); st.Allowed != want {
		t.Fatalf("%d decisions, want %d", st.Allowed, want)
	}
}
