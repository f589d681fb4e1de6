package leasestore

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/lease"
	"github.com/bucketd/bucketd/internal/redisstore"
	"github.com/bucketd/bucketd/internal/shard"
)

// The probes run lease stores against a real redis-server (internal/redistest,
// a free loopback port) with a short lease life, so that leases lapse,
// idle and renew within a test of a few seconds.

// testPolicy is a lease that lives 400 ms in Redis, is spent until 300 ms
// after its send, is given back after 200 ms unused and covers 50 ms of
// demand.
var testPolicy = lease.Policy{
	Target:     50_000,
	MaxShare:   0.1,
	TTL:        400_000,
	Margin:     100_000,
	Idle:       200_000,
	RenewBelow: 0.25,
}

// instance is one bucketd instance in lease mode: its lease store over its
// own Redis store, with its own lease id.
type instance struct {
	*Store
	redis *redisstore.Store
}

// startInstance starts a lease store on the Redis at addr as instance id,
// with Redis timeout timeout and policy pol; the test's cleanup closes it
// (the lease store first, as cmd/bucketd does).
func startInstance(t testing.TB, addr, id string, timeout time.Duration, pol lease.Policy) *instance {
	t.Helper()
	return startInstanceWith(t, addr, id, timeout, pol, shard.Config{Shards: 2})
}

// startInstanceWith is startInstance with the shards' settings sh (a
// test's clock, say).
func startInstanceWith(t testing.TB, addr, id string, timeout time.Duration, pol lease.Policy, sh shard.Config) *instance {
	t.Helper()
	o, err := redisstore.ClientOptions("redis://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(o)
	rs, err := redisstore.New(redisstore.Config{
		Client:   client,
		Prefix:   "tb:",
		Timeout:  timeout,
		Instance: id,
		LeaseTTL: time.Duration(pol.TTL) * time.Microsecond,
		Logger:   slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError + 4})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rs.LoadScript(ctx); err != nil {
		t.Fatalf("LoadScript: %v", err)
	}
	ls := New(Config{Shards: sh, Redis: rs, Policy: pol})
	t.Cleanup(func() {
		ls.Close()
		rs.Close()
		_ = client.Close() // the server may be gone
	})
	return &instance{Store: ls, redis: rs}
}

func acquireReq(key []byte, l bucket.Limit, cost float64) decide.Request {
	return decide.Request{Kind: decide.Acquire, Key: key, Limit: l, Cost: cost}
}

// run1 runs one request on c and returns its answer and error.
func run1(c decide.Caller, r decide.Request) (decide.Answer, error) {
	c.Add(r)
	as, err := c.Run()
	if err != nil {
		return decide.Answer{}, err
	}
	return as[0], nil
}

// grant is one allowed call as its client saw it: decided between start
// and end.
type grant struct{ start, end time.Time }

// ledger collects grants and Runs' durations from any goroutine.
type ledger struct {
	mu      sync.Mutex
	grants  []grant
	slowest time.Duration
	runs    int
}

func (g *ledger) note(start, end time.Time, allowed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.runs++
	g.slowest = max(g.slowest, end.Sub(start))
	if allowed {
		g.grants = append(g.grants, grant{start, end})
	}
}

// worst is the most grants, placed at their Run's return, in any window
// of length w among gs, and the bound one bucket gives that window widened
// by the slowest Run: capacity + rate*(w + slowest).
func worst(gs []grant, slowest, w time.Duration, capacity, rate float64) (most int, at time.Time, bound float64) {
	ends := make([]time.Time, len(gs))
	for i, x := range gs {
		ends[i] = x.end
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	j := 0
	for i := range ends {
		for ends[i].Sub(ends[j]) >= w {
			j++
		}
		if n := i - j + 1; n > most {
			most, at = n, ends[j]
		}
	}
	return most, at, capacity + rate*(w+slowest).Seconds()
}

// checkWindows fails t when any 100 ms or 1 s window of gs holds more
// grants than one bucket would allow.
func checkWindows(t *testing.T, what string, gs []grant, slowest time.Duration, capacity, rate float64) {
	t.Helper()
	for _, w := range []time.Duration{100 * time.Millisecond, time.Second} {
		most, at, bound := worst(gs, slowest, w, capacity, rate)
		t.Logf("%s: %d grants, at most %d in a %v window (from %v), bound %.1f (slowest Run %v)",
			what, len(gs), most, w, at.Format("15:04:05.000"), bound, slowest)
		if float64(most) > bound {
			t.Errorf("%s: over-grant: %d grants in a %v window from %v, bound capacity %v + rate %v * (w + slowest Run %v) = %.1f",
				what, most, w, at.Format("15:04:05.000"), capacity, rate, slowest, bound)
		}
	}
}

// hammer has n goroutines per instance ask key of l, each on a Caller of
// its own, until stop is closed, and notes every Run in g.
func hammer(insts []*instance, n int, key string, l bucket.Limit, stop <-chan struct{}, g *ledger) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, in := range insts {
		for range n {
			wg.Go(func() {
				c := in.NewCaller()
				k := []byte(key)
				for {
					select {
					case <-stop:
						return
					default:
					}
					start := time.Now()
					a, err := run1(c, acquireReq(k, l, 1))
					g.note(start, time.Now(), err == nil && a.Err == nil && a.Decision.Allowed)
				}
			})
		}
	}
	return &wg
}

func resetReq(key string) decide.Request {
	return decide.Request{Kind: decide.Reset, Key: []byte(key)}
}

// quiet drops go-redis's own log lines (a dial refused per call while a
// probe keeps Redis down).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	os.Exit(m.Run())
}
