package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The lease tests run several bucketd instances in lease mode on one real
// Redis (or a three-master Redis Cluster) and check the contract of lease
// mode on what the clients were granted: in no window of length w do the
// instances together grant more than capacity + rate*w, as one bucket
// would, through kill -9, restarts, idle leases and TB.RESET.

// grant is one allowed TB.ACQUIRE as its client saw it: the decision was
// made between sent and got.
type grant struct{ sent, got time.Time }

// grants collects what a load's clients were granted, from any goroutine.
type grants struct {
	mu    sync.Mutex
	all   []grant
	calls atomic.Int64
	errs  atomic.Int64
}

func (g *grants) add(x grant) {
	g.mu.Lock()
	g.all = append(g.all, x)
	g.mu.Unlock()
}

// windowed is the most grants in any window of length w, and the bound
// one bucket gives such a window. A grant is placed at the time its reply
// came; since the decision was made up to the slowest round trip earlier,
// the bound is for a window that much longer: capacity + rate * (w + rtt).
func (g *grants) windowed(w time.Duration, capacity, rate float64) (most int, bound float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	at := make([]time.Time, len(g.all))
	var rtt time.Duration
	for i, x := range g.all {
		at[i] = x.got
		rtt = max(rtt, x.got.Sub(x.sent))
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	j := 0
	for i := range at {
		for at[i].Sub(at[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most, capacity + rate*(w+rtt).Seconds()
}

// hammerKey has conns connections to each address ask TB.ACQUIRE key far
// above its rate until stop is closed, and records the grants. Every
// client asks with a fresh connection pool of its own, go-redis defaults.
func hammerKey(t *testing.T, addrs func() []string, conns int, key string, capacity, rate float64, stop <-chan struct{}, g *grants) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	capS, rateS := fmt.Sprint(capacity), fmt.Sprint(rate)
	for i := range len(addrs()) {
		for range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var c *redis.Client
				var at string
				defer func() {
					if c != nil {
						c.Close()
					}
				}()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if a := addrs()[i]; a != at { // the instance was replaced
						if c != nil {
							c.Close()
						}
						c, at = redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1}), a
					}
					sent := time.Now()
					n, err := c.Do(context.Background(), "TB.ACQUIRE", key, capS, rateS).Int64()
					got := time.Now()
					g.calls.Add(1)
					switch {
					case err != nil:
						g.errs.Add(1)
						time.Sleep(time.Millisecond) // a killed instance: wait for its replacement
					case n == 1:
						g.add(grant{sent: sent, got: got})
					}
				}
			}()
		}
	}
	return &wg
}

// checkWindows fails the test when any window of 100 ms or 1 s saw more
// grants than one bucket allows, and logs the figures either way.
func checkWindows(t *testing.T, g *grants, capacity, rate float64) {
	t.Helper()
	for _, w := range []time.Duration{100 * time.Millisecond, time.Second} {
		most, bound := g.windowed(w, capacity, rate)
		t.Logf("most grants in a %v window: %d (bound %.1f)", w, most, bound)
		if float64(most) > bound {
			t.Errorf("%d grants in a %v window: more than capacity + rate*w = %.1f", most, w, bound)
		}
	}
}

// leaseFlags are the flags of a lease-mode instance on the Redis at url
// (or the cluster of nodes, with cluster set).
func leaseFlags(target string, cluster bool, extra ...string) []string {
	store := "--store"
	if cluster {
		store = "--store-cluster"
	}
	return append([]string{store, target, "--leases", "--redis-timeout", "100ms", "--lease-ttl", "1s", "--lease-target", "200ms"}, extra...)
}

// runKillAndReplace is the multi-instance run: three instances, a hot key
// asked far above its rate for the run's length, one instance killed with
// kill -9 at a third of it and replaced at two thirds.
func runKillAndReplace(t *testing.T, target string, cluster bool) {
	const capacity, rate = 100.0, 200.0
	run := 20 * time.Second
	flags := leaseFlags(target, cluster)
	var mu sync.Mutex
	procs := []*process{startPlainBinary(t, flags...), startPlainBinary(t, flags...), startPlainBinary(t, flags...)}
	addrs := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return []string{procs[0].addr, procs[1].addr, procs[2].addr}
	}
	g := &grants{}
	stop := make(chan struct{})
	start := time.Now()
	wg := hammerKey(t, addrs, 4, "{hot}:key", capacity, rate, stop, g)
	time.Sleep(run / 3) // real time is the point: leases live and lapse in it
	procs[0].cmd.Process.Kill()
	<-procs[0].exited
	time.Sleep(run / 3)
	next := startPlainBinary(t, flags...)
	mu.Lock()
	procs[0] = next
	mu.Unlock()
	time.Sleep(run / 3)
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	checkWindows(t, g, capacity, rate)
	ideal := capacity + rate*elapsed.Seconds()
	t.Logf("%d calls, %d errors (the killed instance's), %d grants of one bucket's %.0f over %v (%.1f%%)",
		g.calls.Load(), g.errs.Load(), len(g.all), ideal, elapsed.Round(time.Millisecond), 100*float64(len(g.all))/ideal)
	if float64(len(g.all)) < 0.5*ideal {
		t.Errorf("%d grants of one bucket's %.0f: leases strand more than half of the limit", len(g.all), ideal)
	}
}

// TestLeasesNeverGrantMoreThanOneBucket: three instances on one Redis.
func TestLeasesNeverGrantMoreThanOneBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("20 s of real time: the full suite runs it")
	}
	t.Parallel()
	rs := redistest.Start(t)
	runKillAndReplace(t, "redis://"+rs.Addr, false)
}

// TestLeasesOnAClusterNeverGrantMoreThanOneBucket: the same on a Redis
// Cluster of three masters.
func TestLeasesOnAClusterNeverGrantMoreThanOneBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("20 s of real time: the full suite runs it")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	runKillAndReplace(t, strings.Join(cl.Addrs(), ","), true)
}

// burstFor has every instance ask far above the rate for d and returns
// the grants.
func burstFor(t *testing.T, addrs []string, key string, capacity, rate float64, d time.Duration) *grants {
	t.Helper()
	g := &grants{}
	stop := make(chan struct{})
	wg := hammerKey(t, func() []string { return addrs }, 4, key, capacity, rate, stop, g)
	time.Sleep(d)
	close(stop)
	wg.Wait()
	return g
}

// TestLeasesIdleThenBurst: instances take leases, go idle long enough for
// the Redis bucket to refill, then burst: the leases are not spent on top
// of a full bucket (the burst of twice the capacity a naive design gives).
func TestLeasesIdleThenBurst(t *testing.T) {
	rs := redistest.Start(t)
	const capacity, rate = 100.0, 500.0 // refills in 200 ms
	flags := leaseFlags("redis://"+rs.Addr, false, "--lease-ttl", "4s", "--lease-max-share", "0.5")
	addrs := []string{startPlainBinary(t, flags...).addr, startPlainBinary(t, flags...).addr, startPlainBinary(t, flags...).addr}
	warm := burstFor(t, addrs, "idle", capacity, rate, 500*time.Millisecond)
	time.Sleep(400 * time.Millisecond) // idle: the bucket refills; the leases (kept 2 s unused) stay
	g := burstFor(t, addrs, "idle", capacity, rate, 200*time.Millisecond)
	t.Logf("warm-up granted %d; the burst after the idle time %d", len(warm.all), len(g.all))
	checkWindows(t, g, capacity, rate)
}

// TestLeasesResetWithLeasesOut: TB.RESET on one instance while the others
// hold leases does not hand out the leased tokens a second time.
func TestLeasesResetWithLeasesOut(t *testing.T) {
	rs := redistest.Start(t)
	const capacity, rate = 100.0, 10.0
	flags := leaseFlags("redis://"+rs.Addr, false, "--lease-max-share", "0.5")
	a, b := startPlainBinary(t, flags...), startPlainBinary(t, flags...)
	burstFor(t, []string{a.addr, b.addr}, "reset", capacity, rate, 300*time.Millisecond) // both take leases
	if _, err := a.client(t).Do(context.Background(), "TB.RESET", "reset").Result(); err != nil {
		t.Fatal(err)
	}
	g := burstFor(t, []string{a.addr, b.addr}, "reset", capacity, rate, time.Second)
	most, bound := g.windowed(2*time.Second, capacity, rate)
	t.Logf("after TB.RESET, %d grants in 1 s (bound %.1f)", most, bound)
	if float64(most) > bound {
		t.Errorf("after TB.RESET, %d grants in 1 s: more than capacity + rate*w = %.1f", most, bound)
	}
	if most < int(capacity)/2 {
		t.Errorf("after TB.RESET, %d grants: the reset did not make the bucket full again", most)
	}
}
