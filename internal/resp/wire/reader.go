package wire

import (
	"bytes"
	"io"
	"slices"
	"strconv"
)

// Command is one complete command: its arguments, the name first; never
// empty. The arguments are valid until the next ReadCommands.
type Command struct{ Args [][]byte }

// ProtocolError ends a connection whose client sent something that is not
// RESP, or that breaks a limit: the server answers with Reply as an error
// line ("ERR Protocol error: …") and closes the connection, as Redis does.
type ProtocolError struct{ Reply string }

func (e *ProtocolError) Error() string { return "wire: " + e.Reply }

// Sizes of the Reader's buffer.
const (
	// initialBuf is a new connection's buffer.
	initialBuf = 4096
	// batchBuf is how far the buffer grows to hold one write whole: while
	// a read fills the buffer and stops inside a command, the write goes
	// on, and the Reader grows the buffer and reads again, up to this.
	batchBuf = 64 << 10
	// maxHeaderLine bounds a "*<count>" or "$<len>" line; a longer one is
	// garbage.
	maxHeaderLine = 32
)

// scanState is where the framing scanner stands within a command.
type scanState uint8

const (
	scanStart    scanState = iota // at the first byte of a command
	scanInline                    // inside an inline command line
	scanCount                     // inside "*<count>\r\n"
	scanBulkHead                  // expecting '$'
	scanBulkLen                   // inside "$<len>\r\n"
	scanBulkData                  // inside a bulk payload and its CRLF
)

// span is one argument's place in the buffer: buf[start:end].
type span struct{ start, end int }

// ref is one complete command of the batch being read: its arguments are
// done[first:first+n], or words for an inline command.
type ref struct {
	first, n int
	words    [][]byte
}

// Reader frames a connection's byte stream into commands. Each
// ReadCommands hands out every complete command that one read (or, while a
// write goes on, a few reads) brought: the commands of a pipeline sent in
// one write are handed out together, whatever they land next to in the
// buffer. It frames RESP itself, with Limits, so that:
//   - one command can never make the connection buffer more than
//     MaxQueryBytes, and `*2147483647\r\n` or a bulk announced larger is
//     refused before anything is allocated for it;
//   - a command trickled a byte at a time is scanned once (the scanner
//     resumes where it stopped), never re-parsed on every read;
//   - garbage is a ProtocolError, returned after the complete commands
//     before it, so they are answered first, as Redis does.
//
// Inline commands (telnet-style lines) are split exactly as Redis splits
// them. A Reader is used by one goroutine.
type Reader struct {
	src io.Reader
	lim Limits
	// The bounds in force on a command's arguments, from lim: the number
	// and the announced length of one.
	maxArgs, maxBulk int64
	buf              []byte
	// head is where the command being framed starts: everything before it
	// in this batch is complete commands. end is the end of what was read.
	head, end int

	// The scanner, within the command that starts at head.
	scan      int
	state     scanState
	lineStart int   // start of the header or inline line being scanned
	argsLeft  int   // bulk arguments still expected
	bulkLeft  int64 // payload bytes plus CRLF still expected
	bulkStart int   // where the current payload starts
	pending   []span

	done []span // the arguments of this batch's complete commands
	refs []ref  // this batch's complete commands
	cmds []Command
	argv [][]byte

	err error // returned once the commands before it are handed out
	// held: the command at head broke a bound of an unauthenticated
	// client after complete commands of its batch (refuseUnauthenticated),
	// and is framed again at the next ReadCommands.
	held bool
}

// NewReader returns a Reader of src with lim (zero fields at their
// defaults).
func NewReader(src io.Reader, lim Limits) *Reader {
	r := &Reader{src: src, buf: make([]byte, initialBuf)}
	r.SetLimits(lim)
	return r
}

// SetLimits changes the limits from the next command on (the command being
// framed is held to them too).
func (r *Reader) SetLimits(lim Limits) {
	r.lim = lim.WithDefaults()
	r.maxArgs, r.maxBulk = int64(r.lim.MaxArgs), int64(r.lim.MaxQueryBytes)
	if r.lim.Unauthenticated {
		r.maxArgs = min(r.maxArgs, UnauthenticatedMaxArgs)
		r.maxBulk = min(r.maxBulk, UnauthenticatedMaxBulkBytes)
	}
}

// Buffered is the number of bytes read but not yet handed out: the command
// being framed.
func (r *Reader) Buffered() int { return r.end - r.head }

// ReadCommands waits for at least one complete command and returns every
// command complete by then (see Reader), valid until the next call. After
// the last command before a read error, a protocol error or the end of the
// stream, it returns that error: a *ProtocolError, io.EOF, or the
// source's.
func (r *Reader) ReadCommands() ([]Command, error) {
	r.newBatch()
	ready := false
	if r.held { // framed again under the limits now in force: an AUTH before it may have lifted them
		r.held = false
		r.frame()
		ready = len(r.refs) > 0
	}
	for !ready && r.err == nil {
		if r.end == len(r.buf) {
			r.grow()
		}
		n, err := r.src.Read(r.buf[r.end:])
		filled := n > 0 && r.end+n == len(r.buf)
		r.end += n
		r.frame()
		if err != nil && r.err == nil {
			r.err = err
		}
		if len(r.refs) == 0 || r.err != nil {
			continue // nothing to hand out yet, or the error ends the batch
		}
		if filled && !r.held && r.head < r.end && len(r.buf) < batchBuf {
			continue // the read stopped inside a command: the write goes on
		}
		break
	}
	if len(r.refs) == 0 {
		return nil, r.err
	}
	return r.batch(), nil
}

// newBatch forgets the batch handed out last: the command being framed
// moves to the front of the buffer, and a buffer a big command grew is
// given back.
func (r *Reader) newBatch() {
	r.done, r.refs = r.done[:0], r.refs[:0]
	clear(r.argv) // drop the references to inline words
	if r.head == 0 {
		return
	}
	shift := r.head
	if len(r.buf) > batchBuf && r.end-r.head <= initialBuf {
		nb := make([]byte, initialBuf)
		copy(nb, r.buf[r.head:r.end])
		r.buf = nb
	} else {
		copy(r.buf, r.buf[r.head:r.end])
	}
	r.head, r.end = 0, r.end-shift
	r.scan -= shift
	r.lineStart -= shift
	r.bulkStart -= shift
	for i := range r.pending {
		r.pending[i].start -= shift
		r.pending[i].end -= shift
	}
}

// grow makes room for a read: twice the buffer, up to what one command may
// hold (MaxQueryBytes, which frame enforces) plus room for the batch.
func (r *Reader) grow() {
	size := min(2*len(r.buf), max(batchBuf, r.lim.MaxQueryBytes+initialBuf))
	if size <= len(r.buf) {
		size = len(r.buf) + initialBuf
	}
	nb := make([]byte, size)
	copy(nb, r.buf[:r.end])
	r.buf = nb
}

// batch returns the batch's commands, their arguments sliced out of the
// buffer.
func (r *Reader) batch() []Command {
	r.argv = slices.Grow(r.argv[:0], len(r.done))
	r.cmds = r.cmds[:0]
	for _, f := range r.refs {
		if f.words != nil {
			r.cmds = append(r.cmds, Command{Args: f.words})
			continue
		}
		start := len(r.argv)
		for _, s := range r.done[f.first : f.first+f.n] {
			r.argv = append(r.argv, r.buf[s.start:s.end:s.end])
		}
		r.cmds = append(r.cmds, Command{Args: r.argv[start:len(r.argv):len(r.argv)]})
	}
	return r.cmds
}

// frame advances the scanner over the bytes read, completing commands,
// until the bytes run out or it finds a protocol error.
func (r *Reader) frame() {
	for r.scan < r.end && r.err == nil && r.step() {
	}
	if r.err == nil && !r.held && r.end-r.head > r.lim.MaxQueryBytes {
		r.failQueryBuffer()
	}
}

// step advances the scanner over at least one byte, or reports false when
// the bytes have run out or it found a protocol error.
func (r *Reader) step() bool {
	switch r.state {
	case scanStart:
		r.lineStart = r.scan
		if r.buf[r.scan] == '*' {
			r.state = scanCount
			r.scan++
		} else {
			r.state = scanInline
		}
		return true
	case scanInline:
		return r.stepInline()
	case scanCount:
		return r.stepCount()
	case scanBulkHead:
		if c := r.buf[r.scan]; c != '$' {
			r.fail("expected '$', got '" + printable(c) + "'")
			return false
		}
		r.lineStart = r.scan
		r.scan++
		r.state = scanBulkLen
		return true
	case scanBulkLen:
		return r.stepBulkLen()
	default:
		return r.stepBulkData()
	}
}

// stepInline looks for the end of an inline command line and splits the
// line into arguments once it is complete.
func (r *Reader) stepInline() bool {
	i := bytes.IndexByte(r.buf[r.scan:r.end], '\n')
	if i < 0 {
		r.scan = r.end
		if r.end-r.lineStart > r.lim.MaxInlineBytes {
			r.fail("too big inline request")
		}
		return false
	}
	r.scan += i + 1
	line := r.buf[r.lineStart : r.scan-1] // without the '\n'
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	words, ok := splitInline(line)
	switch {
	case r.scan-r.head > r.lim.MaxQueryBytes:
		r.failQueryBuffer()
		return false
	case !ok:
		r.fail("unbalanced quotes in request")
		return false
	case len(words) > r.lim.MaxArgs:
		r.fail("invalid multibulk length")
		return false
	}
	if len(words) > 0 { // a blank line is no command, as in Redis
		r.refs = append(r.refs, ref{words: words})
	}
	r.head, r.state = r.scan, scanStart
	return true
}

// stepCount reads "*<count>\r\n", the number of arguments of a command.
func (r *Reader) stepCount() bool {
	line, ok := r.headerLine()
	if !ok {
		return false
	}
	n, valid := ParseInt(line)
	if !valid || n > r.maxArgs {
		if valid && n <= int64(r.lim.MaxArgs) {
			r.refuseUnauthenticated("unauthenticated multibulk length")
		} else {
			r.fail("invalid multibulk length")
		}
		return false
	}
	if n <= 0 { // "*0" and "*-1" are empty commands: Redis ignores them
		r.head, r.state = r.scan, scanStart
		return true
	}
	r.argsLeft, r.state = int(n), scanBulkHead
	r.pending = r.pending[:0]
	return true
}

// stepBulkLen reads "$<len>\r\n", the length of an argument.
func (r *Reader) stepBulkLen() bool {
	line, ok := r.headerLine()
	if !ok {
		return false
	}
	n, valid := ParseInt(line)
	if !valid || n < 0 || n > r.maxBulk {
		if valid && n >= 0 && n <= int64(r.lim.MaxQueryBytes) {
			r.refuseUnauthenticated("unauthenticated bulk length")
		} else {
			r.fail("invalid bulk length")
		}
		return false
	}
	r.bulkStart, r.bulkLeft, r.state = r.scan, n+2, scanBulkData
	return true
}

// stepBulkData skips over an argument's payload and checks the CRLF after
// it; the last argument completes the command.
func (r *Reader) stepBulkData() bool {
	take := min(r.bulkLeft, int64(r.end-r.scan))
	r.scan += int(take)
	r.bulkLeft -= take
	if r.bulkLeft > 0 {
		return false
	}
	if r.buf[r.scan-2] != '\r' || r.buf[r.scan-1] != '\n' {
		r.fail("invalid bulk format: payload not followed by CRLF")
		return false
	}
	r.pending = append(r.pending, span{r.bulkStart, r.scan - 2})
	if r.argsLeft--; r.argsLeft > 0 {
		r.state = scanBulkHead
		return true
	}
	if r.scan-r.head > r.lim.MaxQueryBytes { // the whole command, its last bytes included
		r.failQueryBuffer()
		return false
	}
	r.refs = append(r.refs, ref{first: len(r.done), n: len(r.pending)})
	r.done = append(r.done, r.pending...)
	r.head, r.state = r.scan, scanStart
	return true
}

// headerLine returns the digits of a "*<n>\r\n" or "$<n>\r\n" line (without
// the type byte and CRLF) once the whole line has arrived.
func (r *Reader) headerLine() ([]byte, bool) {
	i := bytes.IndexByte(r.buf[r.scan:r.end], '\n')
	if i < 0 {
		r.scan = r.end
		if r.end-r.lineStart > maxHeaderLine {
			if r.state == scanCount {
				r.fail("too big mbulk count string")
			} else {
				r.fail("too big bulk count string")
			}
		}
		return nil, false
	}
	nl := r.scan + i
	r.scan = nl + 1
	if nl-r.lineStart < 2 || r.buf[nl-1] != '\r' {
		return nil, true // ParseInt(nil) reports it invalid
	}
	return r.buf[r.lineStart+1 : nl-1], true
}

// refuseUnauthenticated refuses the command at head, which breaks a bound
// of Limits.Unauthenticated, with the protocol error msg; but when
// complete commands come before it in this batch, it holds it instead, to
// be framed again at the next ReadCommands under the limits then in force.
// Redis runs each command before it reads the next, so an AUTH pipelined
// before a larger command lifts the bounds for it; here the batch is
// framed first, and an AUTH among those commands lifts them before the
// command held is framed again.
func (r *Reader) refuseUnauthenticated(msg string) {
	if len(r.refs) == 0 {
		r.fail(msg)
		return
	}
	r.scan, r.state, r.held = r.head, scanStart, true
}

func (r *Reader) fail(msg string) {
	if r.err == nil {
		r.err = &ProtocolError{Reply: "ERR Protocol error: " + msg}
	}
}

func (r *Reader) failQueryBuffer() {
	r.fail("query buffer exceeded " + strconv.Itoa(r.lim.MaxQueryBytes) + " bytes (see --max-query-bytes)")
}

func printable(c byte) string {
	if c >= ' ' && c <= '~' {
		return string(rune(c))
	}
	return "\\x" + strconv.FormatUint(uint64(c), 16)
}
