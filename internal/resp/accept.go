package resp

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bucketd/bucketd/internal/ratelog"
)

// Accepting connections. redcon's accept loop calls listener.Accept and
// then Server.accept for one connection after the other, on one
// goroutine: anything that waits there keeps every other client out. One
// silent socket on a TLS port did (issue 10): its refusal was written
// there, and writing over TLS runs the handshake, which waited for the
// client. So the loop only decides, from counters and the remote address:
//   - an admitted client's TLS handshake runs on the connection's own
//     goroutine, at its first read (guardConn.runHandshake);
//   - a refusal (--max-clients, protected mode) is written, over TLS when
//     configured, by a goroutine of its own (writeRefusal).
//
// Both are bounded by the handshake timeout.

const (
	// DefaultHandshakeTimeout bounds a TLS handshake and the writing of a
	// refusal: a client that connects and says nothing holds a descriptor
	// (and, if admitted, a --max-clients slot) no longer than this.
	DefaultHandshakeTimeout = 10 * time.Second

	// maxRefusing bounds the TLS refusals being written at once. Each
	// holds a descriptor until its handshake is done or timed out; beyond
	// this a refused connection is closed without its reply, so that a
	// flood of silent sockets cannot take the descriptors ReservedFDs
	// keeps. A refusal without TLS is not bounded: it is written into the
	// empty send buffer of a new socket, which never waits, and closed.
	maxRefusing = 16

	// A failed accept (out of file descriptors, say) is retried after a
	// pause that doubles from acceptBackoffMin to acceptBackoffMax and
	// starts over after an accept succeeds.
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// tlsHandshake is what a connection needs to run its TLS handshake: the
// bound and the Server's failure counter. One per Server.
type tlsHandshake struct {
	timeout  time.Duration
	failures *atomic.Int64
}

// listener is the listener redcon serves. Accept admits or refuses each
// connection without waiting for it (see Server.admit) and retries failed
// accepts itself, so that redcon sees only admitted connections and the
// listener closing. Used by the accept goroutine only.
type listener struct {
	net.Listener // the one given to Serve
	s            *Server

	backoff time.Duration // the pause after the last failed accept; 0 after a success
	failLog ratelog.Gate
	now     func() time.Time    // time.Now; a test's clock in tests
	pause   func(time.Duration) // Server.pause; a test's in tests
}

// Accept returns the next admitted connection, wrapped in its guardConn,
// or net.ErrClosed once the server is shutting down.
func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || l.s.draining.Load() {
				return nil, net.ErrClosed
			}
			l.failed(err)
			continue
		}
		l.backoff = 0
		if g := l.s.admit(c); g != nil {
			return g, nil
		}
	}
}

// failed logs a failed accept, at most once a second with the number of
// lines held back, and pauses before the next: out of file descriptors,
// the pending connection stays in the backlog and an accept at once would
// fail again at once, thousands of times a second.
func (l *listener) failed(err error) {
	l.backoff = min(max(2*l.backoff, acceptBackoffMin), acceptBackoffMax)
	if suppressed, ok := l.failLog.Allow(l.now()); ok {
		attrs := []any{"err", err, "retry_in", l.backoff, "suppressed", suppressed}
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			attrs = append(attrs, "fix", "out of file descriptors: raise the open-file limit (ulimit -n, LimitNOFILE=) or lower --max-clients")
		}
		l.s.cfg.Logger.Warn("accept failed", attrs...)
	}
	l.pause(l.backoff)
}

// pause waits d, or less if the server shuts down meanwhile.
func (s *Server) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.stop:
	}
}

// admit decides, on the accept goroutine and without waiting for
// anything, whether c is served. It returns c wrapped in its guardConn
// and registered as a client, or nil when c was refused; the refusal is
// written on a goroutine of its own (refuse).
func (s *Server) admit(c net.Conn) *guardConn {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true) //nolint:errcheck // the default already; only fails on a closed conn
	}
	if reply := s.refusal(c.RemoteAddr()); reply != "" {
		s.n.rejected.Add(1)
		s.refuse(c, reply)
		return nil
	}
	g := newGuardConn(c, &s.cfg.Limits)
	g.idle = s.cfg.IdleTimeout
	if s.cfg.TLS != nil {
		g.shake = tls.Server(c, s.cfg.TLS)
		g.Conn = g.shake
		g.hs = &s.hs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() {
		s.n.rejected.Add(1)
		c.Close() //nolint:errcheck // shutting down; nothing is owed to it
		return nil
	}
	s.conns[g] = struct{}{}
	s.active.Add(1)
	s.n.connected.Add(1)
	s.n.totalConns.Add(1)
	return g
}

// refuse hands c to a goroutine that writes reply and closes it. During
// shutdown, or with TLS beyond maxRefusing refusals at once, c is closed
// at once without its reply.
func (s *Server) refuse(c net.Conn, reply string) {
	s.mu.Lock()
	if s.draining.Load() || (s.cfg.TLS != nil && len(s.refusing) >= maxRefusing) {
		s.mu.Unlock()
		c.Close() //nolint:errcheck // refused either way
		return
	}
	s.refusing[c] = struct{}{}
	s.active.Add(1)
	s.mu.Unlock()
	go s.writeRefusal(c, reply)
}

// writeRefusal writes reply to c, over TLS when the server uses it, and
// closes c, all within the handshake timeout. Shutdown closes c sooner.
func (s *Server) writeRefusal(c net.Conn, reply string) {
	defer func() {
		s.mu.Lock()
		delete(s.refusing, c)
		s.mu.Unlock()
		s.active.Done()
	}()
	c.SetDeadline(time.Now().Add(s.hs.timeout)) //nolint:errcheck // fails only on a closed conn
	w := c
	if s.cfg.TLS != nil {
		tc := tls.Server(c, s.cfg.TLS)
		if err := tc.Handshake(); err != nil {
			if !s.draining.Load() {
				s.hs.failures.Add(1)
			}
			c.Close() //nolint:errcheck // refused either way
			return
		}
		w = tc
	}
	w.Write(appendErrorLine(nil, reply)) //nolint:errcheck // best effort: it closes either way
	w.Close()                            //nolint:errcheck // nothing left to do with it
}

// runHandshake runs the TLS handshake of an admitted connection, on the
// connection's goroutine at its first read, within the handshake timeout:
// a client that connects and says nothing holds its slot no longer than
// that. It reports false, with readErr set, when the handshake failed; a
// failure is counted unless a drain (shutdown) cut the handshake short.
func (g *guardConn) runHandshake() bool {
	tc := g.shake
	g.shake = nil
	tc.SetDeadline(time.Now().Add(g.hs.timeout)) //nolint:errcheck // fails only on a closed conn
	err := io.EOF
	if !g.draining.Load() {
		err = tc.Handshake()
	}
	tc.SetDeadline(time.Time{}) //nolint:errcheck // as above
	if g.draining.Load() {
		// Ours may have replaced drain()'s deadline: restore it.
		tc.SetReadDeadline(time.Unix(1, 0)) //nolint:errcheck // as above
		if err != nil {
			g.readErr = io.EOF
			return false
		}
		return true
	}
	if err != nil {
		g.hs.failures.Add(1)
		g.readErr = err
		return false
	}
	return true
}
