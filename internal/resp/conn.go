package resp

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/bucketd/bucketd/internal/resp/wire"
)

// Conn is one client connection as the Server serves it: its socket, its
// Reader and Writer, and what the commands may ask about it. Its methods
// are for the connection's own goroutine (the Handler's Session), but for
// those that say otherwise.
type Conn struct {
	s       *Server
	id      int64
	sock    net.Conn // the socket: the TLS side once there is one
	raw     net.Conn // the accepted socket, for shutdown
	r       *wire.Reader
	w       wire.Writer
	remote  string
	local   string
	created time.Time
	fd      int    // the socket's descriptor number, for CLIENT LIST
	stream  Stream // set by Stream: written once the batch is answered

	draining atomic.Bool   // shutdown: stop reading, let the batch in hand finish
	idle     time.Duration // close after this long without input; 0 never

	// The output limits of the connection's class (output.go): the hard
	// one is its Writer's.
	class     OutputClass
	softBytes int // math.MaxInt without a soft limit
	softTime  time.Duration

	// shake is the TLS side of the socket until its handshake has run, at
	// the first read (runHandshake, in accept.go); nil without TLS.
	shake   *tls.Conn
	readErr error // the handshake's failure, returned by the next read
}

// ID is the connection's client id (CLIENT ID), unique within the process.
func (c *Conn) ID() int64 { return c.id }

// Writer is where the connection's replies are written; the Server flushes
// it after each batch of commands. It also knows the protocol (RESP2 or
// RESP3) the replies are written in.
func (c *Conn) Writer() *wire.Writer { return &c.w }

// RemoteAddr and LocalAddr are the connection's two ends, host:port.
func (c *Conn) RemoteAddr() string { return c.remote }
func (c *Conn) LocalAddr() string  { return c.local }

// Created is when the connection was accepted.
func (c *Conn) Created() time.Time { return c.created }

// Server is the server that serves the connection.
func (c *Conn) Server() *Server { return c.s }

// SetLimits changes the framing limits for the commands still to come.
func (c *Conn) SetLimits(l wire.Limits) { c.r.SetLimits(l) }

// Read is what the connection's Reader reads from: the socket, after the
// TLS handshake (at the first read), within the idle timeout, and no more
// once the server drains the connection.
func (c *Conn) Read(p []byte) (int, error) {
	if c.shake != nil && !c.runHandshake() {
		return 0, c.readErr
	}
	if c.draining.Load() {
		return 0, io.EOF
	}
	if c.idle > 0 {
		c.sock.SetReadDeadline(time.Now().Add(c.idle)) //nolint:errcheck // fails only on a closed conn
		if c.draining.Load() {
			// drain() may have set its past deadline before ours; restore it.
			c.sock.SetReadDeadline(time.Unix(1, 0)) //nolint:errcheck
		}
	}
	n, err := c.sock.Read(p)
	if err != nil && c.draining.Load() {
		err = io.EOF
	}
	return n, err
}

// drain makes the connection stop reading at the next opportunity: a read
// blocked on the socket returns at once, and the batch being answered (if
// any) is answered before the connection closes. Safe from any goroutine.
func (c *Conn) drain() {
	c.draining.Store(true)
	c.raw.SetReadDeadline(time.Unix(1, 0)) //nolint:errcheck // fails only on a closed conn, which is the goal
}

// serve is the connection's goroutine: read a batch of commands, let the
// session answer all of them, write the replies at once, and again, until
// the client leaves, a protocol error, QUIT, or shutdown. A protocol error
// is answered after the commands before it, and ends the connection, as
// in Redis.
func (s *Server) serve(c *Conn) {
	defer s.closed(c)
	c.SetOutputClass(NormalClient)
	sess := s.cfg.Handler.Open(c)
	protocolError := false
	defer func() { sess.Closed(protocolError) }()
	for {
		cmds, err := c.r.ReadCommands()
		if err != nil {
			var pe *wire.ProtocolError
			if errors.As(err, &pe) {
				protocolError = true
				c.w.ErrorReply(pe.Reply)
				c.w.Flush(c.sock) //nolint:errcheck // best effort: the connection closes either way
			}
			return
		}
		var start time.Time
		if s.cfg.ObservePipeline != nil {
			start = time.Now()
		}
		more := sess.Serve(cmds)
		if s.cfg.ObservePipeline != nil {
			s.cfg.ObservePipeline(time.Since(start).Seconds(), len(cmds))
		}
		if c.w.Over() { // the Session stopped at the command that passed the hard limit
			s.overOutputLimit(c, limitHard, c.w.Len())
			return
		}
		if err := c.flush(); err != nil || !more {
			return
		}
		if c.stream != nil {
			s.streamOut(c)
			return
		}
	}
}
