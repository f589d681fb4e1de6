package command

import (
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
	name   []byte       // CLIENT SETNAME
	authed bool
	quit   bool

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
}

// Serve answers the commands of one read (resp.Session). Bucket commands
// are planned, up to the next command that is not one, so that all of
// them travel to the store together (one batch per shard) and their
// replies are written in order; see exec.
func (s *session) Serve(cmds []wire.Command) bool {
	for i := range cmds {
		if s.quit || s.w.Over() {
			break // Redis ignores what follows QUIT; past its output limit the connection closes (resp)
		}
		s.exec(cmds[i].Args)
	}
	s.pipe.flush()
	s.e.flushTally(&s.tally) // counts the commands executed, each under its name
	return !s.quit
}

// Closed counts a protocol error the connection ended on (resp.Session).
func (s *session) Closed(protocolError bool) {
	if protocolError {
		s.tally.error(ErrProtocol)
		s.e.flushTally(&s.tally)
	}
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
func (s *session) exec(args [][]byte) {
	cmd, e := s.resolve(args)
	if e != nil && wire.EqualFold(args[0], "EXEC") {
		e = s.tx.refuseExec(e)
	}
	if e == nil && s.tracking.on && cmd.plan != nil && s.tracking.cachingAsked() {
		e = errNotCacheable
	}
	planned := false
	switch {
	case s.tx.open && (e != nil || !cmd.atOnce):
		s.queue(cmd, e, args)
	case e != nil:
		s.pipe.planError(e)
	case cmd.plan != nil:
		if e = cmd.plan(&s.pipe, args); e != nil {
			s.pipe.planError(e)
		} else {
			planned = true
		}
	default:
		s.pipe.flush()
		if e = cmd.run(s, args); e != nil {
			s.writeError(e)
		}
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
