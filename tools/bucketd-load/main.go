// Command bucketd-load drives a bucketd (or a Redis running a token-bucket
// Lua script) with TB.ACQUIRE traffic over many connections and reports
// throughput, latency quantiles, errors and the server's memory.
//
// It speaks raw RESP over net.Conn, one goroutine per connection, with
// every command's bytes built once per connection and only the key digits
// rewritten per request, so the client stays cheap enough to hold 10,000
// connections on a 2-core machine. The hot loop allocates nothing.
//
// Two modes:
//
//   - load (default): every connection sends TB.ACQUIRE on random keys of a
//     keyspace, optionally paced to a total request rate (--qps), for
//     --duration or until --requests have been sent;
//   - transactions (--tx N): like load, but each round is one transaction,
//     MULTI, N TB.ACQUIREs and EXEC in one write, and each TB.ACQUIRE counts
//     as a request;
//   - prefill (--prefill N): create N distinct buckets as fast as possible
//     with deep pipelines, keys 0..N-1 split among the connections, and
//     report the server's memory per bucket (VmRSS with --pid, INFO
//     used_memory always).
//
// See docs/load.md.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type options struct {
	addr        string
	conns       int
	duration    time.Duration
	requests    int64
	keys        int64
	keyPrefix   string
	keyLen      int
	capacity    string
	rate        string
	cost        string
	pipeline    int
	qps         float64
	warmup      time.Duration
	pid         int
	jsonOut     bool
	prefill     int64
	eval        string
	metricsURL  string
	settle      time.Duration
	dialConc    int
	dialTimeout time.Duration
	grace       time.Duration
	seed        uint64
	noInfo      bool
	timeline    bool
	tx          int
}

func main() {
	opts, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bucketd-load:", err)
		os.Exit(2)
	}
	rep, err := run(opts, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bucketd-load:", err)
		os.Exit(2)
	}
	if opts.jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		rep.print(os.Stdout)
	}
	if rep.Errors+rep.ConnErrors > 0 || rep.ConnectFailures > 0 || (rep.Prefill != nil && !rep.Prefill.Complete) {
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := newFlagSet(&o, stderr)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.prefill > 0 {
		if err := o.prefillDefaults(set); err != nil {
			return o, err
		}
	}
	if err := o.txDefaults(set); err != nil {
		return o, err
	}
	return o, o.validate()
}

// newFlagSet defines every flag of bucketd-load into o.
func newFlagSet(o *options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("bucketd-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:6380", "server `host:port`")
	fs.IntVar(&o.conns, "conns", 50, "concurrent connections, one goroutine each (prefill default: 8)")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "how long the load runs; in prefill mode the time limit (prefill default: 5m)")
	fs.Int64Var(&o.requests, "requests", 0, "stop after this many requests in all (0: run for --duration); the duration still bounds the run")
	fs.Int64Var(&o.keys, "keys", 100000, "keyspace: each request picks a key number uniformly in [0, keys)")
	fs.StringVar(&o.keyPrefix, "key-prefix", "k", "key prefix; the key number follows, zero-padded to --key-len")
	fs.IntVar(&o.keyLen, "key-len", 16, "length of every key in bytes, prefix included")
	fs.StringVar(&o.capacity, "capacity", "100", "capacity argument of TB.ACQUIRE")
	fs.StringVar(&o.rate, "rate", "10", "rate argument of TB.ACQUIRE (tokens per second)")
	fs.StringVar(&o.cost, "cost", "1", "cost argument of TB.ACQUIRE")
	fs.IntVar(&o.pipeline, "pipeline", 1, "commands written per round trip on each connection (prefill default: 256)")
	fs.Float64Var(&o.qps, "qps", 0, "target total request rate, spread evenly over the connections (0: as fast as possible)")
	fs.DurationVar(&o.warmup, "warmup", 0, "leave the first part of the run out of latency and throughput (errors still count)")
	fs.IntVar(&o.pid, "pid", 0, "PID of the server: sample its VmRSS from /proc before, during (peak) and after the run")
	fs.BoolVar(&o.jsonOut, "json", false, "print the report as JSON")
	fs.Int64Var(&o.prefill, "prefill", 0, "prefill mode: create this many distinct buckets (keys 0..N-1) as fast as possible and report memory per bucket")
	fs.StringVar(&o.eval, "eval", "", "Lua script `file`: SCRIPT LOAD it and send EVALSHA sha 1 key capacity rate cost instead of TB.ACQUIRE (for a real Redis)")
	fs.StringVar(&o.metricsURL, "metrics-url", "", "bucketd /metrics `URL`: report the Go GC cycles and pause total during the run")
	fs.DurationVar(&o.settle, "settle", 0, "wait this long after the run before the final RSS and INFO readings")
	fs.IntVar(&o.dialConc, "dial-concurrency", 256, "connections being opened at once")
	fs.DurationVar(&o.dialTimeout, "dial-timeout", 5*time.Second, "timeout to open one connection and get its PONG")
	fs.DurationVar(&o.grace, "grace", 10*time.Second, "how long past the end of the run a reply may take before the connection counts as failed")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the key choice")
	fs.BoolVar(&o.noInfo, "no-info", false, "do not send INFO before and after the run")
	fs.IntVar(&o.tx, "tx", 0, "transaction mode: each round is MULTI, `N` TB.ACQUIREs on random keys and EXEC in one write (sets --pipeline to N); each TB.ACQUIRE counts as a request")
	fs.BoolVar(&o.timeline, "timeline", false, "also report every second of the run: requests, p50, p99, p99.9 and (with --metrics-url) GC cycles completed in it")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bucketd-load [flags]\n\n"+
			"Load generator for bucketd: raw RESP, one goroutine per connection.\n"+
			"Load:    bucketd-load --addr 127.0.0.1:6380 --conns 10000 --qps 30000 --duration 60s --pid PID\n"+
			"Prefill: bucketd-load --addr 127.0.0.1:6380 --prefill 10000000 --capacity 1000000 --rate 1e-9 --pid PID\n"+
			"Exit status: 0 clean, 1 when any error reply, broken or refused connection, or incomplete prefill, 2 bad usage.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// prefillDefaults gives prefill mode its own defaults for the flags not
// set, and refuses the flags that make no sense there.
func (o *options) prefillDefaults(set map[string]bool) error {
	if !set["conns"] {
		o.conns = 8
	}
	if !set["pipeline"] {
		o.pipeline = 256
	}
	if !set["duration"] {
		o.duration = 5 * time.Minute
	}
	if set["keys"] || set["qps"] || set["requests"] {
		return errors.New("--prefill takes neither --keys, --qps nor --requests: it writes keys 0..N-1 once each")
	}
	return nil
}

// validate checks the options once every default is in place.
func (o options) validate() error {
	switch {
	case o.conns < 1:
		return errors.New("--conns must be at least 1")
	case o.pipeline < 1:
		return errors.New("--pipeline must be at least 1")
	case o.duration <= 0:
		return errors.New("--duration must be positive: every run is bounded in time")
	case o.keys < 1:
		return errors.New("--keys must be at least 1")
	case o.qps < 0 || o.requests < 0 || o.prefill < 0 || o.tx < 0:
		return errors.New("--qps, --requests, --prefill and --tx must not be negative")
	case o.warmup < 0 || o.warmup >= o.duration:
		return errors.New("--warmup must be shorter than --duration")
	case o.dialConc < 1:
		return errors.New("--dial-concurrency must be at least 1")
	case o.timeline && o.duration > maxTimeline*time.Second:
		return fmt.Errorf("--timeline takes at most %d s of --duration", maxTimeline)
	}
	for _, f := range []struct{ name, v string }{{"capacity", o.capacity}, {"rate", o.rate}, {"cost", o.cost}} {
		if _, err := strconv.ParseFloat(f.v, 64); err != nil {
			return fmt.Errorf("--%s %q is not a number", f.name, f.v)
		}
	}
	n := o.keys
	if o.prefill > 0 {
		n = o.prefill
	}
	return keyFormat{prefix: o.keyPrefix, width: o.keyLen}.check(n)
}

// latency is a latency summary in microseconds.
type latency struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean_us"`
	P50   float64 `json:"p50_us"`
	P90   float64 `json:"p90_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p99_9_us"`
	Max   float64 `json:"max_us"`
}

func summarize(h *histogram, maxNS uint64) latency {
	us := func(ns uint64) float64 { return float64(ns) / 1e3 }
	q := func(p float64) float64 { return us(min(h.quantile(p), maxNS)) }
	return latency{
		Count: h.total(),
		Mean:  h.mean() / 1e3,
		P50:   q(0.50),
		P90:   q(0.90),
		P99:   q(0.99),
		P999:  q(0.999),
		Max:   us(maxNS),
	}
}

type serverReport struct {
	PID       int         `json:"pid,omitempty"`
	RSSBefore int64       `json:"rss_before_bytes,omitempty"`
	RSSAfter  int64       `json:"rss_after_bytes,omitempty"`
	RSSPeak   int64       `json:"rss_peak_bytes,omitempty"` // highest VmRSS sampled during the run
	HWM       int64       `json:"vm_hwm_bytes,omitempty"`   // VmHWM at the end: peak since the server started
	Samples   int         `json:"rss_samples,omitempty"`
	RSSError  string      `json:"rss_error,omitempty"`
	Before    *serverInfo `json:"info_before,omitempty"`
	After     *serverInfo `json:"info_after,omitempty"`
	InfoError string      `json:"info_error,omitempty"`
	GC        *gcStats    `json:"gc_during_run,omitempty"` // GC cycles and pause total between the two readings
	GCError   string      `json:"gc_error,omitempty"`
}

type prefillReport struct {
	Buckets         int64   `json:"buckets_requested"`
	Created         int64   `json:"keys_added"` // INFO keys after - before (or buckets_requested without INFO)
	Complete        bool    `json:"complete"`
	RSSPerBucket    float64 `json:"rss_bytes_per_bucket,omitempty"`
	UsedMemPerBuckt float64 `json:"used_memory_bytes_per_bucket,omitempty"`
}

type report struct {
	Mode            string         `json:"mode"`
	Addr            string         `json:"addr"`
	Command         string         `json:"command"`
	KeyExample      string         `json:"key_example"`
	Keys            int64          `json:"keyspace"`
	ConnsRequested  int            `json:"conns_requested"`
	Established     int            `json:"conns_established"`
	ConnectFailures int            `json:"connect_failures"`
	ConnectError    string         `json:"first_connect_error,omitempty"`
	ConnectSeconds  float64        `json:"connect_seconds"`
	Pipeline        int            `json:"pipeline"`
	Tx              int            `json:"tx,omitempty"` // TB.ACQUIREs per transaction (--tx); 0: no transactions
	QPSTarget       float64        `json:"qps_target"`
	WarmupSeconds   float64        `json:"warmup_seconds"`
	StartUnix       float64        `json:"start_unix"` // when the run started (timeline second 0), Unix seconds
	Seconds         float64        `json:"measured_seconds"`
	Requests        int64          `json:"requests"` // replies received, warm-up included
	Measured        int64          `json:"measured_requests"`
	Throughput      float64        `json:"throughput_rps"`
	Allowed         int64          `json:"allowed"`
	Denied          int64          `json:"denied"`
	Errors          int64          `json:"errors"`      // replies other than :0 / :1
	ConnErrors      int64          `json:"conn_errors"` // connections broken during the run
	FirstError      string         `json:"first_error,omitempty"`
	Latency         latency        `json:"latency"`                         // write of a round to its last reply
	Scheduled       *latency       `json:"latency_from_schedule,omitempty"` // paced runs: from the round's scheduled start
	Timeline        []second       `json:"timeline,omitempty"`
	Prefill         *prefillReport `json:"prefill,omitempty"`
	CPU             *cpuReport     `json:"cpu,omitempty"`
	Server          serverReport   `json:"server"`
	Client          clientFacts    `json:"client"`
}

// second is one second of the run's timeline (warm-up included).
type second struct {
	At       int     `json:"t"` // seconds since the start
	Requests uint64  `json:"requests"`
	P50      float64 `json:"p50_us"`
	P99      float64 `json:"p99_us"`
	P999     float64 `json:"p99_9_us"`
	Max      float64 `json:"max_us"`    // upper bound of the highest slot used
	GC       int64   `json:"gc_cycles"` // GC cycles completed during this second (-1: unknown)
}

// cpuReport is the CPU time used between the start and the end of the
// run, in cores (CPU seconds per second of run): the server (with --pid),
// this client, and everything on the machine, to see who else was busy.
type cpuReport struct {
	Seconds     float64 `json:"seconds"`
	ServerCores float64 `json:"server_cores,omitempty"`
	ClientCores float64 `json:"client_cores"`
	BusyCores   float64 `json:"machine_busy_cores"`
	OtherCores  float64 `json:"other_cores"` // busy minus server and client
	NicedCores  float64 `json:"niced_cores"` // the part of busy used by niced processes (nice > 0)
	Cores       int     `json:"machine_cores"`
}

type clientFacts struct {
	GOMAXPROCS int    `json:"gomaxprocs"`
	NumCPU     int    `json:"num_cpu"`
	NoFileSoft uint64 `json:"nofile_soft"`
	NoFileHard uint64 `json:"nofile_hard"`
	GoVersion  string `json:"go_version"`
}

// worker is one connection and its goroutine. Everything in it is owned by
// that goroutine until the run ends.
type worker struct {
	id      int
	conn    net.Conn
	r       *bufio.Reader
	buf     []byte // pipeline copies of the command
	cmdLen  int
	keyOff  []int  // offset of each copy's key in buf
	tx      bool   // --tx: buf is MULTI, the copies and EXEC (tx.go)
	scratch []byte // --tx: room to format a count
	kf      keyFormat
	keys    uint64
	rng     uint64
	seq     bool   // prefill: keys next..last-1 in order
	next    uint64 // prefill
	last    uint64 // prefill

	lat   *histogram
	sched *histogram

	requests, measured      int64
	allowed, denied, errors int64
	maxNS                   uint64
	firstErr                string
	connErr                 error
	dialErr                 error
}

// randKey is splitmix64 reduced to [0, keys) by multiply-high.
func (w *worker) randKey() uint64 {
	w.rng += 0x9e3779b97f4a7c15
	z := w.rng
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	hi, _ := bits.Mul64(z, w.keys)
	return hi
}

// fill writes n keys into the first n command copies.
func (w *worker) fill(n int) {
	for i := 0; i < n; i++ {
		var k uint64
		if w.seq {
			k = w.next
			w.next++
		} else {
			k = w.randKey()
		}
		w.kf.put(w.buf[w.keyOff[i]:], k)
	}
}

// exchange writes n commands in one write and reads their n replies.
func (w *worker) exchange(n int) error {
	if w.tx {
		return w.exchangeTx(n)
	}
	if _, err := w.conn.Write(w.buf[:n*w.cmdLen]); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		rep, line, err := readReply(w.r)
		if err != nil {
			return err
		}
		switch rep {
		case replyAllowed:
			w.allowed++
		case replyDenied:
			w.denied++
		default:
			w.errors++
			if w.firstErr == "" {
				w.firstErr = strings.TrimSpace(string(line))
			}
		}
	}
	return nil
}

// runCtx is what every worker shares, read-only.
type runCtx struct {
	start, end, warmEnd time.Time
	interval            time.Duration // paced: time between one connection's rounds; 0 unpaced
	conns               int
	pipeline            int
	budget              *atomic.Int64 // requests still to send; nil: unbounded
	timeline            []histogram   // one per second from start; nil: no timeline
}

// maxTimeline bounds the seconds a timeline covers (36 KB of counts each).
const maxTimeline = 600

// claim takes up to n requests from the budget.
func (rc *runCtx) claim(n int) int {
	if rc.budget == nil {
		return n
	}
	left := rc.budget.Add(-int64(n))
	if left >= 0 {
		return n
	}
	if left+int64(n) <= 0 {
		return 0
	}
	return int(left + int64(n))
}

// loop runs rounds until the end of the run, the budget or (prefill) the
// key range is exhausted, or the connection fails.
func (w *worker) loop(rc *runCtx) {
	var phase time.Duration
	if rc.interval > 0 {
		phase = time.Duration(int64(rc.interval) * int64(w.id) / int64(rc.conns))
	}
	if d := time.Until(rc.start); d > 0 {
		time.Sleep(d) // everybody starts together
	}
	for round := int64(0); ; round++ {
		var sched time.Time
		if rc.interval > 0 {
			sched = rc.start.Add(phase + time.Duration(round)*rc.interval)
			if !sched.Before(rc.end) {
				return
			}
			if d := time.Until(sched); d > 0 {
				time.Sleep(d)
			}
		}
		t0 := time.Now()
		if !t0.Before(rc.end) {
			return
		}
		n := rc.pipeline
		if w.seq {
			n = int(min(uint64(n), w.last-w.next))
			if n == 0 {
				return
			}
		}
		if n = rc.claim(n); n == 0 {
			return
		}
		w.fill(n)
		if err := w.exchange(n); err != nil {
			w.connErr = err
			return
		}
		t1 := time.Now()
		w.requests += int64(n)
		if t0.Before(rc.warmEnd) {
			continue
		}
		ns := uint64(t1.Sub(t0))
		w.lat.recordN(ns, uint64(n))
		if sec := int(t0.Sub(rc.start) / time.Second); sec >= 0 && sec < len(rc.timeline) {
			rc.timeline[sec].recordN(ns, uint64(n))
		}
		w.maxNS = max(w.maxNS, ns)
		if rc.interval > 0 {
			w.sched.recordN(uint64(t1.Sub(sched)), uint64(n))
		}
		w.measured += int64(n)
	}
}

// stripes is how many histograms the connections share, to keep the
// atomic adds of different cores on different cache lines.
const stripes = 16

// run connects, runs the load (or the prefill) and returns its report. It
// returns an error only when there is no run to report: too low a NOFILE
// limit, an unusable --eval or --pid, or no connection at all. Error
// replies, broken connections and failed readings go into the report.
func run(o options, log io.Writer) (*report, error) {
	rep, err := newReport(o)
	if err != nil {
		return nil, err
	}
	kf := keyFormat{prefix: o.keyPrefix, width: o.keyLen}
	args, keyArg, err := commandArgs(o, kf)
	if err != nil {
		return nil, err
	}
	rep.Command = strings.Join(args, " ")
	if o.tx > 0 {
		rep.Command = fmt.Sprintf("MULTI, %d × %s, EXEC", o.tx, rep.Command)
	}
	one, keyOff := appendCommand(nil, keyArg, args...)

	before, err := readServerBefore(o, &rep.Server)
	if err != nil {
		return nil, err
	}

	connectStart := time.Now()
	p := dialAll(o, kf, one, keyOff, log)
	rep.ConnectSeconds = time.Since(connectStart).Seconds()
	p.tally(rep)
	if rep.Established == 0 {
		p.release()
		return nil, fmt.Errorf("no connection to %s: %s", o.addr, rep.ConnectError)
	}

	p.rc = newRunCtx(o, rep.Established)
	rep.StartUnix = float64(p.rc.start.UnixMicro()) / 1e6
	gc := startGCPoller(o.metricsURL, &p.rc)
	p.setDeadlines(p.rc.end.Add(o.grace))
	fmt.Fprintf(log, "bucketd-load: %d connected in %.2f s (%d failed); running %s for at most %s\n",
		rep.Established, rep.ConnectSeconds, rep.ConnectFailures, rep.Mode, o.duration)
	cpu0 := readCPU(o.pid)
	p.release()
	finished := time.Now()
	rep.CPU = cpu0.until(readCPU(o.pid))
	rep.Timeline = timelineSeconds(p.rc.timeline, gc.finish())
	p.closeAll()

	p.collect(rep, finished)
	readServerAfter(o, &rep.Server, before)
	if rep.Prefill != nil {
		rep.Prefill.figure(o.prefill, rep.Requests, rep.Server)
	}
	return rep, nil
}

// newReport starts the report with what is known before connecting,
// after raising the NOFILE limit to fit --conns (the report shows it).
func newReport(o options) (*report, error) {
	soft, hard, err := raiseNoFile(uint64(o.conns) + fdSpare)
	if err != nil {
		return nil, err
	}
	rep := &report{
		Mode:           "load",
		Addr:           o.addr,
		Keys:           o.keys,
		ConnsRequested: o.conns,
		Pipeline:       o.pipeline,
		Tx:             o.tx,
		QPSTarget:      o.qps,
		WarmupSeconds:  o.warmup.Seconds(),
		Client: clientFacts{
			GOMAXPROCS: runtime.GOMAXPROCS(0),
			NumCPU:     runtime.NumCPU(),
			NoFileSoft: soft,
			NoFileHard: hard,
			GoVersion:  runtime.Version(),
		},
	}
	if o.prefill > 0 {
		rep.Mode = "prefill"
		rep.Keys = o.prefill
		rep.Prefill = &prefillReport{Buckets: o.prefill}
	}
	rep.KeyExample = keyFormat{prefix: o.keyPrefix, width: o.keyLen}.template()
	return rep, nil
}

// commandArgs is the command every connection sends, and the index of its
// key among args; only the key digits change from one request to the next.
// With --eval it loads the script first and sends EVALSHA instead.
func commandArgs(o options, kf keyFormat) (args []string, keyArg int, err error) {
	if o.eval == "" {
		return []string{"TB.ACQUIRE", kf.template(), o.capacity, o.rate, o.cost}, 1, nil
	}
	src, err := os.ReadFile(o.eval)
	if err != nil {
		return nil, 0, err
	}
	sha, err := control(o.addr, o.dialTimeout, "SCRIPT", "LOAD", string(src))
	if err != nil {
		return nil, 0, fmt.Errorf("SCRIPT LOAD %s: %w", o.eval, err)
	}
	return []string{"EVALSHA", sha, "1", kf.template(), o.capacity, o.rate, o.cost}, 3, nil
}

// serverBefore is what the readings after the run compare with.
type serverBefore struct {
	sampler *rssSampler // samples VmRSS during the run; nil without --pid
	gc      gcStats
}

// readServerBefore takes the server's readings before the run: VmRSS (and
// starts sampling it), INFO and the GC counts. Only an unreadable --pid is
// an error; INFO and /metrics failures go into the report.
func readServerBefore(o options, s *serverReport) (serverBefore, error) {
	var b serverBefore
	s.PID = o.pid
	if o.pid > 0 {
		m, err := readProcMem(o.pid)
		if err != nil {
			return b, fmt.Errorf("--pid %d: %w", o.pid, err)
		}
		s.RSSBefore = m.RSS
		b.sampler = startRSSSampler(o.pid, 100*time.Millisecond)
	}
	if !o.noInfo {
		if si, err := fetchInfo(o.addr, o.dialTimeout); err != nil {
			s.InfoError = err.Error()
		} else {
			s.Before = &si
		}
	}
	if o.metricsURL != "" {
		var err error
		if b.gc, err = fetchGC(o.metricsURL, o.dialTimeout); err != nil {
			s.GCError = err.Error()
		}
	}
	return b, nil
}

// readServerAfter takes the server's readings after the run, --settle
// later: VmRSS (peak, final, high-water mark), INFO, and the GC cycles and
// pauses since readServerBefore.
func readServerAfter(o options, s *serverReport, b serverBefore) {
	if o.settle > 0 {
		time.Sleep(o.settle)
	}
	if b.sampler != nil {
		peak, n, err := b.sampler.finish()
		s.RSSPeak, s.Samples = peak, n
		if err != nil {
			s.RSSError = err.Error()
		}
		if m, err := readProcMem(o.pid); err == nil {
			s.RSSAfter, s.HWM = m.RSS, m.HWM
		} else if s.RSSError == "" {
			s.RSSError = err.Error()
		}
	}
	if !o.noInfo {
		if si, err := fetchInfo(o.addr, o.dialTimeout); err != nil {
			s.InfoError = err.Error()
		} else {
			s.After = &si
		}
	}
	if o.metricsURL != "" && s.GCError == "" {
		if g, err := fetchGC(o.metricsURL, o.dialTimeout); err != nil {
			s.GCError = err.Error()
		} else {
			s.GC = &gcStats{Count: g.Count - b.gc.Count, PauseTotalS: g.PauseTotalS - b.gc.PauseTotalS}
		}
	}
}

// figure says whether the prefill sent every key, and how much memory each
// bucket it created took. The keys created are INFO keys after minus
// before, or the keys requested without INFO.
func (p *prefillReport) figure(buckets, requests int64, s serverReport) {
	p.Complete = requests == buckets
	p.Created = buckets
	b, a := s.Before, s.After
	if b != nil && a != nil {
		p.Created = a.Keys - b.Keys
	}
	if p.Created <= 0 {
		return
	}
	if s.RSSAfter > 0 {
		p.RSSPerBucket = float64(s.RSSAfter-s.RSSBefore) / float64(p.Created)
	}
	if b != nil && a != nil {
		p.UsedMemPerBuckt = float64(a.UsedMemory-b.UsedMemory) / float64(p.Created)
	}
}

// pool is the run's connections, one worker goroutine each. A goroutine
// dials, then waits for begin, and reads rc only after begin is closed, so
// run fills rc in between.
type pool struct {
	workers       []*worker
	hists, scheds []histogram // striped: worker i records into [i%stripes]
	rc            runCtx
	begin         chan struct{}
	done          sync.WaitGroup
}

// dialAll starts every connection's goroutine, at most --dial-concurrency
// of them dialing at once, and returns when each has connected or failed.
func dialAll(o options, kf keyFormat, one []byte, keyOff int, log io.Writer) *pool {
	p := &pool{
		workers: make([]*worker, o.conns),
		hists:   make([]histogram, stripes),
		scheds:  make([]histogram, stripes),
		begin:   make(chan struct{}),
	}
	var dialed sync.WaitGroup
	sem := make(chan struct{}, o.dialConc)
	ping, _ := appendCommand(nil, -1, "PING")
	for i := range p.workers {
		w := p.newWorker(o, i, kf, len(one))
		p.workers[i] = w
		dialed.Add(1)
		p.done.Add(1)
		go func() {
			defer p.done.Done()
			sem <- struct{}{}
			w.dialErr = w.connect(o.addr, o.dialTimeout, ping, one, keyOff, o.pipeline)
			<-sem
			dialed.Done()
			<-p.begin
			if w.dialErr == nil {
				w.loop(&p.rc)
			}
		}()
	}
	fmt.Fprintf(log, "bucketd-load: opening %d connections to %s\n", o.conns, o.addr)
	dialed.Wait()
	return p
}

// newWorker is connection i before it dials. In prefill mode it owns the
// keys [N*i/conns, N*(i+1)/conns), so the connections write 0..N-1 once.
func (p *pool) newWorker(o options, i int, kf keyFormat, cmdLen int) *worker {
	w := &worker{
		id:     i,
		kf:     kf,
		keys:   uint64(o.keys),
		rng:    o.seed*0x9e3779b97f4a7c15 + uint64(i)*0xd1b54a32d192ed03,
		cmdLen: cmdLen,
		tx:     o.tx > 0,
		lat:    &p.hists[i%stripes],
		sched:  &p.scheds[i%stripes],
	}
	if o.prefill > 0 {
		w.seq = true
		w.next = uint64(o.prefill * int64(i) / int64(o.conns))
		w.last = uint64(o.prefill * int64(i+1) / int64(o.conns))
	}
	return w
}

// tally counts the connections established and failed.
func (p *pool) tally(rep *report) {
	for _, w := range p.workers {
		if w.dialErr != nil {
			rep.ConnectFailures++
			if rep.ConnectError == "" {
				rep.ConnectError = w.dialErr.Error()
			}
		} else {
			rep.Established++
		}
	}
}

// setDeadlines bounds every connection's reads and writes, so a server
// that stops answering cannot hold the run past its end plus --grace.
func (p *pool) setDeadlines(t time.Time) {
	for _, w := range p.workers {
		if w.dialErr == nil {
			_ = w.conn.SetDeadline(t)
		}
	}
}

// release lets every goroutine go and waits for all of them to end: the
// connected ones run the load, the others just return.
func (p *pool) release() {
	close(p.begin)
	p.done.Wait()
}

func (p *pool) closeAll() {
	for _, w := range p.workers {
		if w.conn != nil {
			w.conn.Close()
		}
	}
}

// collect adds the workers' counts and latencies into rep. Throughput is
// measured from the end of the warm-up to finished.
func (p *pool) collect(rep *report, finished time.Time) {
	var all, allSched histogram
	for i := range p.hists {
		all.merge(&p.hists[i])
		allSched.merge(&p.scheds[i])
	}
	var maxNS uint64
	for _, w := range p.workers {
		rep.Requests += w.requests
		rep.Measured += w.measured
		rep.Allowed += w.allowed
		rep.Denied += w.denied
		rep.Errors += w.errors
		maxNS = max(maxNS, w.maxNS)
		if w.firstErr != "" && rep.FirstError == "" {
			rep.FirstError = w.firstErr
		}
		if w.connErr != nil {
			rep.ConnErrors++
			if rep.FirstError == "" {
				rep.FirstError = "connection: " + w.connErr.Error()
			}
		}
	}
	if window := finished.Sub(p.rc.warmEnd); window > 0 {
		rep.Seconds = window.Seconds()
		rep.Throughput = float64(rep.Measured) / window.Seconds()
	}
	rep.Latency = summarize(&all, maxNS)
	if p.rc.interval > 0 {
		s := summarize(&allSched, highestSlot(&allSched))
		rep.Scheduled = &s
	}
}

// highestSlot is the upper bound of the highest slot of h in use (0 when
// h is empty): the from-schedule latency keeps no exact maximum.
func highestSlot(h *histogram) uint64 {
	for i := histCounts - 1; i >= 0; i-- {
		if h.counts[i] > 0 {
			return bucketHigh(i)
		}
	}
	return 0
}

// newRunCtx sets the run's schedule, its request budget and its timeline.
// The run starts 20 ms from now and ends --duration later.
func newRunCtx(o options, established int) runCtx {
	rc := runCtx{conns: o.conns, pipeline: o.pipeline}
	if o.requests > 0 {
		rc.budget = new(atomic.Int64)
		rc.budget.Store(o.requests)
	}
	if o.qps > 0 {
		// Each connection runs qps/established requests per second, in
		// rounds of pipeline requests.
		rc.interval = time.Duration(float64(time.Second) * float64(o.pipeline) * float64(established) / o.qps)
	}
	rc.start = time.Now().Add(20 * time.Millisecond)
	rc.end = rc.start.Add(o.duration)
	rc.warmEnd = rc.start.Add(o.warmup)
	if o.timeline {
		rc.timeline = make([]histogram, int((o.duration+time.Second-1)/time.Second))
	}
	return rc
}

// gcPoller reads the server's GC count from --metrics-url at every second
// boundary of the run, for the timeline's GC cycles per second.
type gcPoller struct {
	counts []int64 // GC count read at second i of the run; -1 unknown
	stop   chan struct{}
	wg     sync.WaitGroup
}

// startGCPoller polls only with a timeline and a --metrics-url; without a
// timeline it keeps no counts, without a URL every count stays unknown.
func startGCPoller(url string, rc *runCtx) *gcPoller {
	g := &gcPoller{stop: make(chan struct{})}
	if rc.timeline == nil {
		return g
	}
	g.counts = make([]int64, len(rc.timeline)+1) // one per second boundary
	for i := range g.counts {
		g.counts[i] = -1
	}
	if url == "" {
		return g
	}
	start := rc.start
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		for i := range g.counts {
			select {
			case <-g.stop:
				return
			case <-time.After(time.Until(start.Add(time.Duration(i) * time.Second))):
			}
			if gc, err := fetchGC(url, time.Second); err == nil {
				g.counts[i] = gc.Count
			}
		}
	}()
	return g
}

// finish stops polling and returns the counts read.
func (g *gcPoller) finish() []int64 {
	close(g.stop)
	g.wg.Wait()
	return g.counts
}

// timelineSeconds summarizes every second of the run that saw a request;
// gc holds the GC count at each second boundary (-1 unknown).
func timelineSeconds(hists []histogram, gc []int64) []second {
	var out []second
	us := func(ns uint64) float64 { return float64(ns) / 1e3 }
	for i := range hists {
		h := &hists[i]
		sec := second{At: i, Requests: h.total(), GC: -1}
		if sec.Requests == 0 {
			continue
		}
		sec.P50, sec.P99, sec.P999 = us(h.quantile(0.5)), us(h.quantile(0.99)), us(h.quantile(0.999))
		sec.Max = us(h.quantile(1))
		if gc[i] >= 0 && gc[i+1] >= 0 {
			sec.GC = gc[i+1] - gc[i]
		}
		out = append(out, sec)
	}
	return out
}

type cpuSample struct {
	at                  time.Time
	server, client      float64
	busy, niced, total  float64
	serverOK, machineOK bool
}

func readCPU(pid int) cpuSample {
	s := cpuSample{at: time.Now(), client: selfCPU()}
	if pid > 0 {
		v, err := procCPU(pid)
		s.server, s.serverOK = v, err == nil
	}
	b, n, t, err := machineCPU()
	s.busy, s.niced, s.total, s.machineOK = b, n, t, err == nil
	return s
}

func (a cpuSample) until(b cpuSample) *cpuReport {
	secs := b.at.Sub(a.at).Seconds()
	if secs <= 0 {
		return nil
	}
	r := &cpuReport{Seconds: secs, ClientCores: (b.client - a.client) / secs, Cores: runtime.NumCPU()}
	if a.serverOK && b.serverOK {
		r.ServerCores = (b.server - a.server) / secs
	}
	if a.machineOK && b.machineOK {
		r.BusyCores = (b.busy - a.busy) / secs
		r.NicedCores = (b.niced - a.niced) / secs
		r.OtherCores = max(0, r.BusyCores-r.ServerCores-r.ClientCores)
	}
	return r
}

// connect opens the worker's connection, checks that the server answers
// PING with +PONG, and builds its command buffer.
func (w *worker) connect(addr string, timeout time.Duration, ping, one []byte, keyOff, pipeline int) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	r := bufio.NewReaderSize(c, max(512, min(64*1024, 16*pipeline)))
	if _, err := c.Write(ping); err != nil {
		c.Close()
		return err
	}
	line, err := r.ReadSlice('\n')
	if err != nil {
		c.Close()
		return err
	}
	if string(line) != "+PONG\r\n" {
		c.Close()
		return fmt.Errorf("PING answered %q", strings.TrimSpace(string(line)))
	}
	_ = c.SetDeadline(time.Time{})
	w.conn, w.r = c, r
	w.buf = make([]byte, 0, len(one)*pipeline)
	w.keyOff = make([]int, pipeline)
	for i := 0; i < pipeline; i++ {
		w.keyOff[i] = len(w.buf) + keyOff
		w.buf = append(w.buf, one...)
	}
	if w.tx {
		w.wrapTx()
	}
	return nil
}

// printf prints one line of the text report.
type printf func(format string, a ...any)

func mib(b int64) string   { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
func ms(us float64) string { return fmt.Sprintf("%.3f ms", us/1e3) }

func (r *report) print(out io.Writer) {
	p := printf(func(format string, a ...any) { fmt.Fprintf(out, format+"\n", a...) })
	r.printRun(p)
	r.printLatency(p)
	if pr := r.Prefill; pr != nil {
		pr.print(p)
	}
	r.Server.print(p)
	if c := r.CPU; c != nil {
		p("  CPU (cores)   server %.2f, client %.2f, machine busy %.2f of %d, so other processes %.2f (%.2f of it niced)",
			c.ServerCores, c.ClientCores, c.BusyCores, c.Cores, c.OtherCores, c.NicedCores)
	}
	c := r.Client
	p("  client        GOMAXPROCS %d of %d CPUs, NOFILE %d/%d, %s", c.GOMAXPROCS, c.NumCPU, c.NoFileSoft, c.NoFileHard, c.GoVersion)
}

// printRun prints what was run and what came back.
func (r *report) printRun(p printf) {
	p("bucketd-load: %s against %s", r.Mode, r.Addr)
	p("  command       %s   (key e.g. %s, keyspace %d)", r.Command, r.KeyExample, r.Keys)
	p("  connections   %d established of %d, %d failed, in %.2f s", r.Established, r.ConnsRequested, r.ConnectFailures, r.ConnectSeconds)
	if r.ConnectError != "" {
		p("                first failure: %s", r.ConnectError)
	}
	pace := "as fast as possible"
	if r.QPSTarget > 0 {
		pace = fmt.Sprintf("paced at %.0f req/s in total", r.QPSTarget)
	}
	p("  pipeline      %d, %s", r.Pipeline, pace)
	if r.Tx > 0 {
		p("  transactions  MULTI, %d TB.ACQUIREs, EXEC per round: %.0f transactions/s", r.Tx, r.Throughput/float64(r.Tx))
	}
	p("  requests      %d (%d measured over %.2f s after %.1f s warm-up)", r.Requests, r.Measured, r.Seconds, r.WarmupSeconds)
	p("  throughput    %.0f req/s", r.Throughput)
	p("  replies       allowed %d, denied %d", r.Allowed, r.Denied)
	p("  errors        %d error replies, %d broken connections", r.Errors, r.ConnErrors)
	if r.FirstError != "" {
		p("                first: %s", r.FirstError)
	}
}

// printLatency prints the latency quantiles and the timeline.
func (r *report) printLatency(p printf) {
	l := r.Latency
	p("  latency       p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  mean %s  (write to last reply of a round)",
		ms(l.P50), ms(l.P90), ms(l.P99), ms(l.P999), ms(l.Max), ms(l.Mean))
	if s := r.Scheduled; s != nil {
		p("  from schedule p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (from the round's scheduled start: includes client lag)",
			ms(s.P50), ms(s.P90), ms(s.P99), ms(s.P999), ms(s.Max))
	}
	if len(r.Timeline) > 0 {
		p("  timeline      second: requests, p50 / p99 / p99.9 / max ms, GC cycles completed (-1 unknown)")
		for _, t := range r.Timeline {
			p("    %4d  %8d  %7.3f / %7.3f / %7.3f / %7.3f  %d", t.At, t.Requests, t.P50/1e3, t.P99/1e3, t.P999/1e3, t.Max/1e3, t.GC)
		}
	}
}

func (pr *prefillReport) print(p printf) {
	p("  prefill       %d buckets requested, %d keys added, complete=%v", pr.Buckets, pr.Created, pr.Complete)
	if pr.RSSPerBucket != 0 {
		p("                %.1f bytes per bucket by VmRSS", pr.RSSPerBucket)
	}
	if pr.UsedMemPerBuckt != 0 {
		p("                %.1f bytes per bucket by INFO used_memory", pr.UsedMemPerBuckt)
	}
}

func (s *serverReport) print(p printf) {
	if s.PID > 0 {
		p("  server pid %d VmRSS before %s, peak %s, after %s (VmHWM %s, %d samples)",
			s.PID, mib(s.RSSBefore), mib(s.RSSPeak), mib(s.RSSAfter), mib(s.HWM), s.Samples)
	}
	if s.RSSError != "" {
		p("                RSS: %s", s.RSSError)
	}
	if b, a := s.Before, s.After; b != nil && a != nil {
		p("  server INFO   used_memory %s -> %s, keys %d -> %d", mib(b.UsedMemory), mib(a.UsedMemory), b.Keys, a.Keys)
		ver := "redis " + a.RedisVersion
		if a.BucketdVer != "" {
			ver = fmt.Sprintf("bucketd %s, GOMAXPROCS %d", a.BucketdVer, a.GOMAXPROCS)
		}
		p("                %s", ver)
	}
	if s.InfoError != "" {
		p("                INFO: %s", s.InfoError)
	}
	if g := s.GC; g != nil {
		p("  server GC     %d cycles, %.3f ms stop-the-world pauses in total", g.Count, g.PauseTotalS*1e3)
	}
	if s.GCError != "" {
		p("                GC: %s", s.GCError)
	}
}
