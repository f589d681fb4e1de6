package main

import (
	"testing"
	"time"
)

func TestGubernatorRequest(t *testing.T) {
	lim := limit{capacity: 100, ratePerSec: 50}
	for _, tt := range []struct {
		window                 time.Duration
		limit, duration, burst int64
	}{
		{0, 100, 2000, 100},          // capacity per capacity/rate
		{time.Second, 50, 1000, 100}, // rate x window per window, burst capacity
		{100 * time.Millisecond, 5, 100, 100},
	} {
		r := (&gubernatorContender{lim: lim, window: tt.window}).request("x")
		if r.Limit != tt.limit || r.Duration != tt.duration || r.Burst != tt.burst || r.Hits != 1 || r.Name != "bench-x" {
			t.Errorf("window %v: limit %d duration %d burst %d hits %d name %q, want %d %d %d 1 bench-x",
				tt.window, r.Limit, r.Duration, r.Burst, r.Hits, r.Name, tt.limit, tt.duration, tt.burst)
		}
	}
}
