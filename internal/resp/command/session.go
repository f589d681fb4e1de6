package command

import (
	"time"

	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/resp/wire"
)

// session is one connection's command state, owned by its goroutine (the
// resp.Session of the connection). Its parts, one concern each:
//   - who the client is: its connection, name, authentication, QUIT;
//   - pipe, the bucket commands of the batch being answered (pipeline.go);
//   - tx, an open MULTI (transaction.go);
//   - tracking, CLIENT TRACKING (tracking.go);
//   - tally, the batch's counts, added to the Engine's counters once per
//     batch (stats.go).
type session struct {
	e      *Engine
	c      connection
	w      *wire.Writer // c's, where every reply goes
	name   []byte       // CLIENT SETNAME; written under pub.mu (clients.go)
	authed bool
	quit   bool
	// streaming: MONITOR turned the connection into a stream; the rest of
	// the batch is dropped (monitor.go).
	streaming bool
	execing   bool // EXEC is running the queued commands

	// Statistics (cmdstats.go): the batch being answered, the monotonic
	// time of the last segment boundary, the planned commands since, and
	// the row of the last command.
	batch   []wire.Command
	clk     int64
	seg     []segCall
	lastRow statRow
	pub     published // what CLIENT LIST shows of the session (clients.go)
	mon     []byte    // this batch's lines for the monitors (monitor.go)

	pipe     pipeline
	tx       transaction
	tracking tracking
	tally    tally
}

// connection is what a session needs of its connection: a resp.Conn, or a
// test's stand-in.
type connection interface {
	ID() int64
	Writer() *wire.Writer
	Server() *resp.Server
	SetLimits(wire.Limits)
	SetOutputClass(resp.OutputClass)
	RemoteAddr() string
	LocalAddr() string
	Created() time.Time
	FD() int
	Kill()
	Abort()
	Stream(resp.Stream)
}

// Serve answers the commands of one read (resp.Session). Bucket commands
// are planned, up to the next command that is not one, so that all of
// them travel to the store together (one batch per shard) and their
// replies are written in order; see exec.
func (s *session) Serve(cmds []wire.Command) bool {
	s.batch, s.clk = cmds, mono()
	for i := range cmds {
		if s.quit || s.streaming || s.w.Over() {
			break // Redis ignores what follows QUIT; past its output limit the connection closes (resp)
		}
		s.exec(cmds[i].Args, int32(i))
	}
	s.flushPipe()
	s.batch = nil
	if len(s.mon) > 0 {
		s.e.monitors.feed(s.mon)
		s.mon = s.mon[:0]
	}
	s.publish()
	s.e.flushTally(&s.tally) // counts the commands executed, each under its name
	return !s.quit
}

// flushPipe answers the planned bucket commands, and ends their segment
// of the batch's time (cmdstats.go).
func (s *session) flushPipe() {
	s.pipe.flush()
	if len(s.seg) > 0 {
		s.endSegment()
	}
}

// Closed counts a protocol error the connection ended on (resp.Session),
// and forgets the session in the client list.
func (s *session) Closed(protocolError bool) {
	if protocolError {
		s.tally.error(ErrProtocol)
		s.e.flushTally(&s.tally)
	}
	s.e.clients.remove(s)
}

// exec plans a bucket command or, for anything else, first answers the
// planned commands (so replies keep their order and INFO or DBSIZE see the
// effect of earlier commands) and then answers it directly. An error found
// before the command runs is planned like a reply, in its place. Between
// MULTI and EXEC a command is queued instead (transaction.go), unless it
// acts at once; nothing is planned then, so the replies written directly
// keep their order.
//
// With CLIENT TRACKING on, trackCommand then sees every command; that one
// test of a session flag, and the one of tx.open, is all tracking and
// transactions cost a connection that uses neither.
//
// Every command that is not refused counts as a call of its row
// (cmdstats.go): a planned one in the segment of the planned commands, any
// other with its own time; and, while a monitor is connected (one atomic
// load otherwise), is shown to the monitors (monitor.go).
func (s *session) exec(args [][]byte, idx int32) {
	cmd, row, e := s.resolve(args)
	if e != nil && wire.EqualFold(args[0], "EXEC") {
		e = s.tx.refuseExec(e)
	}
	if e == nil && s.tracking.on && cmd.plan != nil && s.tracking.cachingAsked() {
		e = errNotCacheable
	}
	if e != nil {
		s.e.reject(row)
	} else if s.e.monitors.n.Load() > 0 && !cmd.skipMonitor {
		s.mon = s.monitorLine(s.mon, args)
	}
	s.lastRow = row
	planned := false
	switch {
	case s.tx.open && (e != nil || !cmd.atOnce):
		s.queue(cmd, e, args)
		if e == nil {
			s.account(row, args)
		}
	case e != nil:
		s.pipe.planError(e)
	case cmd.plan != nil:
		if e = cmd.plan(&s.pipe, args); e != nil {
			s.pipe.planError(e)
			s.e.fail(row)
		} else {
			planned = true
			s.pipe.plan[len(s.pipe.plan)-1].row = row
		}
		s.seg = append(s.seg, segCall{row: row, idx: idx})
	default:
		s.flushPipe()
		s.pub.cmd.Store(uint32(row))
		if e = cmd.run(s, args); e != nil {
			s.writeError(e)
			s.e.fail(row)
		}
		s.account(row, args)
	}
	if s.tracking.on {
		s.trackCommand(cmd, planned, args)
	}
}

// authenticate marks the client authenticated (AUTH, HELLO … AUTH): the
// bounds of a client that has not authenticated (wire.Limits'
// Unauthenticated) no longer apply to what it sends.
func (s *session) authenticate() {
	if !s.authed {
		s.authed = true
		s.c.SetLimits(s.c.Server().Limits())
	}
}

// writeError sends an error reply to a command answered at once and
// counts it under its kind (planned commands' errors go through
// pipeline.writeError, which counts them the same way).
func (s *session) writeError(e *errorReply) {
	s.tally.error(e.kind)
	s.w.ErrorReply(e.text)
}
