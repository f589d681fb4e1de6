package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// line is one run in one line, for the log.
func (r runResult) line() string {
	s := fmt.Sprintf("rep %d  %-16s batch %2d: %8.0f decisions/s, grants %d = %.2f x ideal %.0f",
		r.Rep, r.Contender, r.Batch, r.decisionsPerSec(), r.Grants, r.grantsOverIdeal(), r.Ideal)
	for _, w := range r.Windows {
		s += fmt.Sprintf("; %v: above %d (worst %d / %.1f, %d keys)",
			time.Duration(w.WindowNanos), w.Above, w.Worst, w.Bound, w.KeysAbove)
	}
	s += fmt.Sprintf("; rtt p50 %s p99 %s max %s; CPU us/decision %.2f server, %.2f client; errors %d",
		ms(r.RTTp50Nanos), ms(r.RTTp99Nanos), ms(r.RTTMaxNanos),
		r.cpuPerDecisionMicros(), r.ClientCPUSec*1e6/float64(r.Decisions), r.Errors)
	if r.FirstError != "" {
		s += " (first: " + r.FirstError + ")"
	}
	return s
}

func ms(ns int64) string { return fmt.Sprintf("%.2f ms", float64(ns)/1e6) }

// median of the values (the mean of the middle two for an even count).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// printReport prints the markdown table: one row per contender and batch,
// medians over the repetitions.
func printReport(w io.Writer, o options, results []runResult, batches []int, first string) {
	idealT := o.duration.Seconds()
	fmt.Fprintf(w, "- `%s`\n", o.command)
	fmt.Fprintf(w, "- %d keys, each a bucket of capacity %d refilled at %g/s (one bucket's ideal in %.0f s: %.0f grants a key, %.0f in all); "+
		"%d clients in closed loops, half on each of two peers or instances; %v a run, %d repetitions, medians, contenders rotated (first: %s)\n",
		o.keys, o.capacity, o.rate, idealT, float64(o.capacity)+o.rate*idealT, float64(o.keys)*(float64(o.capacity)+o.rate*idealT),
		o.clients, o.duration, o.reps, first)
	req := (&gubernatorContender{lim: limit{capacity: o.capacity, ratePerSec: o.rate}, window: o.window}).request("")
	fmt.Fprintf(w, "- Gubernator v2.13.0, two peers as processes on 127.0.0.1 and 127.0.0.2 (static peer list), Behavior GLOBAL, "+
		"limit %d per %d ms (burst %d), GlobalSyncWait %s\n",
		req.Limit, req.Duration, req.Burst, syncWaitText(o.syncWait))
	fmt.Fprintln(w, "- grants above one bucket: for each key its most grants replied in any window of w, less floor(capacity + rate x (w + the run's slowest round trip)), summed over the keys when positive")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| contender | decisions per round trip | decisions/s | grants / ideal | grants above one bucket, 100 ms | grants above one bucket, 1 s | worst key, 1 s / bound | round trip p50 / p99 / max ms | server CPU µs per decision | errors |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var names []string
	for _, r := range results {
		if !slices.Contains(names, r.Contender) {
			names = append(names, r.Contender)
		}
	}
	for _, b := range batches {
		for _, name := range names {
			var dps, gi, a100, a1s, worst, bound, p50, p99, mx, cpu []float64
			var errs int64
			for _, r := range results {
				if r.Contender != name || r.Batch != b {
					continue
				}
				dps = append(dps, r.decisionsPerSec())
				gi = append(gi, r.grantsOverIdeal())
				a100 = append(a100, float64(r.Windows[0].Above))
				a1s = append(a1s, float64(r.Windows[1].Above))
				worst = append(worst, float64(r.Windows[1].Worst))
				bound = append(bound, r.Windows[1].Bound)
				p50 = append(p50, float64(r.RTTp50Nanos)/1e6)
				p99 = append(p99, float64(r.RTTp99Nanos)/1e6)
				mx = append(mx, float64(r.RTTMaxNanos)/1e6)
				cpu = append(cpu, r.cpuPerDecisionMicros())
				errs += r.Errors
			}
			if len(dps) == 0 {
				continue
			}
			cpuText := fmt.Sprintf("%.1f", median(cpu))
			if median(cpu) == 0 {
				cpuText = "n/a"
			}
			fmt.Fprintf(w, "| %s | %d | %.0f | %.2f | %.0f | %.0f | %.0f / %.0f | %.2f / %.2f / %.1f | %s | %d |\n",
				name, b, median(dps), median(gi), median(a100), median(a1s), median(worst), median(bound),
				median(p50), median(p99), median(mx), cpuText, errs)
		}
	}
}

func syncWaitText(d time.Duration) string {
	if d == 0 {
		return "100ms (default)"
	}
	return d.String()
}
