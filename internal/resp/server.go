package resp

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/info"
	"github.com/tidwall/redcon"
)

// Config sets up a Server. Zero values pick the defaults in parentheses.
type Config struct {
	Limiter     decide.Limiter
	MaxKeyBytes int // longest key accepted (1024)
	Limits      Limits
	// RequirePass, when set, makes clients AUTH before any other command
	// (Redis requirepass); compared in constant time.
	RequirePass string
	// ProtectedMode refuses clients from non-loopback addresses while no
	// password is set, as Redis's protected mode does.
	ProtectedMode bool
	// MaxClients bounds open connections; new ones beyond it get
	// "-ERR max number of clients reached". 0 means no limit.
	MaxClients int
	// IdleTimeout closes a connection that sends nothing for this long.
	// 0 means never.
	IdleTimeout time.Duration
	// TLS, when set, serves TLS on the client port.
	TLS *tls.Config
	// HandshakeTimeout bounds a TLS handshake, and the writing of a
	// refusal, for each connection (DefaultHandshakeTimeout, or
	// IdleTimeout if that is shorter).
	HandshakeTimeout time.Duration
	// Info adds sections to INFO: each function returns the section of the
	// part of bucketd whose state it shows (replication, the Redis store).
	Info []func() info.Section
	// Reload, when set, is what CONFIG RELOAD calls; its error is reported
	// to the client and the running configuration stays.
	Reload  func() error
	Logger  *slog.Logger // (slog.Default())
	Version string       // reported by INFO and HELLO ("dev")
	// ObservePipeline, when set, is called once per pipeline (the commands
	// of one read) with the seconds from reading it to having every reply
	// ready, and the number of commands. At pipeline depth 1 that is the
	// command latency. It must be cheap and safe for concurrent use.
	ObservePipeline func(seconds float64, commands int)
}

// Defaults of Config and Limits.
const (
	DefaultMaxKeyBytes    = 1024
	DefaultMaxQueryBytes  = 64 << 20
	DefaultMaxArgs        = 1024 * 1024
	DefaultMaxInlineBytes = 64 << 10
)

// Server is bucketd's Redis-protocol front. Connections are served by redcon,
// one goroutine each; bucket operations go to the Limiter. Safe for
// concurrent use.
type Server struct {
	cfg     Config
	started time.Time

	mu       sync.Mutex // guards conns, refusing and ln; never on the request path
	conns    map[*guardConn]struct{}
	refusing map[net.Conn]struct{} // refusals being written (accept.go)
	ln       net.Listener

	active   sync.WaitGroup // one per open connection and per refusal being written
	draining atomic.Bool
	stop     chan struct{} // closed when draining starts: ends the accept back-off
	hs       tlsHandshake

	nextClientID atomic.Int64
	n            counters
	password     passwordCheck
	policyMu     sync.Mutex // serialises SetPolicies; never on the request path
	policies     atomic.Pointer[policySet]
	txTooLong    *errorReply // the reply to a command beyond a transaction's bound
}

// NewServer validates cfg and fills in defaults.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Limiter == nil {
		return nil, errors.New("resp: Config.Limiter is required")
	}
	if cfg.MaxKeyBytes <= 0 {
		cfg.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if cfg.Limits.MaxQueryBytes <= 0 {
		cfg.Limits.MaxQueryBytes = DefaultMaxQueryBytes
	}
	if cfg.Limits.MaxArgs <= 0 {
		cfg.Limits.MaxArgs = DefaultMaxArgs
	}
	if cfg.Limits.MaxInlineBytes <= 0 {
		cfg.Limits.MaxInlineBytes = DefaultMaxInlineBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
		if cfg.IdleTimeout > 0 {
			cfg.HandshakeTimeout = min(cfg.HandshakeTimeout, cfg.IdleTimeout)
		}
	}
	s := &Server{
		cfg:      cfg,
		started:  time.Now(),
		conns:    make(map[*guardConn]struct{}),
		refusing: make(map[net.Conn]struct{}),
		stop:     make(chan struct{}),
		password: newPasswordCheck(cfg.RequirePass),
	}
	s.hs = tlsHandshake{timeout: cfg.HandshakeTimeout, failures: &s.n.tlsHandshakeFailures}
	s.txTooLong = txTooLong(maxQueued, cfg.Limits.MaxQueryBytes)
	s.SetPolicies(nil)
	return s, nil
}

// Serve answers clients on ln until Shutdown. It returns nil after a
// Shutdown and the listener's error otherwise; a failed accept (out of
// file descriptors, say) is retried after a pause (see listener).
func (s *Server) Serve(ln net.Listener) error {
	srv := redcon.NewServerNetwork(ln.Addr().Network(), ln.Addr().String(), s.handle, s.accept, s.closed)
	s.mu.Lock()
	if s.draining.Load() {
		s.mu.Unlock()
		return ln.Close()
	}
	s.ln = ln
	s.mu.Unlock()
	err := srv.Serve(&listener{Listener: ln, s: s, now: time.Now, pause: s.pause})
	if s.draining.Load() {
		return nil
	}
	return err
}

// Addr returns the address Serve listens on, or nil before Serve.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Shutdown stops accepting, lets every connection finish the commands it is
// executing (their replies are written), closes the connections and waits
// for their goroutines. If ctx ends first, the remaining sockets are closed
// at once and ctx's error is returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.draining.Swap(true) {
		close(s.stop)
	}
	ln := s.ln
	for g := range s.conns {
		g.drain()
	}
	for c := range s.refusing {
		c.Close() //nolint:errcheck // a refusal is owed nothing at shutdown
	}
	s.mu.Unlock()
	if ln != nil {
		// redcon's accept loop ends on the closed listener and then closes
		// every connection, which the guards turn into drains.
		ln.Close() //nolint:errcheck // an error means it was closed already
	}
	done := make(chan struct{})
	go func() {
		s.active.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for g := range s.conns {
			g.closeSocket() //nolint:errcheck // forcing shutdown; errors change nothing
		}
		s.mu.Unlock()
		<-done
		return ctx.Err()
	}
}

// session is one connection's state, owned by its goroutine.
type session struct {
	id     int64
	guard  *guardConn
	caller decide.Caller
	plan   []planned
	errs   []*errorReply // the replies of this pipeline's planError commands
	name   []byte
	quit   bool
	authed bool
	tally  tally
	pt     policyTally      // decisions under policies (policies.go)
	keys   []byte           // keys derived for this pipeline's policy commands
	reqs   []decide.Request // a group's requests while it is planned (macquire.go)
	group  []decide.Request // TB.MACQUIRE's deciding group, when it has shadow triples
	mb     []mbucket        // TB.MACQUIRE's buckets of this pipeline (macquire.go)
	tx     transaction      // MULTI ... EXEC (transaction.go)
	wire                    // RESP version and client-side caching (reply.go)
}

// accept is redcon's accept hook, called on the accept goroutine for each
// connection listener.Accept admitted: it only gives the connection its
// session. It never refuses, since redcon would then flush the connection
// on the accept goroutine, and with TLS a flush runs the handshake.
func (s *Server) accept(c redcon.Conn) bool {
	g, ok := c.NetConn().(*guardConn)
	if !ok {
		return false // cannot happen: every conn comes from listener.Accept
	}
	sess := &session{
		id:     s.nextClientID.Add(1),
		guard:  g,
		caller: s.cfg.Limiter.NewCaller(),
		authed: !s.password.set,
	}
	c.SetContext(sess)
	return true
}

func (s *Server) closed(c redcon.Conn, err error) {
	sess, ok := c.Context().(*session)
	if !ok {
		return // refused in accept
	}
	sess.guard.closeSocket() //nolint:errcheck // may already be closed; that is the goal
	if sess.guard.protoErr != "" {
		s.n.errors[ErrProtocol].Add(1)
	}
	s.mu.Lock()
	delete(s.conns, sess.guard)
	s.mu.Unlock()
	s.n.connected.Add(-1)
	s.active.Done()
}
