package main

import (
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/config"
)

// TestRenewBelowKeepsRenewAheadOfDemand: a lease is renewed when
// renewAhead's worth of its target is left, at least a tenth and at most a
// quarter of it, and leasePolicy passes that on.
func TestRenewBelowKeepsRenewAheadOfDemand(t *testing.T) {
	for _, c := range []struct {
		target time.Duration
		want   float64
	}{
		{10 * time.Millisecond, 0.25},
		{200 * time.Millisecond, 0.25},
		{400 * time.Millisecond, 0.25},
		{500 * time.Millisecond, 0.2},
		{time.Second, 0.1},
		{time.Minute, 0.1},
		{0, 0.25},
	} {
		if got := renewBelow(c.target); got != c.want {
			t.Errorf("renewBelow(%v) = %v, want %v", c.target, got, c.want)
		}
		cfg := config.Config{LeaseTarget: c.target, LeaseTTL: 2 * time.Second, LeaseMaxShare: 0.1}
		if got := leasePolicy(cfg).RenewBelow; got != c.want {
			t.Errorf("leasePolicy with --lease-target %v: RenewBelow %v, want %v", c.target, got, c.want)
		}
	}
}
