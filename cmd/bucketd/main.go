// Command bucketd is a token-bucket rate limiter that speaks the Redis
// protocol. main only loads the configuration, wires the packages together
// and handles signals; the work happens in internal/resp, internal/shard,
// internal/bucket, internal/config and internal/metrics.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bucketd/bucketd/internal/config"
	"github.com/bucketd/bucketd/internal/gcfloor"
	"github.com/bucketd/bucketd/internal/metrics"
	"github.com/bucketd/bucketd/internal/redisstore"
	"github.com/bucketd/bucketd/internal/replica"
	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/shard"
	"github.com/bucketd/bucketd/internal/snapshot"
	"github.com/prometheus/client_golang/prometheus"
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
// gracefully: stop accepting, answer what is in flight, stop the shards.
// `bucketd healthcheck` instead asks a running bucketd's /healthz.
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
	storeMode := cfg.Store != "" || len(cfg.StoreCluster) > 0
	if storeMode && (cfg.DataDir != "" || cfg.MaxBuckets > 0) {
		return errors.New("--data-dir and --max-buckets apply to buckets kept in memory; in store mode (--store, --store-cluster) Redis keeps them: drop those flags")
	}
	tlsConf, err := cfg.TLSConfig()
	if err != nil {
		return err
	}

	groupCfg := shard.Config{Shards: cfg.Shards, MaxBuckets: cfg.MaxBuckets}
	if cfg.Replicate != "" {
		groupCfg.TrackChanges = cfg.ReplicateQueue
	}
	group := shard.New(groupCfg)
	defer group.Close()

	var keeper *snapshot.Keeper
	if cfg.DataDir != "" {
		keeper = &snapshot.Keeper{Dir: cfg.DataDir, Group: group, Logger: logger}
		if err := loadSnapshot(keeper, cfg.IgnoreCorruptSnapshot, logger); err != nil {
			return err
		}
	}

	var rep *replica.Replicator
	if cfg.Replicate != "" {
		if rep, err = newReplicator(cfg, group, logger); err != nil {
			return err
		}
	}

	var limiter resp.Limiter = resp.Memory(group)
	var store *redisstore.Store
	if storeMode {
		client, err := newStoreClient(cfg)
		if err != nil {
			return err
		}
		defer client.Close()
		store, err = redisstore.New(redisstore.Config{
			Client:   client,
			Prefix:   cfg.ReplicatePrefix,
			Timeout:  cfg.RedisTimeout,
			FailOpen: cfg.OnRedisError == "allow",
			Logger:   logger,
		})
		if err != nil {
			return err
		}
		defer store.Close()
		loadCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := store.LoadScript(loadCtx); err != nil {
			logger.Warn("could not load the script into Redis yet; it is loaded on first use", "err", err)
		}
		cancel()
		limiter = store
	}

	reg := prometheus.NewRegistry()
	var srv *resp.Server
	sources := metrics.Sources{
		Buckets: limiter.Stats,
		Server:  func() resp.ServerStats { return srv.Stats() },
	}
	if store == nil {
		sources.QueueDepths = group.QueueDepths
	}
	if rep != nil {
		sources.Replication = func() metrics.ReplicationStats {
			st := rep.Stats()
			return metrics.ReplicationStats{
				QueueDepth: st.QueueDepth, QueueCapacity: st.QueueCapacity, LagSeconds: st.LagSeconds,
				Applied: st.Applied, Dropped: st.Dropped, RedisErrors: st.RedisErrors,
			}
		}
	}
	m, err := metrics.New(reg, sources)
	if err != nil {
		return err
	}
	if err := metrics.RegisterRuntime(reg); err != nil {
		return err
	}

	rl := &reloader{current: cfg, level: level, logger: logger, getenv: getenv}
	serverCfg := resp.Config{
		Limiter:     limiter,
		MaxKeyBytes: cfg.MaxKeyBytes,
		Limits: resp.Limits{
			MaxQueryBytes: cfg.MaxQueryBytes,
			MaxArgs:       cfg.MaxArgs,
		},
		RequirePass:     cfg.RequirePass,
		ProtectedMode:   cfg.ProtectedMode,
		MaxClients:      cfg.MaxClients,
		IdleTimeout:     cfg.IdleTimeout,
		TLS:             tlsConf,
		Logger:          logger,
		Version:         version,
		ObservePipeline: m.ObservePipeline,
	}
	if cfg.File != "" {
		serverCfg.Reload = rl.reload
	}
	if rep != nil {
		serverCfg.Info = append(serverCfg.Info, rep.Info)
	}
	if store != nil {
		serverCfg.Info = append(serverCfg.Info, store.Info)
	}
	srv, err = resp.NewServer(serverCfg)
	if err != nil {
		return err
	}
	rl.srv = srv
	srv.SetPolicies(respPolicies(cfg.Policies))

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is another server using the port? choose one with --addr)", cfg.Addr, err)
	}
	if !isLoopback(ln.Addr()) && cfg.RequirePass == "" {
		if cfg.ProtectedMode {
			logger.Warn("LISTENING BEYOND LOOPBACK WITHOUT A PASSWORD: protected mode refuses every non-loopback client; set --requirepass to let them in",
				"addr", ln.Addr().String())
		} else {
			logger.Warn("LISTENING BEYOND LOOPBACK WITHOUT A PASSWORD AND WITH PROTECTED MODE OFF: any host that can reach this address can spend and reset your limits",
				"addr", ln.Addr().String())
		}
	}

	var ready atomic.Bool
	var metricsSrv *metrics.Server
	if cfg.MetricsAddr != "" {
		metricsSrv, err = metrics.Start(cfg.MetricsAddr, metrics.Handler(reg, ready.Load), logger)
		if err != nil {
			ln.Close()
			return fmt.Errorf("metrics on %s: %w (choose another with --metrics-addr, or disable with --metrics-addr=)", cfg.MetricsAddr, err)
		}
	}

	// A replicating bucketd takes its state back from Redis before it
	// answers anyone, so a restart does not hand every client a fresh
	// burst; /readyz says "not ready" meanwhile.
	var repDone chan struct{}
	repCtx, stopRep := context.WithCancel(context.Background())
	defer stopRep()
	if rep != nil {
		loadCtx, cancelLoad := context.WithTimeout(ctx, 60*time.Second)
		start := time.Now()
		n, err := rep.Load(loadCtx)
		cancelLoad()
		if err != nil {
			logger.Error("could not load bucket state from Redis; serving anyway (keys not loaded start full) and retrying the load in the background",
				"loaded", n, "err", err)
			rep.LoadLater()
		} else {
			logger.Info("loaded bucket state from Redis", "buckets", n, "took", time.Since(start).Round(time.Millisecond))
		}
		repDone = make(chan struct{})
		go func() { defer close(repDone); rep.Run(repCtx) }()
	}
	if keeper != nil {
		go keeper.Run(repCtx, cfg.SnapshotInterval)
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			if cfg.File == "" {
				logger.Warn("SIGHUP ignored: no --config file to reload")
				continue
			}
			rl.reload() //nolint:errcheck // reload logs its own outcome
		}
	}()

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	ready.Store(true)
	mode := "memory"
	switch {
	case rep != nil:
		mode = "replicate"
	case store != nil:
		mode = "store"
	}
	attrs := []any{"addr", ln.Addr().String(), "mode", mode, "shards", group.Len(), "gomaxprocs", runtime.GOMAXPROCS(0), "version", version, "tls", tlsConf != nil}
	if metricsSrv != nil {
		attrs = append(attrs, "metrics", metricsSrv.Addr().String())
	}
	logger.Info("listening", attrs...)

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	ready.Store(false)
	logger.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		logger.Warn("connections did not finish in time; closed them", "err", err)
	}
	if err := <-serveErr; err != nil {
		logger.Warn("serve ended with an error", "err", err)
	}
	if rep != nil {
		// Nothing decides any more: write the last changes to Redis.
		stopRep()
		<-repDone
		if err := rep.Flush(shutdownCtx); err != nil {
			logger.Warn("replication could not flush every change before exit", "err", err)
		} else {
			logger.Info("replication flushed")
		}
	}
	if keeper != nil {
		start := time.Now()
		if n, err := keeper.Save(); err != nil {
			logger.Error("final snapshot failed; the previous one stays", "path", keeper.Path(), "err", err)
		} else {
			logger.Info("snapshot written", "path", keeper.Path(), "buckets", n, "took", time.Since(start).Round(time.Millisecond))
		}
	}
	group.Close()
	if metricsSrv != nil {
		if err := metricsSrv.Shutdown(shutdownCtx); err != nil {
			logger.Warn("metrics server did not stop cleanly", "err", err)
		}
	}
	logger.Info("stopped")
	return nil
}

// reloader applies a new configuration file on SIGHUP or CONFIG RELOAD:
// policies and the log level change live; a broken file leaves everything
// as it was.
type reloader struct {
	mu      sync.Mutex
	current config.Config
	srv     *resp.Server
	level   *slog.LevelVar
	logger  *slog.Logger
	getenv  func(string) string
}

func (r *reloader) reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, restart, err := r.current.Reload(r.getenv)
	if err != nil {
		r.logger.Error("configuration reload failed; the running configuration stays", "file", r.current.File, "err", err)
		return err
	}
	r.srv.SetPolicies(respPolicies(next.Policies))
	r.level.Set(next.LogLevel)
	r.current = next
	r.logger.Info("configuration reloaded", "file", next.File, "policies", len(next.Policies))
	if len(restart) > 0 {
		r.logger.Warn("some changed settings take effect only after a restart", "settings", strings.Join(restart, ","))
	}
	return nil
}

func respPolicies(in map[string]config.Policy) map[string]resp.Policy {
	out := make(map[string]resp.Policy, len(in))
	for name, p := range in {
		out[name] = resp.Policy{Capacity: p.Capacity, Rate: p.Rate, Prefix: p.Prefix}
	}
	return out
}

func newLogger(format string, level *slog.LevelVar, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// healthcheck implements `bucketd healthcheck [URL]`, for container
// HEALTHCHECKs in images without curl: GET the health endpoint, succeed on
// 200. Without a URL it asks /healthz on BUCKETD_METRICS_ADDR (default
// 127.0.0.1:9380), reaching a wildcard address through loopback.
func healthcheck(args []string, getenv func(string) string) error {
	url := ""
	switch len(args) {
	case 0:
		addr := getenv("BUCKETD_METRICS_ADDR")
		if addr == "" {
			addr = "127.0.0.1:9380"
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("healthcheck: BUCKETD_METRICS_ADDR %q: %w", addr, err)
		}
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		url = "http://" + net.JoinHostPort(host, port) + "/healthz"
	case 1:
		url = args[0]
	default:
		return errors.New("usage: bucketd healthcheck [URL]")
	}
	client := &http.Client{Timeout: 2 * time.Second}
	res, err := client.Get(url)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %s", url, res.Status)
	}
	return nil
}

// newReplicator connects the replication target. The client never retries
// on its own: the replicator retries whole batches with backoff.
func newReplicator(cfg config.Config, group *shard.Group, logger *slog.Logger) (*replica.Replicator, error) {
	opts, err := redis.ParseURL(cfg.Replicate)
	if err != nil {
		return nil, fmt.Errorf("--replicate: %w", err)
	}
	opts.MaxRetries = -1
	opts.ContextTimeoutEnabled = true // the replicator's per-pipeline timeout bounds the socket waits too
	// The fence names the client's connections; after a write times out it
	// kills the others before anything newer is written. The replicator
	// writes one pipeline at a time, so one connection is all it needs.
	fence := &replica.Fence{}
	opts.OnConnect = fence.OnConnect
	opts.PoolSize = 1
	return replica.New(replica.Config{
		Fence:    fence,
		Client:   redis.NewClient(opts),
		Group:    group,
		Prefix:   cfg.ReplicatePrefix,
		Capacity: cfg.ReplicateQueue,
		Interval: cfg.ReplicateInterval,
		Logger:   logger,
	})
}

// loadSnapshot restores the buckets of the last snapshot. A corrupt or
// truncated snapshot stops the start, because starting empty would hand
// every client a fresh burst, unless the operator said to ignore it.
func loadSnapshot(k *snapshot.Keeper, ignoreCorrupt bool, logger *slog.Logger) error {
	if err := os.MkdirAll(k.Dir, 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	start := time.Now()
	n, err := k.Load()
	switch {
	case errors.Is(err, os.ErrNotExist):
		logger.Info("no snapshot yet; starting with no buckets", "path", k.Path())
	case errors.Is(err, snapshot.ErrCorrupt) && ignoreCorrupt:
		logger.Warn("snapshot is corrupt; starting with no buckets as --ignore-corrupt-snapshot says (the file is overwritten by the next snapshot)", "err", err)
	case err != nil:
		return fmt.Errorf("%w; refusing to start with a fresh burst for every client: fix or remove the file, or start with --ignore-corrupt-snapshot to start with no buckets", err)
	default:
		logger.Info("loaded snapshot", "path", k.Path(), "buckets", n, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// redisLogger sends go-redis's internal log lines through slog, so that
// --log-format json stays parseable.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

// newStoreClient connects store mode's Redis with the options the store
// requires: no automatic retries (a timed-out call must never be replayed)
// and context deadlines honoured.
func newStoreClient(cfg config.Config) (redis.UniversalClient, error) {
	if len(cfg.StoreCluster) > 0 {
		return redis.NewClusterClient(redisstore.ClusterClientOptions(cfg.StoreCluster)), nil
	}
	opts, err := redisstore.ClientOptions(cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("--store: %w", err)
	}
	return redis.NewClient(opts), nil
}
