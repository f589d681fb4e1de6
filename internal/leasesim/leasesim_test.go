package leasesim

import (
	"testing"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/lease"
)

func TestCheckerFindsTheBusiestWindow(t *testing.T) {
	c := checker{key: Key{Limit: bucket.Limit{Capacity: 10, Rate: 10}}}
	for _, g := range []grant{{0, 5}, {50_000, 5}, {100_000, 1}, {100_001, 4}, {300_000, 1}} {
		c.allow(g.cost, g.at)
	}
	w := c.window(100_000)
	// [0, 100 ms] holds 11 (the window is closed); [50 ms, 150 ms] holds 10.
	if w.Max != 11 || w.At != 0 || w.Bound != 11 || w.Over != 0 {
		t.Fatalf("100 ms window %+v, want max 11 at 0 against bound 11, over 0", w)
	}
	c.allow(1, 60_000)
	if w := c.window(100_000); w.Max != 12 || w.Over != 1 {
		t.Fatalf("one more grant inside: %+v, want max 12, over 1", w)
	}
	if w := c.window(1_000_000); w.Max != 17 || w.Bound != 20 || w.Over != 0 {
		t.Fatalf("1 s window %+v, want every grant (17) against 20", w)
	}
}

func TestIdealBucketGrantsWhatOneBucketWould(t *testing.T) {
	c := checker{key: Key{Limit: bucket.Limit{Capacity: 10, Rate: 10}}}
	for i := range 100 { // 1 s of 100 calls a second: capacity + rate*1s
		c.demand(1, int64(i)*10_000)
	}
	if c.idealTokens != 19 && c.idealTokens != 20 {
		t.Fatalf("ideal granted %v over 1 s, want capacity + rate*0.99 s (19 or 20)", c.idealTokens)
	}
}

func TestRunIsDeterministicForASeed(t *testing.T) {
	cfg := Config{Seed: 7, Instances: 10, Duration: 1_000_000, Shape: Zipf, Demand: 10, Net: DefaultNetwork, Crashes: 2, ClockSkew: 0.01}
	a, b := Run(cfg), Run(cfg)
	if a.String() != b.String() || a.Events != b.Events {
		t.Fatalf("two runs of one config differ:\n%v\n%v", a, b)
	}
	cfg.Seed = 8
	if c := Run(cfg); c.Events == a.Events && c.String() == a.String() {
		t.Fatalf("another seed ran the same: %v", c)
	}
}

// trap is the scenario the naive designs fail in: leases filled by calm
// demand, left idle through a silence in which the buckets refill (and
// records lapse), then a burst. Idle is longer than the TTL, as a policy
// may set it, so that no give-back hides what the deadline does.
func trap(seed uint64) Config {
	p := lease.DefaultPolicy
	p.Idle = 5_000_000
	d := int64(20_000_000)
	if testing.Short() {
		d = 10_000_000
	}
	return Config{Seed: seed, Instances: 10, Duration: d, Shape: Bursts, Demand: 10,
		Keys: TrapKeys, Net: DefaultNetwork, ClockSkew: 0.01, Policy: p}
}

// naiveFails runs the trap with and without the naive change and wants
// the change, and only it, to over-grant.
func naiveFails(t *testing.T, naive func(*Config)) {
	t.Helper()
	for _, seed := range []uint64{1, 2} {
		cfg := trap(seed)
		if r := Run(cfg); r.Over() != 0 {
			t.Fatalf("the real design over-grants in the trap: %v", r)
		}
		naive(&cfg)
		r := Run(cfg)
		t.Logf("naive, seed %d: %v", seed, r)
		if r.Over() == 0 {
			t.Errorf("the naive design kept the bound (seed %d): %v", seed, r)
		}
	}
}

func TestNaiveInstancesIgnoringTheDeadlineOverGrant(t *testing.T) {
	naiveFails(t, func(c *Config) { c.IgnoreDeadline = true })
}

func TestNaiveRedisNotCountingLeasesOverGrants(t *testing.T) {
	naiveFails(t, func(c *Config) { c.ForgetHeld = true; c.Policy = lease.DefaultPolicy })
}

func TestClocksSlowBeyondTheMarginOverGrant(t *testing.T) {
	naiveFails(t, func(c *Config) { c.ClockRate = 0.5 })
}

func TestClocksSlowWithinTheMarginKeepTheBound(t *testing.T) {
	// The margin is a quarter of the TTL: a clock 20% slow spends until
	// 1.5 s / 0.8 = 1.875 s after the send, before the record lapses.
	for _, seed := range []uint64{1, 2} {
		cfg := trap(seed)
		cfg.ClockRate, cfg.ClockSkew = 0.8, 0
		if r := Run(cfg); r.Over() != 0 {
			t.Errorf("clocks 20%% slow over-grant: %v", r)
		}
	}
}

// grid is the table's rows (TableRows), 3 s each and 12 s for the
// bursts; with -short 1 s, 4 s for the bursts, at levels 2x and 100x.
func grid(seed uint64) []Config {
	d := int64(3_000_000)
	if testing.Short() {
		d = 1_000_000
	}
	var cs []Config
	for _, c := range TableRows(seed, d) {
		if c.Shape == Bursts {
			c.Duration = 4 * d
		} else if testing.Short() && c.Demand != 2 && c.Demand != 100 {
			continue
		}
		cs = append(cs, c)
	}
	return cs
}

func TestRealDesignKeepsTheBound(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, seed := range seeds {
		for _, cfg := range grid(seed) {
			r := Run(cfg)
			t.Log(r)
			if r.Over() != 0 {
				t.Errorf("seed %d over-grants: %v", seed, r)
			}
			if lease, ideal := r.Granted(); lease < 0.7*ideal {
				t.Errorf("seed %d grants %.0f, under 70%% of the ideal %.0f: %v", seed, lease, ideal, r)
			}
			if r.Decisions < r.Calls*99/100 {
				t.Errorf("seed %d answered %d of %d calls: %v", seed, r.Decisions, r.Calls, r)
			}
		}
	}
}

func TestCheckerJudgesEachWindowByTheLimitInForce(t *testing.T) {
	k := Key{Limit: bucket.Limit{Capacity: 10, Rate: 10}, Then: bucket.Limit{Capacity: 2, Rate: 10}, At: 1_000_000}
	c := checker{key: k}
	c.allow(10, 0)        // the old bucket's capacity: within 11
	c.allow(3, 1_500_000) // after the change, 3 in 100 ms against 2 + 1
	c.allow(1, 1_550_000) // 4 against 3: over by 1
	w := c.window(100_000)
	if w.At != 1_500_000 || w.Max != 4 || w.Bound != 3 || w.Over != 1 {
		t.Fatalf("%+v, want the window at 1.5 s: 4 against the new limit's 3, over 1", w)
	}
	if b := c.bound(950_000, 100_000); b != 11 {
		t.Fatalf("a window across the change is bounded by %v, want the larger limit's 11", b)
	}
}

// changing is TrapKeys whose limits change at 40% of the run: k0's
// capacity halves, fast's rate falls tenfold as its capacity doubles.
func changing(d int64) []Key {
	ks := append([]Key(nil), TrapKeys...)
	ks[0].Then, ks[0].At = bucket.Limit{Capacity: 50, Rate: 100}, d*4/10
	ks[1].Then, ks[1].At = bucket.Limit{Capacity: 200, Rate: 100}, d*4/10
	return ks
}

func TestLimitChangesKeepTheBound(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		for _, sh := range []Shape{Uniform, Bursts} {
			cfg := trap(seed)
			cfg.Duration = 10_000_000
			if testing.Short() {
				cfg.Duration = 3_000_000
			}
			cfg.Shape, cfg.Keys = sh, changing(cfg.Duration)
			r := Run(cfg)
			t.Log(r)
			if r.Over() != 0 {
				t.Errorf("a limit change over-grants: %v", r)
			}
			if r.Decisions < r.Calls*99/100 {
				t.Errorf("answered %d of %d calls: %v", r.Decisions, r.Calls, r)
			}
		}
	}
}
