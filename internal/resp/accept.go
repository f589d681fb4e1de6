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
	"github.com/bucketd/bucketd/internal/resp/wire"
)

// Accepting connections. Server.Serve's loop calls listener.Accept for one
// connection after the other, on one goroutine: anything that waits there
// keeps every other client out. One
// silent socket on a TLS port did (issue 10): its refusal was written
// there, and writing over TLS runs the handshake, which waited for the
// client. So the loop only decides, from counters and the remote address:
//   - an admitted client's TLS handshake runs on the connection's own
//     goroutine, at its first read (Conn.runHandshake);
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

// listener is the listener Serve accepts from. Accept admits or refuses
// each connection without waiting for it (see Server.admit) and retries
// failed accepts itself, so that Serve sees only admitted connections and
// the listener closing. Used by the accept goroutine only.
type listener struct {
	net.Listener // the one given to Serve
	s            *Server

	backoff time.Duration // the pause after the last failed accept; 0 after a success
	failLog ratelog.Gate
	now     func() time.Time    // time.Now; a test's clock in tests
	pause   func(time.Duration) // Server.pause; a test's in tests
}

// Accept returns the next admitted connection, or net.ErrClosed once the
// server is shutting down.
func (l *listener) Accept() (*Conn, error) {
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
		if conn := l.s.admit(c); conn != nil {
			return conn, nil
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
// anything, whether c is served. It returns c as a registered Conn, or nil
// when c was refused; the refusal is written on a goroutine of its own
// (refuse).
func (s *Server) admit(c net.Conn) *Conn {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true) //nolint:errcheck // the default already; only fails on a closed conn
	}
	if reply := s.refusal(c.RemoteAddr()); reply != "" {
		s.n.rejected.Add(1)
		s.refuse(c, reply)
		return nil
	}
	conn := &Conn{s: s, sock: c, raw: c, idle: s.cfg.IdleTimeout, created: time.Now(), fd: socketFD(c)}
	if a := c.RemoteAddr(); a != nil {
		conn.remote = a.String()
	}
	if a := c.LocalAddr(); a != nil {
		conn.local = a.String()
	}
	if s.cfg.TLS != nil {
		conn.shake = tls.Server(c, s.cfg.TLS)
		conn.sock = conn.shake
	}
	conn.r = wire.NewReader(conn, s.cfg.Limits)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() {
		s.n.rejected.Add(1)
		c.Close() //nolint:errcheck // shutting down; nothing is owed to it
		return nil
	}
	conn.id = s.lastID.Add(1)
	s.conns[conn] = struct{}{}
	s.active.Add(1)
	s.n.connected.Add(1)
	s.n.totalConns.Add(1)
	return conn
}

// refusal returns the reply that turns a new client from remote away, or
// "" to admit it: --max-clients and protected mode. It only reads
// counters, so the accept goroutine can call it (see admit).
func (s *Server) refusal(remote net.Addr) string {
	if s.cfg.MaxClients > 0 && s.n.connected.Load() >= int64(s.cfg.MaxClients) {
		return errMaxClients
	}
	if s.cfg.ProtectedMode && !isLoopbackAddr(remote) {
		return errProtected
	}
	return ""
}

func isLoopbackAddr(a net.Addr) bool {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	return false
}

// Replies that refuse a connection when it is accepted, worded as Redis 7
// words them. They answer no command, so they are not error replies to be
// counted by kind: the refusal counts as a rejected connection.
const (
	errMaxClients = "ERR max number of clients reached"
	errProtected  = "DENIED bucketd is running in protected mode: no password is set (--requirepass) and this client is not on a loopback address. " +
		"Set a password with --requirepass, or, if every host that can reach this port is trusted, start bucketd with --protected-mode=false."
)

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
	w.Write(wire.AppendErrorLine(nil, reply)) //nolint:errcheck // best effort: it closes either way
	w.Close()                                 //nolint:errcheck // nothing left to do with it
}

// runHandshake runs the TLS handshake of an admitted connection, on the
// connection's goroutine at its first read, within the handshake timeout:
// a client that connects and says nothing holds its slot no longer than
// that. It reports false, with readErr set, when the handshake failed; a
// failure is counted unless a drain (shutdown) cut the handshake short.
func (c *Conn) runHandshake() bool {
	tc := c.shake
	c.shake = nil
	tc.SetDeadline(time.Now().Add(c.s.hs.timeout)) //nolint:errcheck // fails only on a closed conn
	err := io.EOF
	if !c.draining.Load() {
		err = tc.Handshake()
	}
	tc.SetDeadline(time.Time{}) //nolint:errcheck // as above
	if c.draining.Load() {
		// Ours may have replaced drain()'s deadline: restore it.
		tc.SetReadDeadline(time.Unix(1, 0)) //nolint:errcheck // as above
		if err != nil {
			c.readErr = io.EOF
			return false
		}
		return true
	}
	if err != nil {
		c.s.hs.failures.Add(1)
		c.readErr = err
		return false
	}
	return true
}
