package resp

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// Limits protect the server from what one client can make it hold.
type Limits struct {
	// MaxQueryBytes bounds the bytes of one not yet complete command a
	// connection may buffer (Redis's client-query-buffer-limit). A longer
	// command, or a bulk string announced longer than this, is a protocol
	// error and the connection is closed.
	MaxQueryBytes int
	// MaxArgs bounds the arguments of one command (Redis allows 1024*1024).
	MaxArgs int
	// MaxInlineBytes bounds one inline (telnet-style) command line; Redis
	// uses 64 KiB.
	MaxInlineBytes int
}

// errGuardClosed ends a connection the guard has already answered with a
// protocol error, or that is being drained at shutdown.
var errGuardClosed = errors.New("resp: connection closed by the server")

// scanState is where the guard's framing scanner stands within a command.
type scanState uint8

const (
	scanStart    scanState = iota // at the first byte of a command
	scanInline                    // inside an inline command line
	scanCount                     // inside "*<count>\r\n"
	scanBulkHead                  // expecting '$'
	scanBulkLen                   // inside "$<len>\r\n"
	scanBulkData                  // inside a bulk payload and its CRLF
)

// maxHeaderLine bounds a "*<count>" or "$<len>" line; a longer one is garbage.
const maxHeaderLine = 32

// guardConn sits between the socket and redcon's reader. It frames the RESP
// stream itself and hands redcon only complete commands, so that:
//   - one command can never make the connection buffer more than
//     MaxQueryBytes (redcon's reader would grow without limit);
//   - `*2147483647\r\n` and other absurd counts or lengths are refused before
//     redcon loops over them;
//   - redcon never re-parses a half-received command on every read, which a
//     client trickling a huge command a byte at a time could exploit;
//   - protocol errors are answered "-ERR Protocol error: ..." and the
//     connection closed, as Redis does, after the complete commands that came
//     before the garbage have been answered.
//
// It also makes shutdown graceful: Close during a drain only stops reading,
// so the command being executed is still answered.
//
// Read is called only by the connection's own goroutine; Close may come from
// the server's goroutine, hence the atomics.
type guardConn struct {
	net.Conn
	lim *Limits

	buf   []byte
	rpos  int // next byte to hand to redcon
	ready int // end of the complete commands in buf
	scan  int // next byte the scanner has not looked at
	end   int // end of the bytes read from the socket

	state     scanState
	lineStart int   // start of the header line being scanned
	args      int   // bulk arguments still expected in this command
	bulkLeft  int64 // payload bytes plus CRLF still expected

	// inline holds the RESP form of the last inline command, handed out
	// before anything that follows it; redcon only ever sees RESP, so inline
	// commands are split exactly as Redis splits them (see splitInline).
	inline    []byte
	inlinePos int

	protoErr string // reply to send once the ready bytes are delivered
	readErr  error  // socket error to return once the ready bytes are delivered

	draining atomic.Bool   // shutdown: stop reading, let in-flight work finish
	idle     time.Duration // close after this long without input; 0 never

	// shake is the TLS side of the socket until its handshake has run, at
	// the first read (runHandshake, in accept.go); nil without TLS.
	shake *tls.Conn
	hs    *tlsHandshake
}

const guardInitialBuf = 4096

func newGuardConn(c net.Conn, lim *Limits) *guardConn {
	return &guardConn{Conn: c, lim: lim, buf: make([]byte, guardInitialBuf)}
}

// Read hands out complete commands only, reading from the socket as needed.
func (g *guardConn) Read(p []byte) (int, error) {
	for {
		if g.inlinePos < len(g.inline) {
			n := copy(p, g.inline[g.inlinePos:])
			g.inlinePos += n
			if g.inlinePos == len(g.inline) && cap(g.inline) > 64*1024 {
				g.inline, g.inlinePos = nil, 0 // do not keep a big buffer
			}
			return n, nil
		}
		if g.rpos < g.ready {
			n := copy(p, g.buf[g.rpos:g.ready])
			g.rpos += n
			g.compactIfDrained()
			return n, nil
		}
		if g.scan < g.end && g.protoErr == "" {
			g.scanFrames() // resume after an inline command (see scanFrames)
			if g.rpos < g.ready || g.inlinePos < len(g.inline) {
				continue
			}
		}
		if g.protoErr != "" {
			// The reply is best effort: the connection closes either way.
			g.Conn.Write(appendErrorLine(nil, g.protoErr)) //nolint:errcheck
			return 0, errGuardClosed
		}
		if g.readErr != nil || g.draining.Load() {
			if g.readErr == nil || g.draining.Load() {
				return 0, io.EOF
			}
			return 0, g.readErr
		}
		g.fill()
	}
}

// compactIfDrained rewinds the buffer once everything read has been handed
// out, and gives a large buffer back after a big command.
func (g *guardConn) compactIfDrained() {
	if g.rpos != g.end {
		return
	}
	g.rpos, g.ready, g.scan, g.lineStart = 0, 0, 0, 0
	g.end = 0
	if len(g.buf) > 64*1024 {
		g.buf = make([]byte, guardInitialBuf)
	}
}

// fill reads once from the socket and scans what arrived; with TLS, the
// first fill runs the handshake first.
func (g *guardConn) fill() {
	if g.shake != nil && !g.runHandshake() {
		return
	}
	if g.end == len(g.buf) {
		g.makeRoom()
	}
	if g.idle > 0 {
		g.Conn.SetReadDeadline(time.Now().Add(g.idle)) //nolint:errcheck // fails only on a closed conn
		if g.draining.Load() {
			// drain() may have set its past deadline before ours; restore it.
			g.Conn.SetReadDeadline(time.Unix(1, 0)) //nolint:errcheck
		}
	}
	n, err := g.Conn.Read(g.buf[g.end:])
	if err != nil {
		if g.draining.Load() {
			err = io.EOF
		}
		g.readErr = err
	}
	g.end += n
	g.scanFrames()
	if g.protoErr == "" && g.end-g.ready > g.lim.MaxQueryBytes {
		g.failQueryBuffer()
	}
}

// makeRoom moves unread bytes to the front, or grows the buffer, so that a
// read has somewhere to go. Growth stops near MaxQueryBytes: the limit check
// fires before the buffer could be filled again.
func (g *guardConn) makeRoom() {
	if g.rpos > 0 {
		n := copy(g.buf, g.buf[g.rpos:g.end])
		shift := g.rpos
		g.rpos, g.ready, g.scan, g.lineStart, g.end = 0, g.ready-shift, g.scan-shift, g.lineStart-shift, n
		if g.end < len(g.buf) {
			return
		}
	}
	size := min(2*len(g.buf), g.lim.MaxQueryBytes+guardInitialBuf)
	if size <= len(g.buf) {
		size = len(g.buf) + guardInitialBuf
	}
	nb := make([]byte, size)
	copy(nb, g.buf[:g.end])
	g.buf = nb
}

func (g *guardConn) fail(msg string) {
	if g.protoErr == "" {
		g.protoErr = "ERR Protocol error: " + msg
	}
}

// scanFrames advances the framing state machine over buf[scan:end], moving
// ready past every command it completes.
func (g *guardConn) scanFrames() {
	for g.scan < g.end && g.protoErr == "" {
		if !g.step() {
			return
		}
	}
}

// step advances the scanner from its current state over at least one byte,
// or reports false when it must stop: the bytes have run out, a protocol
// error was found, or a translated inline command must be handed out first.
func (g *guardConn) step() bool {
	switch g.state {
	case scanStart:
		return g.stepStart()
	case scanInline:
		return g.stepInline()
	case scanCount:
		return g.stepCount()
	case scanBulkHead:
		return g.stepBulkHead()
	case scanBulkLen:
		return g.stepBulkLen()
	default:
		return g.stepBulkData()
	}
}

// stepStart tells a RESP command ('*') from an inline one.
func (g *guardConn) stepStart() bool {
	g.lineStart = g.scan
	if g.buf[g.scan] == '*' {
		g.state = scanCount
		g.scan++
		return true
	}
	if g.rpos < g.ready || g.inlinePos < len(g.inline) {
		return false // an inline command is translated alone: see translateInline
	}
	g.state = scanInline
	return true
}

// stepInline looks for the end of an inline command line and translates
// the line once it is complete.
func (g *guardConn) stepInline() bool {
	i := bytes.IndexByte(g.buf[g.scan:g.end], '\n')
	if i < 0 {
		g.scan = g.end
		if g.end-g.lineStart > g.lim.MaxInlineBytes {
			g.fail("too big inline request")
		}
		return false
	}
	g.scan += i + 1
	g.translateInline()
	return g.inlinePos >= len(g.inline) // hand it out before scanning further
}

// stepCount reads "*<count>\r\n", the number of arguments of a command.
func (g *guardConn) stepCount() bool {
	line, ok := g.headerLine()
	if !ok {
		return false
	}
	n, valid := parseHeaderInt(line)
	if !valid || n > int64(g.lim.MaxArgs) {
		g.fail("invalid multibulk length")
		return false
	}
	if n <= 0 { // "*0" and "*-1" are empty commands: Redis ignores them
		g.dropEmptyCommand()
		return true
	}
	g.args, g.state = int(n), scanBulkHead
	return true
}

// stepBulkHead expects the '$' that starts an argument.
func (g *guardConn) stepBulkHead() bool {
	if c := g.buf[g.scan]; c != '$' {
		g.fail("expected '$', got '" + printable(c) + "'")
		return false
	}
	g.lineStart = g.scan
	g.scan++
	g.state = scanBulkLen
	return true
}

// stepBulkLen reads "$<len>\r\n", the length of an argument.
func (g *guardConn) stepBulkLen() bool {
	line, ok := g.headerLine()
	if !ok {
		return false
	}
	n, valid := parseHeaderInt(line)
	if !valid || n < 0 || n > int64(g.lim.MaxQueryBytes) {
		g.fail("invalid bulk length")
		return false
	}
	g.bulkLeft, g.state = n+2, scanBulkData
	return true
}

// stepBulkData skips over an argument's payload and checks the CRLF after
// it; the last argument completes the command.
func (g *guardConn) stepBulkData() bool {
	take := min(g.bulkLeft, int64(g.end-g.scan))
	g.scan += int(take)
	g.bulkLeft -= take
	if g.bulkLeft > 0 {
		return false
	}
	if g.buf[g.scan-2] != '\r' || g.buf[g.scan-1] != '\n' {
		g.fail("invalid bulk format: payload not followed by CRLF")
		return false
	}
	g.args--
	if g.args == 0 {
		g.complete()
	} else {
		g.state = scanBulkHead
	}
	return true
}

// headerLine returns the digits of a "*<n>\r\n" or "$<n>\r\n" line (without
// the type byte and CRLF) once the whole line has arrived.
func (g *guardConn) headerLine() ([]byte, bool) {
	i := bytes.IndexByte(g.buf[g.scan:g.end], '\n')
	if i < 0 {
		g.scan = g.end
		if g.end-g.lineStart > maxHeaderLine {
			if g.state == scanCount {
				g.fail("too big mbulk count string")
			} else {
				g.fail("too big bulk count string")
			}
		}
		return nil, false
	}
	nl := g.scan + i
	g.scan = nl + 1
	if nl-g.lineStart < 2 || g.buf[nl-1] != '\r' {
		return nil, true // parseHeaderInt(nil) reports it invalid
	}
	return g.buf[g.lineStart+1 : nl-1], true
}

// translateInline replaces the inline command [lineStart, scan) by its RESP
// form in g.inline. It runs only when everything before the line has been
// handed out, so order is kept. Inline commands are typed by people; the
// allocation does not matter.
func (g *guardConn) translateInline() {
	line := g.buf[g.lineStart:g.scan]
	line = line[:len(line)-1] // the '\n'
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	words, ok := splitInline(line)
	switch {
	case g.scan-g.ready > g.lim.MaxQueryBytes:
		g.failQueryBuffer()
		return
	case !ok:
		g.fail("unbalanced quotes in request")
		return
	case len(words) > g.lim.MaxArgs:
		g.fail("invalid multibulk length")
		return
	}
	g.inline, g.inlinePos = g.inline[:0], 0
	if len(words) > 0 { // a blank line is no command, as in Redis
		g.inline = appendMultiBulk(g.inline, words)
	}
	g.rpos = g.scan // the line itself is consumed
	g.complete()
}

// complete marks the command ending at scan as ready for redcon, unless it
// is larger than MaxQueryBytes as a whole: the limit bounds every command,
// including one whose last bytes arrive in the read that completes it.
func (g *guardConn) complete() {
	if g.scan-g.ready > g.lim.MaxQueryBytes {
		g.failQueryBuffer()
		return
	}
	g.ready = g.scan
	g.state = scanStart
}

func (g *guardConn) failQueryBuffer() {
	g.fail("query buffer exceeded " + strconv.Itoa(g.lim.MaxQueryBytes) + " bytes (see --max-query-bytes)")
}

// dropEmptyCommand removes the frame [ready, scan) from the buffer.
func (g *guardConn) dropEmptyCommand() {
	n := copy(g.buf[g.ready:], g.buf[g.scan:g.end])
	g.end = g.ready + n
	g.scan = g.ready
	g.state = scanStart
}

// parseHeaderInt parses the decimal integer of a RESP header line. Only an
// optional '-' and at most 18 digits are accepted, so it cannot overflow.
func parseHeaderInt(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

func printable(c byte) string {
	if c >= ' ' && c <= '~' {
		return string(rune(c))
	}
	return "\\x" + strconv.FormatUint(uint64(c), 16)
}

// drain makes the connection stop reading at the next opportunity: a Read
// blocked on the socket returns at once, and the command being executed (if
// any) is answered before the connection closes.
func (g *guardConn) drain() {
	g.draining.Store(true)
	g.Conn.SetReadDeadline(time.Unix(1, 0)) //nolint:errcheck // fails only on a closed conn, which is the goal
}

// Close closes the socket, except while draining: redcon closes every
// connection from its accept goroutine as soon as the listener closes, and
// that must not cut off a reply being written. During a drain Close only
// wakes the reader; the server's connection-closed hook closes the socket
// (closeSocket) once the connection's goroutine has finished.
func (g *guardConn) Close() error {
	if g.draining.Load() {
		g.Conn.SetReadDeadline(time.Unix(1, 0)) //nolint:errcheck // see drain
		return nil
	}
	return g.Conn.Close()
}

// closeSocket closes the socket whatever the state.
func (g *guardConn) closeSocket() error { return g.Conn.Close() }
