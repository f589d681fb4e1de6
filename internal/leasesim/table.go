package leasesim

// TableRows are the runs of the table in docs/leases-simulation.md, each
// for duration µs of the true clock: 2, 10 and 100 instances, demand
// spread evenly and by Zipf at 0.5, 2, 10 and 100 times the rate, with 1%
// loss, long legs, late calls, crashes (a tenth of the instances, at least
// one), joins and 1% clock skew; the bursts on TrapKeys; and one row with
// neither loss nor crashes, to compare.
func TableRows(seed uint64, duration int64) []Config {
	var rs []Config
	for _, n := range []int{2, 10, 100} {
		base := Config{Seed: seed, Instances: n, Duration: duration, Net: DefaultNetwork,
			ClockSkew: 0.01, Crashes: max(1, n/10), Joins: n / 10}
		for _, sh := range []Shape{Uniform, Zipf} {
			for _, lv := range []float64{0.5, 2, 10, 100} {
				c := base
				c.Shape, c.Demand = sh, lv
				rs = append(rs, c)
			}
		}
		b := base
		b.Shape, b.Demand, b.Keys = Bursts, 10, TrapKeys
		rs = append(rs, b)
	}
	calm := Config{Seed: seed, Instances: 10, Duration: duration, Demand: 10, Net: DefaultNetwork, ClockSkew: 0.01}
	calm.Net.Loss = 0
	return append(rs, calm)
}
