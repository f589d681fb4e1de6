package resp

import (
	"sync"
	"syscall"

	"github.com/bucketd/bucketd/internal/resp/wire"
)

// Killing a connection and streaming to it: what CLIENT KILL and MONITOR
// ask of a connection from outside its goroutine.

// Kill makes the connection close, as CLIENT KILL does: the batch it is
// answering (if any) finishes and its replies are written, then it closes;
// a blocked read returns at once. Safe from any goroutine.
func (c *Conn) Kill() { c.drain() }

// Abort closes the connection's socket at once, without letting anything
// finish: for a stream (Stream) whose client reads too slowly, whose
// pending write must not hold its goroutine. Safe from any goroutine.
func (c *Conn) Abort() {
	c.drain()
	c.raw.Close() //nolint:errcheck // closing is the goal; a second close changes nothing
}

// FD is the connection's file descriptor number, as CLIENT LIST shows it;
// -1 when the socket has none (a test's pipe).
func (c *Conn) FD() int { return c.fd }

// socketFD reads the descriptor number of a socket, once, at admit.
func socketFD(sock any) int {
	sc, ok := sock.(syscall.Conn)
	if !ok {
		return -1
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	raw.Control(func(f uintptr) { fd = int(f) }) //nolint:errcheck // fd stays -1 on failure
	return fd
}

// Stream is output a connection writes once it has stopped answering
// commands (MONITOR): what other connections make for it, as it comes.
// Its methods are called from the connection's goroutines.
type Stream interface {
	// Next waits for output and returns it (the stream keeps it until the
	// next call), or ok false once the stream has ended.
	Next() (b []byte, ok bool)
	// Close ends the stream: the client went away or the server drains.
	Close()
	// Overflowed reports, once the stream has ended, whether it ended
	// because the client read too slowly, and how many bytes it dropped.
	Overflowed() (pending int, over bool)
}

// Stream makes the connection write st, once the replies of the batch
// being answered are written, until st ends or the client goes away; what
// the client sends meanwhile is read and dropped, but QUIT, which ends the
// stream, and the idle timeout no longer holds, as for Redis's monitors.
// For the connection's
// own goroutine (the Session's Serve).
func (c *Conn) Stream(st Stream) { c.stream = st }

// streamOut writes c's stream until it ends, the client closes or the
// server drains c (CLIENT KILL, shutdown). A goroutine of its own reads
// (and drops) what the client sends, so that its leaving, QUIT or a drain
// ends the stream and closes the socket, which ends a write blocked on a
// client that does not read; it is awaited.
func (s *Server) streamOut(c *Conn) {
	st := c.stream
	c.idle = 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer c.raw.Close() //nolint:errcheck // ends a write blocked on a client that does not read
		defer st.Close()
		for {
			cmds, err := c.r.ReadCommands()
			if err != nil {
				return
			}
			for _, cmd := range cmds {
				if wire.EqualFold(cmd.Args[0], "QUIT") {
					return
				}
			}
		}
	}()
	for {
		b, ok := st.Next()
		if !ok {
			break
		}
		if _, err := c.sock.Write(b); err != nil {
			break
		}
	}
	st.Close()
	c.raw.Close() //nolint:errcheck // ends the reading goroutine
	wg.Wait()
	if pending, over := st.Overflowed(); over {
		s.overOutputLimit(c, limitHard, pending)
	}
}
