package command

import (
	"math/bits"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bucketd/bucketd/internal/info"
)

// Per-command statistics, INFO commandstats and latencystats: for every
// command and subcommand (a row of the command table, statRow), its calls,
// the time they took, the calls refused before they ran (rejected: an
// unknown subcommand, a wrong number of arguments, NOAUTH) and those that
// ran and answered an error (failed), and a histogram of their latencies.
//
// Cost: the session reads the monotonic clock once per batch and once
// where the batch's planned bucket commands are answered (a segment), and
// once more after each command answered at once; the time of a segment is
// shared out evenly among its planned commands, which ran together. The
// counts go to atomics indexed by row, once per run of equal rows in a
// segment: a pipeline of 16 TB.ACQUIRE adds to three atomics.

// statRow is a command's or subcommand's row in the statistics: its place
// in statRows, from 1; 0 is none (an unknown command).
type statRow uint8

// maxStatRows bounds the rows (init checks that the table fits).
const maxStatRows = 128

// statRows lists the commands and subcommands by row; statRows[0] is nil.
var statRows []*commandSpec

// Latency histogram: histOctaves powers of two of nanoseconds from
// 2^histMinShift (128 ns), each split in histSub parts, so a percentile is
// reported within a quarter octave (19%) above the true value; below
// 128 ns counts in the first bucket, beyond 2^(7+36) ns (2.4 hours) in
// the last.
const (
	histMinShift = 7
	histSubBits  = 2
	histSub      = 1 << histSubBits
	histOctaves  = 36
	histBuckets  = histOctaves * histSub
)

// rowStats are one row's counters.
type rowStats struct {
	calls, nanos, rejected, failed atomic.Int64
	hist                           [histBuckets]atomic.Int64
}

// histBucket is the histogram bucket of a latency of ns nanoseconds.
func histBucket(ns int64) int {
	if ns < 1<<histMinShift {
		return 0
	}
	n := bits.Len64(uint64(ns)) // ns in [2^(n-1), 2^n)
	sub := int(uint64(ns)>>(n-1-histSubBits)) & (histSub - 1)
	b := (n-histMinShift)*histSub + sub
	return min(b, histBuckets-1)
}

// histUpper is the upper bound of bucket b, in nanoseconds.
func histUpper(b int) int64 {
	if b == 0 {
		return 1 << histMinShift
	}
	oct, sub := b/histSub, b%histSub
	base := int64(1) << (oct + histMinShift - 1)
	return base + (base>>histSubBits)*int64(sub+1)
}

// observe counts n calls of row that took each ns nanoseconds.
func (e *Engine) observe(row statRow, ns int64, n int) {
	if row == 0 || n == 0 {
		return
	}
	r := &e.rows[row]
	r.calls.Add(int64(n))
	r.nanos.Add(ns * int64(n))
	r.hist[histBucket(ns)].Add(int64(n))
}

// epoch is where mono counts from.
var epoch = time.Now()

// mono is the monotonic clock in nanoseconds: time.Since reads only the
// runtime's monotonic clock, no wall time.
func mono() int64 { return int64(time.Since(epoch)) }

// account ends the segment of a command answered at once (or queued in a
// transaction): its time is the time since the last boundary.
func (s *session) account(row statRow, args [][]byte) {
	now := mono()
	ns := now - s.clk
	s.clk = now
	s.e.observe(row, ns, 1)
	if s.e.slowlog.slow(ns) && row != 0 && !statRows[row].skipSlowlog {
		s.e.slowlog.add(args, ns, s)
	}
}

// segment is the planned bucket commands since the last boundary: their
// rows and their places in the batch.
type segCall struct {
	row statRow
	idx int32 // in session.batch
}

// endSegment shares the time since the last boundary among the planned
// commands of the segment, which have just been answered.
func (s *session) endSegment() {
	now := mono()
	share := (now - s.clk) / int64(len(s.seg))
	s.clk = now
	for i := 0; i < len(s.seg); {
		j := i + 1
		for j < len(s.seg) && s.seg[j].row == s.seg[i].row {
			j++
		}
		s.e.observe(s.seg[i].row, share, j-i)
		i = j
	}
	if s.e.slowlog.slow(share) {
		for _, c := range s.seg {
			s.e.slowlog.add(s.batch[c.idx].Args, share, s)
		}
	}
	s.seg = s.seg[:0]
}

// reject counts a call of row refused before it ran; fail one that ran
// and answered an error.
func (e *Engine) reject(row statRow) {
	if row != 0 {
		e.rows[row].rejected.Add(1)
	}
}

func (e *Engine) fail(row statRow) {
	if row != 0 {
		e.rows[row].failed.Add(1)
	}
}

// commandStats is INFO's # Commandstats: a line per command or
// subcommand called, refused or failed since the start, in table order.
func (e *Engine) commandStats() info.Section {
	sec := info.Section{Title: "Commandstats"}
	for row := 1; row < len(statRows); row++ {
		r := &e.rows[row]
		calls, nanos, rej, failed := r.calls.Load(), r.nanos.Load(), r.rejected.Load(), r.failed.Load()
		if calls == 0 && rej == 0 && failed == 0 {
			continue
		}
		usec := nanos / 1000
		perCall := 0.0
		if calls > 0 {
			perCall = float64(nanos) / 1000 / float64(calls)
		}
		sec.Fields = append(sec.Fields, info.Text("cmdstat_"+statRows[row].name,
			"calls="+strconv.FormatInt(calls, 10)+",usec="+strconv.FormatInt(usec, 10)+
				",usec_per_call="+strconv.FormatFloat(perCall, 'f', 2, 64)+
				",rejected_calls="+strconv.FormatInt(rej, 10)+",failed_calls="+strconv.FormatInt(failed, 10)))
	}
	return sec
}

// latencyStats is INFO's # Latencystats: the 50th, 99th and 99.9th
// percentiles of each command called since the start, in microseconds,
// each the upper bound of its histogram bucket.
func (e *Engine) latencyStats() info.Section {
	sec := info.Section{Title: "Latencystats"}
	var counts [histBuckets]int64
	for row := 1; row < len(statRows); row++ {
		r := &e.rows[row]
		var total int64
		for b := range counts {
			counts[b] = r.hist[b].Load()
			total += counts[b]
		}
		if total == 0 {
			continue
		}
		v := ""
		for i, p := range [...]struct {
			name    string
			per1000 int64
		}{{"p50", 500}, {"p99", 990}, {"p99.9", 999}} {
			if i > 0 {
				v += ","
			}
			v += p.name + "=" + strconv.FormatFloat(float64(percentile(&counts, total, p.per1000))/1000, 'f', 3, 64)
		}
		sec.Fields = append(sec.Fields, info.Text("latency_percentiles_usec_"+statRows[row].name, v))
	}
	return sec
}

// percentile is the upper bound, in nanoseconds, of the bucket that holds
// the per1000/1000 quantile of the total latencies counted.
func percentile(counts *[histBuckets]int64, total, per1000 int64) int64 {
	rank := (total*per1000 + 999) / 1000 // the rank of the quantile, from 1
	var seen int64
	for b, n := range counts {
		seen += n
		if seen >= max(rank, 1) {
			return histUpper(b)
		}
	}
	return histUpper(histBuckets - 1)
}
