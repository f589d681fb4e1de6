// Command gubernator-bench runs the same shared-limit workload against two
// Gubernator peers (github.com/gubernator-io/gubernator/v2, Behavior
// GLOBAL, with TOKEN_BUCKET and with LEAKY_BUCKET) and against bucketd
// instances (lease mode on one Redis, started by the caller), and reports
// for each the decisions per second and the grants above what one bucket
// per key allows.
//
// The workload: --keys keys, each a bucket of --capacity tokens refilled at
// --rate per second and starting full, asked far above that rate by
// --clients concurrent clients in closed loops, split evenly over the two
// peers or instances, each round trip --batch decisions on keys drawn
// uniformly (Gubernator: one GetRateLimits of that many requests;
// bucketd: a pipeline of that many TB.ACQUIREs). Every run uses fresh keys.
//
// A grant is timed at its reply. For each key the tool finds the most
// grants replied in any window of 100 ms and of 1 s and compares it with
// capacity + rate * (window + the run's slowest round trip), since a
// decision happened up to a round trip before its reply; the excess,
// summed over the keys, is "grants above one bucket". Total grants are
// compared with the ideal, keys * (capacity + rate * T) for a run of T.
//
// The driver starts the Gubernator peers itself, as two processes of its
// own binary (the peer subcommand) on 127.0.0.1 and 127.0.0.2, each with
// the static peer list of both. Usage:
//
//	gubernator-bench [--bucketd ADDR,ADDR --bucketd-pids PID,PID,REDISPID] [flags]
//	gubernator-bench peer --grpc HOST:PORT --peers HOST:PORT,HOST:PORT
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	gubernator "github.com/gubernator-io/gubernator/v2"
)

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "peer" {
		err = runPeer(os.Args[2:], os.Stdin, os.Stdout, os.Stderr)
	} else {
		err = runDriver(os.Args[1:], os.Stdout, os.Stderr)
	}
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gubernator-bench:", err)
		os.Exit(1)
	}
}

type options struct {
	bucketd     string
	bucketdPIDs string
	contenders  string
	keys        int
	capacity    int64
	rate        float64
	clients     int
	batches     string
	duration    time.Duration
	reps        int
	syncWait    time.Duration
	window      time.Duration
	jsonOut     string
	command     string
}

func parseDriverFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("gubernator-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.bucketd, "bucketd", "", "bucketd addresses, comma-separated (empty: no bucketd contender)")
	fs.StringVar(&o.bucketdPIDs, "bucketd-pids", "", "PIDs whose CPU time counts as bucketd's (its instances and Redis), comma-separated")
	fs.StringVar(&o.contenders, "contenders", "gubernator-token,gubernator-leaky,bucketd", "contenders in the order of the first repetition (later ones rotate it)")
	fs.IntVar(&o.keys, "keys", 20, "keys (buckets) shared by all clients")
	fs.Int64Var(&o.capacity, "capacity", 100, "capacity of every bucket, tokens")
	fs.Float64Var(&o.rate, "rate", 50, "refill of every bucket, tokens per second")
	fs.IntVar(&o.clients, "clients", 32, "concurrent clients, one connection each, split evenly over the two peers or instances")
	fs.StringVar(&o.batches, "batches", "1,16", "decisions per round trip, comma-separated: each is measured")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of every run")
	fs.IntVar(&o.reps, "reps", 3, "repetitions; the table has medians")
	fs.DurationVar(&o.syncWait, "global-sync-wait", 0, "Gubernator's GlobalSyncWait on both peers (0: its default, 100ms)")
	fs.DurationVar(&o.window, "gubernator-window", 0, "Gubernator's duration: the limit is rate x this per this, burst capacity (0: capacity per capacity/rate)")
	fs.StringVar(&o.jsonOut, "json", "", "also write every run as JSON to this `file`")
	fs.StringVar(&o.command, "command", "", "the command line to print above the table (default: this one)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.keys < 1 || o.capacity < 1 || o.rate <= 0 || o.reps < 1 || o.duration <= 0:
		return o, errors.New("--keys, --capacity, --reps must be at least 1, --rate and --duration positive")
	case o.window < 0 || (o.window > 0 && int64(o.rate*o.window.Seconds()) < 1):
		return o, errors.New("--gubernator-window must be 0 or long enough for a limit of at least 1")
	case o.clients < 2 || o.clients%2 != 0:
		return o, errors.New("--clients must be even and at least 2: half go to each peer or instance")
	}
	return o, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func runDriver(args []string, stdout, stderr io.Writer) error {
	o, err := parseDriverFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.command == "" {
		o.command = "gubernator-bench " + strings.Join(args, " ")
	}
	batches, err := positiveInts(o.batches, "--batches", "a positive integer")
	if err != nil {
		return err
	}
	pids, err := positiveInts(o.bucketdPIDs, "--bucketd-pids", "a PID")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	order, peers, err := startContenders(ctx, o, pids, stderr)
	defer func() { stopPeers(peers) }()
	if err != nil {
		return err
	}

	lim := limit{capacity: o.capacity, ratePerSec: o.rate}
	windows := []time.Duration{100 * time.Millisecond, time.Second}
	var results []runResult
	began := time.Now()
	for rep := 1; rep <= o.reps; rep++ {
		for _, b := range batches {
			for j := range order {
				e := order[(j+rep-1)%len(order)] // rotated each repetition
				w := workload{lim: lim, keys: o.keys, clients: o.clients, batch: b, duration: o.duration, windows: windows}
				runID := fmt.Sprintf("%d-r%d-b%d-%s", began.Unix(), rep, b, e.c.name())
				r, err := runOnce(ctx, e.c, w, rep, runID, e.pids)
				if err != nil {
					return err
				}
				results = append(results, r)
				fmt.Fprintln(stderr, r.line())
			}
		}
	}
	if o.jsonOut != "" {
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	printReport(stdout, o, results, batches, order[0].c.name())
	var errs int64
	for _, r := range results {
		errs += r.Errors
	}
	if errs > 0 {
		return fmt.Errorf("%d decisions failed (see the errors column)", errs)
	}
	return nil
}

// positiveInts parses the comma-separated list of a flag, each a
// positive integer (what says what one is, for the error).
func positiveInts(list, flag, what string) ([]int, error) {
	var out []int
	for _, f := range splitList(list) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not %s", flag, f, what)
		}
		out = append(out, n)
	}
	return out, nil
}

// contenderEntry is a contender and the PIDs whose CPU time its runs count.
type contenderEntry struct {
	c    contender
	pids []int
}

// startContenders makes the contenders of --contenders, in that order,
// starting the two Gubernator peers on loopback the first time one needs
// them. It returns the peers it started even with an error, for the
// caller to stop.
func startContenders(ctx context.Context, o options, bucketdPIDs []int, stderr io.Writer) ([]contenderEntry, []*peerProc, error) {
	lim := limit{capacity: o.capacity, ratePerSec: o.rate}
	var order []contenderEntry
	var peers []*peerProc
	for _, name := range splitList(o.contenders) {
		switch name {
		case "gubernator-token", "gubernator-leaky":
			if peers == nil {
				addrs, err := freeAddrs([]string{"127.0.0.1", "127.0.0.2"})
				if err != nil {
					return nil, peers, err
				}
				if peers, err = startPeers(addrs, o.syncWait, stderr); err != nil {
					return nil, peers, err
				}
				if err := checkPeers(ctx, addrs); err != nil {
					return nil, peers, err
				}
			}
			var addrs []string
			var ppids []int
			for _, p := range peers {
				addrs = append(addrs, p.addr)
				ppids = append(ppids, p.cmd.Process.Pid)
			}
			alg := gubernator.Algorithm_TOKEN_BUCKET
			if name == "gubernator-leaky" {
				alg = gubernator.Algorithm_LEAKY_BUCKET
			}
			order = append(order, contenderEntry{&gubernatorContender{label: name, addrs: addrs, algorithm: alg, lim: lim, window: o.window}, ppids})
		case "bucketd":
			addrs := splitList(o.bucketd)
			if len(addrs) == 0 {
				fmt.Fprintln(stderr, "gubernator-bench: no --bucketd: bucketd left out")
				continue
			}
			order = append(order, contenderEntry{&bucketdContender{label: name, addrs: addrs, lim: lim}, bucketdPIDs})
		default:
			return nil, peers, fmt.Errorf("--contenders: unknown %q (gubernator-token, gubernator-leaky, bucketd)", name)
		}
	}
	if len(order) == 0 {
		return nil, peers, errors.New("no contenders")
	}
	return order, peers, nil
}

// checkPeers asks each peer's health check until it counts every peer.
func checkPeers(ctx context.Context, addrs []string) error {
	for _, a := range addrs {
		c, err := gubernator.DialV1Server(a, nil)
		if err != nil {
			return err
		}
		var last string
		ok := false
		for i := 0; i < 50 && !ok; i++ {
			hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			h, err := c.HealthCheck(hctx, &gubernator.HealthCheckReq{})
			cancel()
			if err == nil && int(h.PeerCount) == len(addrs) && h.Status == "healthy" {
				ok = true
				break
			}
			last = fmt.Sprint(h, err)
			time.Sleep(100 * time.Millisecond)
		}
		if !ok {
			return fmt.Errorf("peer %s not healthy with %d peers: %s", a, len(addrs), last)
		}
	}
	return nil
}
