package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketd/bucketd/internal/config"
	"github.com/bucketd/bucketd/internal/metrics"
	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/resp/command"
	"github.com/bucketd/bucketd/internal/resp/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// daemon is bucketd from listening to exit: the buckets, the protocol
// server, the metrics, and the goroutines that serve them.
type daemon struct {
	cfg    config.Config
	logger *slog.Logger
	mode   mode
	rl     *reloader
	srv    *resp.Server    // connections
	cmds   *command.Engine // commands
	reg    *prometheus.Registry
	tls    bool

	ln      net.Listener    // the client port, once listen succeeded
	metrics *metrics.Server // nil with --metrics-addr=
	ready   atomic.Bool     // what /readyz reports
	bg      background
}

// newDaemon builds the registry and the protocol front over b: the
// command layer, and the connection server that hands it its commands.
func newDaemon(cfg config.Config, tlsConf *tls.Config, md mode, rl *reloader, logger *slog.Logger) (*daemon, error) {
	d := &daemon{cfg: cfg, logger: logger, mode: md, rl: rl, reg: prometheus.NewRegistry(), tls: tlsConf != nil}
	src := metrics.Sources{
		Buckets:     md.limiter().Stats,
		Connections: func() resp.Stats { return d.srv.Stats() },
		Commands:    func() command.Stats { return d.cmds.Stats() },
	}
	md.addMetrics(&src)
	m, err := metrics.New(d.reg, src)
	if err != nil {
		return nil, err
	}
	if err := metrics.RegisterRuntime(d.reg); err != nil {
		return nil, err
	}
	clients, err := resp.FitMaxClients(cfg.MaxClients, md.redisConns())
	if err != nil {
		return nil, err
	}
	clients.Log(logger)
	cmdCfg := command.Config{
		Limiter:     md.limiter(),
		MaxKeyBytes: cfg.MaxKeyBytes,
		RequirePass: cfg.RequirePass,
		Info:        md.info(),
		Logger:      logger,
		Version:     version,
	}
	if cfg.File != "" {
		cmdCfg.Reload = rl.apply
	}
	if d.cmds, err = command.New(cmdCfg); err != nil {
		return nil, err
	}
	d.srv, err = resp.NewServer(resp.Config{
		Handler:         d.cmds,
		Limits:          wire.Limits{MaxQueryBytes: cfg.MaxQueryBytes, MaxArgs: cfg.MaxArgs},
		ProtectedMode:   cfg.ProtectedMode && cfg.RequirePass == "", // Redis's protected mode holds while no password is set
		MaxClients:      clients.MaxClients,
		IdleTimeout:     cfg.IdleTimeout,
		OutputLimits:    outputLimits(cfg.OutputBufferLimits),
		TLS:             tlsConf,
		Logger:          logger,
		ObservePipeline: m.ObservePipeline,
	})
	if err != nil {
		return nil, err
	}
	rl.cmds, rl.decisions = d.cmds, policyDecisions(d.cmds)
	d.cmds.SetPolicies(cfg.Policies)
	setSlowlog(d.cmds, cfg)
	rl.markUse()
	return d, nil
}

// setSlowlog applies slowlog-log-slower-than and slowlog-max-len, at
// start and on reload.
func setSlowlog(cmds *command.Engine, cfg config.Config) {
	cmds.SetSlowlog(time.Duration(cfg.SlowlogLogSlowerThan)*time.Microsecond, cfg.SlowlogMaxLen)
}

// outputLimits are the client-output-buffer-limit classes of l as the
// connection server takes them.
func outputLimits(l config.OutputBufferLimits) *resp.OutputLimits {
	of := func(c config.OutputBufferLimit) resp.OutputLimit {
		return resp.OutputLimit{HardBytes: c.HardBytes, SoftBytes: c.SoftBytes, SoftTime: time.Duration(c.SoftSeconds) * time.Second}
	}
	return &resp.OutputLimits{resp.NormalClient: of(l.Normal), resp.PubSubClient: of(l.PubSub)}
}

// listen opens the client port, then the metrics server: a port in use
// fails the start before anything is served.
func (d *daemon) listen() error {
	ln, err := net.Listen("tcp", d.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is another server using the port? choose one with --addr)", d.cfg.Addr, err)
	}
	d.warnIfExposed(ln.Addr())
	if d.cfg.MetricsAddr != "" {
		h := metrics.Handler(d.reg, d.ready.Load)
		if d.cfg.PProf {
			h = metrics.WithProfiling(h)
		}
		d.metrics, err = metrics.Start(d.cfg.MetricsAddr, h, d.logger)
		if err != nil {
			ln.Close()
			return fmt.Errorf("metrics on %s: %w (choose another with --metrics-addr, or disable with --metrics-addr=)", d.cfg.MetricsAddr, err)
		}
	}
	d.ln = ln
	return nil
}

// warnIfExposed says loudly when anyone beyond this host may reach the
// client port without a password, or with one that guards little: a
// placeholder from the examples, or one shorter than
// config.MinPasswordLength.
func (d *daemon) warnIfExposed(addr net.Addr) {
	if tcp, ok := addr.(*net.TCPAddr); !ok || tcp.IP.IsLoopback() {
		return
	}
	switch d.cfg.WeakPassword() {
	case "placeholder":
		d.logger.Warn("THE PASSWORD IS A PLACEHOLDER FROM BUCKETD'S EXAMPLES AND IT LISTENS BEYOND LOOPBACK: anyone who has read them can spend and reset your limits; set --requirepass to a generated one (openssl rand -hex 24)",
			"addr", addr.String())
		return
	case "short":
		d.logger.Warn("THE PASSWORD IS SHORT AND IT LISTENS BEYOND LOOPBACK: failed attempts are not slowed down, so a short password can be guessed; set --requirepass to min_length characters or more (openssl rand -hex 24)",
			"addr", addr.String(), "min_length", config.MinPasswordLength)
		return
	}
	if d.cfg.RequirePass != "" {
		return
	}
	if d.cfg.ProtectedMode {
		d.logger.Warn("LISTENING BEYOND LOOPBACK WITHOUT A PASSWORD: protected mode refuses every non-loopback client; set --requirepass to let them in",
			"addr", addr.String())
		return
	}
	d.logger.Warn("LISTENING BEYOND LOOPBACK WITHOUT A PASSWORD AND WITH PROTECTED MODE OFF: any host that can reach this address can spend and reset your limits",
		"addr", addr.String())
}

// serve runs bucketd until ctx ends, then shuts it down in order; hup
// carries the SIGHUPs (nil: none). A failure of the client listener ends
// it early with an error, and so does ctx ending before it serves (an
// error wrapping ctx's): a signal during the start-up load.
func (d *daemon) serve(ctx context.Context, hup <-chan os.Signal) error {
	// /readyz says "not ready" while the mode loads (replicate mode: its
	// state from Redis, so that a restart hands no client a fresh burst).
	if err := d.mode.load(ctx); err != nil {
		d.unlisten()
		return err
	}
	if err := ctx.Err(); err != nil { // a signal during the start: serve nothing
		d.unlisten()
		return fmt.Errorf("starting: %w", err)
	}
	serveErr := d.start(ctx, hup)
	select {
	case err := <-serveErr:
		d.abort()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	return d.shutdown(serveErr)
}

// start runs the background work and the server under d.bg, reports
// ready, and returns where Serve's result arrives.
func (d *daemon) start(ctx context.Context, hup <-chan os.Signal) <-chan error {
	d.bg.start(ctx)
	d.mode.start(&d.bg, d.cfg)
	serveErr := make(chan error, 1)
	d.bg.run(func(context.Context) { serveErr <- d.srv.Serve(d.ln) }) // ends with Shutdown
	d.ready.Store(true)
	attrs := []any{"addr", d.ln.Addr().String(), "mode", d.mode.name(), "shards", d.mode.shards(),
		"gomaxprocs", runtime.GOMAXPROCS(0), "version", version, "tls", d.tls,
		"password", d.cfg.RequirePass != "", "policies", len(d.cfg.Policies)}
	if d.cfg.File != "" {
		attrs = append(attrs, "config", d.cfg.File)
	}
	if d.metrics != nil {
		attrs = append(attrs, "metrics", d.metrics.Addr().String())
	}
	d.logger.Info("listening", attrs...)
	// After "listening": a SIGHUP deferred during start-up is applied now,
	// and its reload must not be logged as if it came before serving.
	d.bg.run(func(ctx context.Context) { d.rl.onSIGHUP(ctx, hup) })
	return serveErr
}

// shutdown stops bucketd in order: not ready; the server stops accepting
// and finishes what it read, within --shutdown-timeout; every background
// goroutine ends and is awaited, so nothing runs beside the last steps;
// the last changes go to Redis, the final snapshot is written, the shards
// stop; the metrics server stops last, so the last scrape sees the final
// counts. A failed final snapshot is its error (the exit status is then
// not 0); everything else is logged.
func (d *daemon) shutdown(serveErr <-chan error) error {
	d.ready.Store(false)
	d.logger.Info("shutting down", "timeout", d.cfg.ShutdownTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.ShutdownTimeout)
	defer cancel()
	if err := d.srv.Shutdown(ctx); err != nil {
		d.logger.Warn("connections did not finish in time; closed them", "err", err)
	}
	if err := <-serveErr; err != nil {
		d.logger.Warn("serve ended with an error", "err", err)
	}
	d.bg.stop()
	d.rl.flushLog() // no reload runs any more: the counts held back are written
	err := d.mode.finish(ctx)
	d.stopMetrics(ctx)
	d.logger.Info("stopped")
	return err
}

// unlisten closes what listen opened, for a start that ends before
// serving.
func (d *daemon) unlisten() {
	d.ln.Close() //nolint:errcheck // nothing was served on it
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.ShutdownTimeout)
	defer cancel()
	d.stopMetrics(ctx)
}

// abort stops what start started after the client listener failed: no
// final flush or snapshot, as the process ends with an error.
func (d *daemon) abort() {
	d.ready.Store(false)
	d.bg.stop()
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.ShutdownTimeout)
	defer cancel()
	d.stopMetrics(ctx)
}

func (d *daemon) stopMetrics(ctx context.Context) {
	if d.metrics == nil {
		return
	}
	if err := d.metrics.Shutdown(ctx); err != nil {
		d.logger.Warn("metrics server did not stop cleanly", "err", err)
	}
}

// background runs the goroutines of a daemon under one context: stop
// cancels it and returns once every one of them has returned. The context
// does not end with run's: replication and snapshots go on while the
// server drains its connections, and stop ends them after that.
type background struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (bg *background) start(parent context.Context) {
	bg.ctx, bg.cancel = context.WithCancel(context.WithoutCancel(parent))
}

// run starts fn(ctx) in a goroutine that stop waits for. A goroutine that
// does not watch ctx (Serve) must be ended otherwise before stop.
func (bg *background) run(fn func(ctx context.Context)) {
	bg.wg.Go(func() { fn(bg.ctx) })
}

func (bg *background) stop() {
	bg.cancel()
	bg.wg.Wait()
}
