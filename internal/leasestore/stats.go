package leasestore

import (
	"strconv"

	"github.com/bucketd/bucketd/internal/info"
)

// Stats are lease mode's own figures, for INFO's Leases section and the
// bucketd_lease_* metrics (docs/leases.md, "Watching it").
type Stats struct {
	// FromLease counts client decisions the instance answered itself:
	// from a lease, or denied while Redis's last denial of the key stands.
	FromLease int64
	// FromRedis counts client decisions Redis made (a key's miss).
	FromRedis int64
	// LeaseCalls counts lease calls sent (misses, renewals, give-backs),
	// PlainCalls plain acquires sent (a miss while the key's lease call
	// was out, or a key beyond the shards' bound of entries), FailedCalls
	// lease calls that got no reply (their lease was dropped).
	LeaseCalls, PlainCalls, FailedCalls int64
	// Leased, Returned and Dropped are tokens: granted into leases, given
	// back unspent, and given up without a reply (Redis lets them lapse).
	Leased, Returned, Dropped float64
	// Leases is the keys whose entry holds a lease now.
	Leases int64
}

// LeaseStats reads the counters without stopping anything.
func (s *Store) LeaseStats() Stats {
	local := s.group.Stats().Stats
	leased, returned, dropped := s.group.LeaseTokens()
	return Stats{
		FromLease:   local.Allowed + local.Denied,
		FromRedis:   s.n.fromRedis.Load(),
		LeaseCalls:  s.n.leaseCalls.Load(),
		PlainCalls:  s.n.plainCalls.Load(),
		FailedCalls: s.n.failed.Load(),
		Leased:      leased,
		Returned:    returned,
		Dropped:     dropped,
		Leases:      s.group.Leases(),
	}
}

// Info is the INFO section "Leases" (docs/info.md).
func (s *Store) Info() info.Section {
	st := s.LeaseStats()
	p := s.policy
	return info.Section{Title: "Leases", Fields: []info.Field{
		info.Int("lease_target_ms", p.Target/1000),
		info.Text("lease_max_share", strconv.FormatFloat(p.MaxShare, 'g', -1, 64)),
		info.Int("lease_ttl_ms", p.TTL/1000),
		info.Int("leases", st.Leases),
		info.Int("lease_decisions_local_total", st.FromLease),
		info.Int("lease_decisions_redis_total", st.FromRedis),
		info.Int("lease_calls_total", st.LeaseCalls),
		info.Int("lease_plain_calls_total", st.PlainCalls),
		info.Int("lease_failed_calls_total", st.FailedCalls),
		info.Int("lease_tokens_leased_total", int64(st.Leased)),
		info.Int("lease_tokens_returned_total", int64(st.Returned)),
		info.Int("lease_tokens_dropped_total", int64(st.Dropped)),
	}}
}
