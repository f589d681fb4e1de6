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

	"github.com/bucketd/bucketd/internal/ratelog"
	"github.com/bucketd/bucketd/internal/resp/wire"
)

// Handler answers the commands of the connections a Server serves; the
// command layer (internal/resp/command) is bucketd's.
type Handler interface {
	// Open is called once per admitted connection, on its goroutine,
	// before its first command. The Session it returns answers all of the
	// connection's commands.
	Open(c *Conn) Session
}

// Session is one connection's command state, owned by the connection's
// goroutine.
type Session interface {
	// Serve answers cmds, the commands of one read (see wire.Reader),
	// writing every reply to the Conn's Writer; the Server writes them to
	// the socket when Serve returns. It reports false when the connection
	// must close once its replies are written (QUIT).
	Serve(cmds []wire.Command) bool
	// Closed is called once when the connection has ended; protocolError
	// says it ended on a protocol error (which the Server answered).
	Closed(protocolError bool)
}

// Config sets up a Server. Zero values pick the defaults in parentheses.
type Config struct {
	Handler Handler // required
	// Limits bound what one client can make the server hold while it
	// reads a command (wire's defaults).
	Limits wire.Limits
	// ProtectedMode refuses clients from non-loopback addresses, as
	// Redis's protected mode does while no password is set: the caller
	// sets it only then.
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
	Logger           *slog.Logger // (slog.Default())
	// OutputLimits bound each class's replies built and not yet written
	// (output.go) (DefaultOutputLimits).
	OutputLimits *OutputLimits
	// ObservePipeline, when set, is called once per batch (the commands
	// of one read) with the seconds from reading it to having every reply
	// ready, and the number of commands. At pipeline depth 1 that is the
	// command latency. It must be cheap and safe for concurrent use.
	ObservePipeline func(seconds float64, commands int)
}

// Server accepts connections and serves each on a goroutine of its own:
// it reads the commands of each read (wire.Reader), hands them to the
// connection's Session, and writes the replies with one system call. It
// knows nothing of commands. Safe for concurrent use.
type Server struct {
	cfg     Config
	started time.Time

	mu       sync.Mutex // guards conns, refusing and ln; never on the request path
	conns    map[*Conn]struct{}
	refusing map[net.Conn]struct{} // refusals being written (accept.go)
	ln       net.Listener

	active   sync.WaitGroup // one per open connection and per refusal being written
	draining atomic.Bool
	stop     chan struct{} // closed when draining starts: ends the accept back-off
	hs       tlsHandshake

	lastID    atomic.Int64 // the last client id handed out
	n         counters
	outputLog ratelog.Line // connections closed over their output limit
}

// NewServer validates cfg and fills in defaults.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Handler == nil {
		return nil, errors.New("resp: Config.Handler is required")
	}
	cfg.Limits = cfg.Limits.WithDefaults()
	if cfg.OutputLimits == nil {
		def := DefaultOutputLimits
		cfg.OutputLimits = &def
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
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
		conns:    make(map[*Conn]struct{}),
		refusing: make(map[net.Conn]struct{}),
		stop:     make(chan struct{}),
	}
	s.hs = tlsHandshake{timeout: cfg.HandshakeTimeout, failures: &s.n.tlsHandshakeFailures}
	return s, nil
}

// Serve answers clients on ln until Shutdown. It returns nil after a
// Shutdown and the listener's error otherwise; a failed accept (out of
// file descriptors, say) is retried after a pause (see listener).
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.draining.Load() {
		s.mu.Unlock()
		return ln.Close()
	}
	s.ln = ln
	s.mu.Unlock()
	l := &listener{Listener: ln, s: s, now: time.Now, pause: s.pause}
	for {
		c, err := l.Accept()
		if err != nil {
			if s.draining.Load() {
				return nil
			}
			return err
		}
		go s.serve(c)
	}
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

// Started is when the Server was made (INFO's uptime).
func (s *Server) Started() time.Time { return s.started }

// LastClientID is the highest client id handed out so far.
func (s *Server) LastClientID() int64 { return s.lastID.Load() }

// Limits are the framing limits every connection starts with.
func (s *Server) Limits() wire.Limits { return s.cfg.Limits }

// OutputLimits are the output limits of each class of connections.
func (s *Server) OutputLimits() OutputLimits { return *s.cfg.OutputLimits }

// Shutdown stops accepting, lets every connection finish the batch of
// commands it is answering (their replies are written), closes the
// connections and waits for their goroutines. If ctx ends first, the
// remaining sockets are closed at once and ctx's error is returned then,
// without waiting for goroutines still inside a command: a command that
// does not look at its socket (CPU-bound, its client gone) must not hold
// the shutdown past its timeout; it ends on its own, its replies unsent.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.draining.Swap(true) {
		close(s.stop)
	}
	ln := s.ln
	for c := range s.conns {
		c.drain()
	}
	for c := range s.refusing {
		c.Close() //nolint:errcheck // a refusal is owed nothing at shutdown
	}
	s.mu.Unlock()
	if ln != nil {
		ln.Close() //nolint:errcheck // an error means it was closed already
	}
	done := make(chan struct{})
	go func() {
		s.active.Wait()
		close(done)
	}()
	defer s.outputLog.Flush() // the count of the last lines held back
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.raw.Close() //nolint:errcheck // forcing shutdown; errors change nothing
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}

// closed forgets a connection whose goroutine is ending and closes its
// socket.
func (s *Server) closed(c *Conn) {
	c.sock.Close() //nolint:errcheck // may already be closed; that is the goal
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.n.connected.Add(-1)
	s.active.Done()
}
