package main

import (
	"testing"
	"time"
)

const msec = int64(time.Millisecond)

func TestMaxInWindow(t *testing.T) {
	tests := []struct {
		name  string
		times []int64
		w     int64
		want  int
	}{
		{"none", nil, 100 * msec, 0},
		{"one", []int64{5 * msec}, 100 * msec, 1},
		{"both ends inside", []int64{0, 100 * msec}, 100 * msec, 2},
		{"just outside", []int64{0, 100*msec + 1}, 100 * msec, 1},
		{"zero window, same instant", []int64{7, 7, 7, 8}, 0, 3},
		{"the later cluster", []int64{0, 1 * msec, 500 * msec, 520 * msec, 540 * msec, 600 * msec, 601 * msec}, 100 * msec, 4},
		{"sliding", []int64{0, 60 * msec, 120 * msec, 180 * msec, 240 * msec}, 100 * msec, 2},
	}
	for _, tt := range tests {
		if got := maxInWindow(tt.times, tt.w); got != tt.want {
			t.Errorf("%s: maxInWindow(%v, %d) = %d, want %d", tt.name, tt.times, tt.w, got, tt.want)
		}
	}
}

// spaced returns n instants from first, step apart.
func spaced(first, step int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = first + int64(i)*step
	}
	return out
}

func TestCheckWindows(t *testing.T) {
	// One bucket of 100 at 50/s starting full: 100 at once, then one
	// every 20 ms. A limiter that does exactly that is never above.
	exact := append(spaced(0, 0, 100), spaced(20*msec, 20*msec, 450)...)
	// Two such buckets for one key (two instances each granting alone).
	double := append(append([]int64{}, exact...), exact...)
	sortGrants([][]int64{double})

	c := checkWindows([][]int64{exact, exact}, 100, 50, 100*msec, 0)
	if c.Above != 0 || c.KeysAbove != 0 || c.Worst != 105 || c.Bound != 105 {
		t.Errorf("exact bucket, 100 ms: %+v, want 0 above, worst 105 of bound 105", c)
	}
	c = checkWindows([][]int64{exact}, 100, 50, int64(time.Second), 0)
	if c.Above != 0 || c.Worst != 150 {
		t.Errorf("exact bucket, 1 s: %+v, want 0 above, worst 150", c)
	}

	c = checkWindows([][]int64{double, exact}, 100, 50, 100*msec, 0)
	if c.Above != 105 || c.KeysAbove != 1 || c.Worst != 210 {
		t.Errorf("doubled key, 100 ms: %+v, want 105 above on 1 key, worst 210", c)
	}

	// The slack is the slowest round trip: with 10 ms of it the bound is
	// 100 + 50 * 0.11 = 105.5, so 105 grants allowed and the doubled key's
	// 210 is 105 above; 40 ms of slack allows 107.
	c = checkWindows([][]int64{double}, 100, 50, 100*msec, 10*msec)
	if c.Bound != 105.5 || c.Above != 105 {
		t.Errorf("10 ms slack: %+v, want bound 105.5 and 105 above", c)
	}
	c = checkWindows([][]int64{double}, 100, 50, 100*msec, 40*msec)
	if c.Above != 103 {
		t.Errorf("40 ms slack: %+v, want 103 above", c)
	}
}

func TestQuantile(t *testing.T) {
	v := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tt := range []struct {
		q    float64
		want int64
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {1, 10}, {0, 1}} {
		if got := quantile(v, tt.q); got != tt.want {
			t.Errorf("quantile(%v) = %d, want %d", tt.q, got, tt.want)
		}
	}
	if quantile(nil, 0.5) != 0 {
		t.Error("quantile of nothing is not 0")
	}
}

func TestParseDriverFlags(t *testing.T) {
	if _, err := parseDriverFlags([]string{"--clients", "3"}, testWriter{t}); err == nil {
		t.Error("an odd --clients was taken")
	}
	o, err := parseDriverFlags(nil, testWriter{t})
	if err != nil || o.keys != 20 || o.capacity != 100 || o.rate != 50 || o.duration != 10*time.Second || o.reps != 3 {
		t.Errorf("defaults: %+v, %v", o, err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
