// Command bucketd is a token-bucket rate limiter that speaks the Redis
// protocol. main only loads the configuration, wires the packages together
// and handles signals; the work happens in internal/resp, internal/shard,
// internal/bucket, internal/config and internal/metrics.
//
// The wiring, in the order run follows: the configuration
// (internal/config, validated there), the buckets for the mode
// (buckets.go: shards in memory with a snapshot keeper and a replicator,
// or the Redis store), the protocol server and metrics (daemon.go), then
// serving until a signal and shutting down in order (daemon.go). Every
// goroutine run starts is awaited before run returns.
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	gcfloor.Set(gcFloor) // the process's GC setting: here, not in run, which tests call
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0) // the usage was asked for and printed
	case err != nil:
		fmt.Fprintln(os.Stderr, "bucketd:", err)
		os.Exit(2)
	}
}

// run starts bucketd and serves until ctx is cancelled, then shuts down
// gracefully (see daemon.shutdown). `bucketd healthcheck` instead asks a
// running bucketd's /healthz.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "healthcheck" {
		return healthcheck(args[1:], getenv)
	}
	cfg, err := config.Load(args, getenv, stderr)
	if err != nil {
		return err
	}
	level := new(slog.LevelVar)
	level.Set(cfg.LogLevel)
	logger := newLogger(cfg.LogFormat, level, stderr)
	redis.SetLogger(redisLogger{logger}) // go-redis's own lines, in our format
	tlsConf, err := cfg.TLSConfig()
	if err != nil {
		return err
	}
	b, err := openBuckets(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer b.close()
	rl := &reloader{current: cfg, file: cfg.File, level: level, logger: logger, getenv: getenv}
	d, err := newDaemon(cfg, tlsConf, b, rl, logger)
	if err != nil {
		return err
	}
	if err := d.listen(); err != nil {
		return err
	}
	return d.serve(ctx)
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

// healthcheck implements `bucketd healthcheck [URL]`, for container
// HEALTHCHECKs in images without curl: GET the health endpoint, succeed on
// 200. Without a URL it asks /healthz on BUCKETD_METRICS_ADDR (default
// 127.0.0.1:9380), reaching a wildcard address through loopback.
func healthcheck(args []string, getenv func(string) string) error {
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
		return errors.New("usage: bucketd healthcheck [URL]")
	}
	if err := metrics.CheckHealth(url); err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	return nil
}
