// Command bucketd is a token-bucket rate limiter that speaks the Redis
// protocol. main only parses flags, wires the packages together and handles
// signals; the work happens in internal/resp, internal/shard and
// internal/bucket.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/shard"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "bucketd:", err)
		}
		os.Exit(2)
	}
}

// config is the validated command line.
type config struct {
	addr            string
	shards          int
	maxKeyBytes     int
	maxQueryBytes   int
	maxArgs         int
	shutdownTimeout time.Duration
	logLevel        slog.Level
	logFormat       string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("bucketd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: bucketd [flags]\n\nA token-bucket rate limiter that speaks the Redis protocol.\nTry: redis-cli -p 6380 TB.ACQUIRE user:1 10 1\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nEnvironment: GOMAXPROCS sets the number of OS threads running Go code (default: all CPUs).\n")
	}
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:6380", "`host:port` to listen on for Redis clients; loopback only unless told otherwise")
	fs.IntVar(&cfg.shards, "shards", shard.DefaultShards(runtime.GOMAXPROCS(0)), "number of bucket shards, each owned by one goroutine (rounded up to a power of two)")
	fs.IntVar(&cfg.maxKeyBytes, "max-key-bytes", resp.DefaultMaxKeyBytes, "longest key accepted; longer keys get -ERR key too long")
	fs.IntVar(&cfg.maxQueryBytes, "max-query-bytes", resp.DefaultMaxQueryBytes, "most bytes of one unfinished command a connection may buffer before it gets a protocol error and is closed")
	fs.IntVar(&cfg.maxArgs, "max-args", resp.DefaultMaxArgs, "most arguments in one command")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a graceful shutdown waits for connections to finish")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&cfg.logFormat, "log-format", "text", "log format: text or json")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q: bucketd takes only flags (see --help)", fs.Arg(0))
	}
	if err := cfg.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return cfg, fmt.Errorf("--log-level %q: use debug, info, warn or error", *level)
	}
	switch {
	case cfg.logFormat != "text" && cfg.logFormat != "json":
		return cfg, fmt.Errorf("--log-format %q: use text or json", cfg.logFormat)
	case cfg.shards < 1 || cfg.shards > 1<<16:
		return cfg, fmt.Errorf("--shards %d: use a number from 1 to 65536", cfg.shards)
	case cfg.maxKeyBytes < 1:
		return cfg, fmt.Errorf("--max-key-bytes %d: must be at least 1", cfg.maxKeyBytes)
	case cfg.maxQueryBytes < 1024:
		return cfg, fmt.Errorf("--max-query-bytes %d: must be at least 1024", cfg.maxQueryBytes)
	case cfg.maxArgs < 6:
		return cfg, fmt.Errorf("--max-args %d: must be at least 6 (TB.ACQUIRE key capacity rate cost WITHINFO)", cfg.maxArgs)
	case cfg.shutdownTimeout <= 0:
		return cfg, fmt.Errorf("--shutdown-timeout %v: must be positive", cfg.shutdownTimeout)
	}
	return cfg, nil
}

// run starts bucketd and serves until ctx is cancelled, then shuts down
// gracefully: stop accepting, answer what is in flight, stop the shards.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	logger := newLogger(cfg, stderr)

	group := shard.New(shard.Config{Shards: cfg.shards})
	defer group.Close()
	srv, err := resp.NewServer(resp.Config{
		Limiter:     resp.Shards(group),
		MaxKeyBytes: cfg.maxKeyBytes,
		Limits: resp.Limits{
			MaxQueryBytes: cfg.maxQueryBytes,
			MaxArgs:       cfg.maxArgs,
		},
		Logger:  logger,
		Version: version,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is another server using the port? choose one with --addr)", cfg.addr, err)
	}
	if !isLoopback(ln.Addr()) {
		logger.Warn("listening beyond loopback: any host that can reach this address can use and reset your limits", "addr", ln.Addr().String())
	}
	logger.Info("listening", "addr", ln.Addr().String(), "shards", group.Len(), "gomaxprocs", runtime.GOMAXPROCS(0), "version", version)

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down", "timeout", cfg.shutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		logger.Warn("connections did not finish in time; closed them", "err", err)
	}
	if err := <-serveErr; err != nil {
		logger.Warn("serve ended with an error", "err", err)
	}
	group.Close()
	logger.Info("stopped")
	return nil
}

func newLogger(cfg config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.logLevel}
	if cfg.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback() || strings.HasPrefix(a.String(), "localhost:")
}
