package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// workload is what every contender is asked in a run.
type workload struct {
	lim      limit
	keys     int
	clients  int
	batch    int // decisions per round trip
	duration time.Duration
	windows  []time.Duration
}

// runResult is one run of one contender.
type runResult struct {
	Contender string  `json:"contender"`
	Batch     int     `json:"batch"`
	Rep       int     `json:"rep"`
	Seconds   float64 `json:"seconds"` // from the start to the last reply
	Decisions int64   `json:"decisions"`
	Grants    int64   `json:"grants"`
	Errors    int64   `json:"errors"`
	// Ideal is what one bucket per key grants in Seconds: keys *
	// (capacity + rate * Seconds).
	Ideal        float64       `json:"ideal_grants"`
	Windows      []windowCheck `json:"windows"`
	RTTp50Nanos  int64         `json:"rtt_p50_ns"`
	RTTp99Nanos  int64         `json:"rtt_p99_ns"`
	RTTMaxNanos  int64         `json:"rtt_max_ns"`
	ServerCPUSec float64       `json:"server_cpu_seconds"` // user + system of the contender's processes
	ClientCPUSec float64       `json:"client_cpu_seconds"` // of this process
	FirstError   string        `json:"first_error,omitempty"`
}

func (r runResult) decisionsPerSec() float64 { return float64(r.Decisions) / r.Seconds }
func (r runResult) grantsOverIdeal() float64 { return float64(r.Grants) / r.Ideal }
func (r runResult) cpuPerDecisionMicros() float64 {
	return r.ServerCPUSec * 1e6 / float64(r.Decisions)
}

// clientStats is what one client goroutine records; only it writes them.
type clientStats struct {
	grants    [][]int64 // per key, reply instants in ns since the start
	rtts      []int64
	decisions int64
	errors    int64
	last      int64 // the last reply, ns since the start
	firstErr  error
}

// runOnce runs w against c once: clients dialled first, then all started
// together and stopped at w.duration (a round trip under way finishes).
func runOnce(ctx context.Context, c contender, w workload, rep int, runID string, cpuPIDs []int) (runResult, error) {
	clients := make([]client, w.clients)
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				_ = cl.close() // the run is over; a close error changes no figure
			}
		}
	}()
	for i := range clients {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cl, err := c.dial(dctx, i, runID)
		cancel()
		if err != nil {
			return runResult{}, err
		}
		clients[i] = cl
	}

	stats := make([]clientStats, w.clients)
	cpu0, self0 := cpuSeconds(cpuPIDs), cpuSeconds([]int{os.Getpid()})
	start := time.Now()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			drive(ctx, clients[i], &stats[i], w, start, uint64(i)+1, uint64(rep))
		}()
	}
	wg.Wait()
	cpu1, self1 := cpuSeconds(cpuPIDs), cpuSeconds([]int{os.Getpid()})

	res := runResult{Contender: c.name(), Batch: w.batch, Rep: rep,
		ServerCPUSec: cpu1 - cpu0, ClientCPUSec: self1 - self0}
	grants := make([][]int64, w.keys)
	var rtts []int64
	var last int64
	for i := range stats {
		s := &stats[i]
		for k := range grants {
			grants[k] = append(grants[k], s.grants[k]...)
			res.Grants += int64(len(s.grants[k]))
		}
		rtts = append(rtts, s.rtts...)
		res.Decisions += s.decisions
		res.Errors += s.errors
		last = max(last, s.last)
		if s.firstErr != nil && res.FirstError == "" {
			res.FirstError = s.firstErr.Error()
		}
	}
	if res.Decisions == 0 || last == 0 {
		return res, fmt.Errorf("%s: no decisions (first error: %s)", c.name(), res.FirstError)
	}
	res.Seconds = float64(last) / 1e9
	res.Ideal = float64(w.keys) * bucketBound(float64(w.lim.capacity), w.lim.ratePerSec, last)
	slices.Sort(rtts)
	res.RTTp50Nanos = quantile(rtts, 0.50)
	res.RTTp99Nanos = quantile(rtts, 0.99)
	res.RTTMaxNanos = rtts[len(rtts)-1]
	sortGrants(grants)
	for _, win := range w.windows {
		res.Windows = append(res.Windows, checkWindows(grants, float64(w.lim.capacity), w.lim.ratePerSec,
			win.Nanoseconds(), res.RTTMaxNanos))
	}
	return res, nil
}

// drive is one client's closed loop: a round trip of w.batch decisions on
// keys drawn uniformly, again and again until w.duration has passed.
func drive(ctx context.Context, cl client, s *clientStats, w workload, start time.Time, seed1, seed2 uint64) {
	rng := rand.New(rand.NewPCG(seed1, seed2))
	s.grants = make([][]int64, w.keys)
	keys := make([]int, w.batch)
	granted := make([]bool, w.batch)
	end := w.duration.Nanoseconds()
	for {
		t0 := time.Since(start).Nanoseconds()
		if t0 >= end || ctx.Err() != nil {
			return
		}
		for j := range keys {
			keys[j] = rng.IntN(w.keys)
			granted[j] = false
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		errs, err := cl.decide(cctx, keys, granted)
		cancel()
		t1 := time.Since(start).Nanoseconds()
		s.last = t1
		s.rtts = append(s.rtts, t1-t0)
		s.errors += int64(errs)
		s.decisions += int64(len(keys) - errs)
		if err != nil && s.firstErr == nil {
			s.firstErr = err
		}
		for j, k := range keys {
			if granted[j] {
				s.grants[k] = append(s.grants[k], t1)
			}
		}
		if err != nil {
			time.Sleep(10 * time.Millisecond) // a broken connection must not spin
		}
	}
}

// quantile of sorted values (nearest rank); 0 for none.
func quantile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// cpuSeconds is the user + system CPU time of the processes so far, from
// /proc/PID/stat (clock ticks of 1/100 s, Linux's USER_HZ); a process gone
// counts 0.
func cpuSeconds(pids []int) float64 {
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		// The command name may hold spaces; the fields after it are plain.
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64) // utime, field 14 of stat(5)
		sy, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + sy
	}
	return float64(ticks) / 100
}
