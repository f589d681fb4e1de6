// Command bucketd is a token-bucket rate limiter that speaks the Redis
// protocol. main only loads the configuration, wires the packages together
// and handles signals; the work happens in internal/resp and its layers,
// internal/shard, internal/bucket, internal/config and internal/metrics.
//
// The wiring, in the order run follows: the configuration
// (internal/config, validated there), the mode, where the buckets live
// (mode.go: one type per mode, memory.go for the shards with a snapshot
// keeper and a replicator, store.go for the Redis store), the protocol
// front and metrics (daemon.go), then serving until a signal and shutting
// down in order (daemon.go). Every goroutine run starts is awaited before
// run returns.
//
// Signals are caught from main's first statement: SIGINT and SIGTERM end
// the start-up loads too (a clean exit, nothing served), and a SIGHUP that
// arrives before bucketd serves is logged and applied once it does
// (reload.go). No signal ever takes its default action, which for SIGHUP
// ends the process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/bucketd/bucketd/internal/config"
	"github.com/bucketd/bucketd/internal/gcfloor"
	"github.com/bucketd/bucketd/internal/metrics"
	"github.com/redis/go-redis/v9"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// gcFloor is the smallest heap target the collector gets (see
// internal/gcfloor): with the buckets outside the heap, the heap is a few
// megabytes and GOGC=100 alone would collect hundreds of times a second.
const gcFloor = 16 << 20

func main() {
	// First, before anything that can take time: SIGHUP is never
	// unregistered, so one after the reload loop has ended is dropped.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	gcfloor.Set(gcFloor) // the process's GC setting: here, not in run, which tests call
	err := runWithSIGHUP(ctx, hup, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0) // the usage was asked for and printed
	case err != nil:
		fmt.Fprintln(os.Stderr, "bucketd:", err)
		os.Exit(2)
	}
}

// run is bucketd without SIGHUP, as the tests in this package run it: a
// signal reaches the whole test process, so none of them registers one.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return runWithSIGHUP(ctx, nil, args, getenv, stderr)
}

// runWithSIGHUP starts bucketd and serves until ctx is cancelled, then
// shuts down gracefully (see daemon.shutdown); hup carries the SIGHUPs
// (nil: none), from the start (see startup). A ctx cancelled before
// bucketd serves ends it cleanly, without serving. `bucketd healthcheck`
// instead asks a running bucketd's /healthz, and --version, anywhere on the
// command line, prints the version on standard output instead of starting.
func runWithSIGHUP(ctx context.Context, hup chan os.Signal, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "healthcheck" {
		return healthcheck(args[1:], getenv, stderr)
	}
	if slices.Contains(args, "--version") || slices.Contains(args, "-version") { // the other flags do not matter then
		_, err := fmt.Printf("bucketd %s %s %s/%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return err
	}
	cfg, err := config.Load(args, getenv, stderr)
	if err != nil {
		return err
	}
	level := new(slog.LevelVar)
	level.Set(cfg.LogLevel)
	logger := newLogger(cfg.LogFormat, level, stderr)
	redis.SetLogger(redisLogger{logger}) // go-redis's own lines, in our format
	rl := &reloader{current: cfg, file: cfg.File, level: level, logger: logger, getenv: getenv,
		startup: watchStartup(ctx, hup, cfg.File, logger)}
	defer rl.startup.end()
	tlsConf, err := cfg.TLSConfig()
	if err != nil {
		return err
	}
	md, err := openMode(ctx, cfg, logger)
	if err != nil {
		return startInterrupted(ctx, err, logger)
	}
	defer md.close()
	d, err := newDaemon(cfg, tlsConf, md, rl, logger)
	if err != nil {
		return err
	}
	if err := d.listen(); err != nil {
		return err
	}
	return startInterrupted(ctx, d.serve(ctx, hup), logger)
}

// startInterrupted turns the error of a start-up load that SIGINT or
// SIGTERM cut short into a clean exit: the operator asked bucketd to stop,
// and as it served nothing, nothing is lost; it also writes no snapshot
// and no replication, which would hold a partial load.
func startInterrupted(ctx context.Context, err error, logger *slog.Logger) error {
	if err == nil || ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
		return err
	}
	logger.Info("start-up interrupted by a signal; exiting without serving", "during", err.Error())
	return nil
}

// startup watches the signals while bucketd starts: loading a snapshot or
// the state from Redis can take seconds or minutes.
//
// A SIGHUP is logged at once, and the reload it asks for is deferred, not
// dropped, as the operator who edited the file expects it read: there is
// no server to apply it to yet. end puts one SIGHUP back into hup for the
// reload loop (onSIGHUP), which stands for any number of them. Without
// --config the usual warning is logged instead.
//
// SIGINT or SIGTERM (ctx ending) is logged at once too, as the step under
// way may take a moment to return; bucketd then exits without serving
// (startInterrupted).
type startup struct {
	stop, done chan struct{}
	once       sync.Once
}

// watchStartup starts the watch; nil hup: a nil startup, which watches
// nothing.
func watchStartup(ctx context.Context, hup chan os.Signal, file string, logger *slog.Logger) *startup {
	if hup == nil {
		return nil
	}
	s := &startup{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		pending, cancelled := false, ctx.Done()
		for {
			select {
			case <-s.stop:
				if pending {
					select {
					case hup <- syscall.SIGHUP:
					default: // one came meanwhile: it stands for this one
					}
				}
				return
			case <-cancelled:
				cancelled = nil
				logger.Info("signal during start-up: stopping; bucketd exits without serving")
			case <-hup:
				if file == "" {
					logger.Warn("SIGHUP ignored: no --config file to reload")
					continue
				}
				pending = true
				logger.Info("SIGHUP during start-up: the configuration is reloaded once bucketd serves", "file", file)
			}
		}
	}()
	return s
}

// end stops the watch and waits for it; a held SIGHUP is then in hup. Safe
// to call more than once, from several goroutines, and on nil.
func (s *startup) end() {
	if s == nil {
		return
	}
	s.once.Do(func() {
		close(s.stop)
		<-s.done
	})
}

func newLogger(format string, level *slog.LevelVar, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// redisLogger sends go-redis's internal log lines through slog, so that
// --log-format json stays parseable.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

// healthcheckUsage is what `bucketd healthcheck --help` prints; `bucketd
// --help` names the subcommand (internal/config's usage).
const healthcheckUsage = `Usage: bucketd healthcheck [URL]

Asks a running bucketd whether it is alive, for container HEALTHCHECKs in
images without curl: GET URL and exit 0 when it answers 200 within 2 s,
2 otherwise, with the reason on stderr. Without URL it asks /healthz on
BUCKETD_METRICS_ADDR (default 127.0.0.1:9380; a wildcard host such as
0.0.0.0 is reached through 127.0.0.1). Ask /readyz instead to know whether
it takes clients: bucketd healthcheck http://127.0.0.1:9380/readyz
`

// healthcheck implements `bucketd healthcheck [URL]`, for container
// HEALTHCHECKs in images without curl: GET the health endpoint, succeed on
// 200. Without a URL it asks /healthz on BUCKETD_METRICS_ADDR (default
// 127.0.0.1:9380), reaching a wildcard address through loopback. -h,
// -help and --help print the usage on stderr and return flag.ErrHelp; any
// other argument that starts with a dash is a usage error, never a URL.
func healthcheck(args []string, getenv func(string) string, stderr io.Writer) error {
	for _, a := range args {
		switch {
		case a == "-h" || a == "-help" || a == "--help":
			fmt.Fprint(stderr, healthcheckUsage)
			return flag.ErrHelp
		case strings.HasPrefix(a, "-"):
			return fmt.Errorf("healthcheck: unknown flag %s: usage: bucketd healthcheck [URL] (see bucketd healthcheck --help)", a)
		}
	}
	var url string
	switch len(args) {
	case 0:
		addr := getenv("BUCKETD_METRICS_ADDR")
		if addr == "" {
			addr = config.Default().MetricsAddr
		}
		u, err := metrics.HealthzURL(addr)
		if err != nil {
			return fmt.Errorf("healthcheck: BUCKETD_METRICS_ADDR %q: %w", addr, err)
		}
		url = u
	case 1:
		url = args[0]
	default:
		return errors.New("usage: bucketd healthcheck [URL] (see bucketd healthcheck --help)")
	}
	if err := metrics.CheckHealth(url); err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	return nil
}
