package command

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/info"
	"github.com/bucketd/bucketd/internal/resp"
)

// Config sets up an Engine. Zero values pick the defaults in parentheses.
type Config struct {
	Limiter     decide.Limiter // required: where the buckets live
	MaxKeyBytes int            // longest key accepted (1024)
	// RequirePass, when set, makes clients AUTH before any other command
	// (Redis requirepass); compared in constant time.
	RequirePass string
	// Info adds sections to INFO: each function returns the section of the
	// part of bucketd whose state it shows (replication, the Redis store).
	Info []func() info.Section
	// Reload, when set, is what CONFIG RELOAD calls; its error is reported
	// to the client and the running configuration stays. On success it
	// returns the changed settings that take effect only after a restart,
	// which the reply names.
	Reload  func() (restart []string, err error)
	Logger  *slog.Logger // (slog.Default())
	Version string       // reported by INFO and HELLO ("dev")
}

// DefaultMaxKeyBytes is the longest key accepted when Config leaves it 0.
const DefaultMaxKeyBytes = 1024

// Engine is bucketd's command layer: the resp.Handler that answers every
// command of every connection. Shared state (the store, the policies in
// force, the counters) lives here; each connection's lives in its session.
// Safe for concurrent use.
type Engine struct {
	cfg      Config
	password passwordCheck
	n        counters
	policyMu sync.Mutex // serialises SetPolicies; never on the request path
	policies atomic.Pointer[policySet]

	rows     []rowStats // by statRow (cmdstats.go)
	clients  clientSet  // the open sessions (clients.go)
	monitors monitorSet // MONITOR's connections (monitor.go)
	slowlog  slowlog    // SLOWLOG (slowlog.go)

	txTooLongOnce sync.Once
	txTooLong     *errorReply // the reply to a command beyond a transaction's bound
}

// New validates cfg and fills in defaults.
func New(cfg Config) (*Engine, error) {
	if cfg.Limiter == nil {
		return nil, errors.New("command: Config.Limiter is required")
	}
	if cfg.MaxKeyBytes <= 0 {
		cfg.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	e := &Engine{cfg: cfg, password: newPasswordCheck(cfg.RequirePass), rows: make([]rowStats, len(statRows))}
	e.SetPolicies(nil)
	e.SetSlowlog(DefaultSlowlogSlowerThan, DefaultSlowlogMaxLen)
	return e, nil
}

// Open starts the session of a new connection (resp.Handler).
func (e *Engine) Open(c *resp.Conn) resp.Session { return e.open(c) }

func (e *Engine) open(c connection) *session {
	e.txTooLongOnce.Do(func() { e.txTooLong = txTooLong(maxQueued, c.Server().Limits().MaxQueryBytes) })
	s := &session{e: e, c: c, w: c.Writer(), authed: !e.password.set}
	if !s.authed { // until AUTH, Redis's bounds on what it may send (wire.Limits.Unauthenticated)
		l := c.Server().Limits()
		l.Unauthenticated = true
		c.SetLimits(l)
	}
	s.pipe = pipeline{e: e, w: s.w, caller: e.cfg.Limiter.NewCaller(), tally: &s.tally, tracking: &s.tracking}
	s.pub.redir.Store(-1)
	s.pub.active.Store(mono())
	e.clients.add(s)
	return s
}
