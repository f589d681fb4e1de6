package command

import (
	"errors"

	"github.com/bucketd/bucketd/internal/decide"
)

// Transactions: MULTI, EXEC and DISCARD as Redis 7.2 answers them, per
// connection. Between MULTI and EXEC every command is checked as Redis
// checks it at queue time (command table: existence, arity, subcommand,
// authentication) and queued, answered +QUEUED; MULTI, EXEC, DISCARD,
// WATCH and QUIT act at once (commandSpec.atOnce). A command refused while
// queuing marks the transaction, and EXEC then discards it with EXECABORT
// and runs nothing. An invalid value (a bad capacity, an unknown policy) is
// found when EXEC runs the command, and is an error element of EXEC's array
// while the other commands run, as a runtime error is in Redis.
//
// EXEC plans every queued bucket command, as a pipeline is planned, and has
// the store answer all of them with one Caller.RunIsolated: no other
// connection's bucket command runs between the first and the last of them,
// on any shard (for the shards, see shard.Caller.RunIsolated; for Redis, a
// MULTI/EXEC of its own). Then it writes the replies in order and runs each
// other command (PING, DBSIZE, CLIENT ...) at its place. So such a command
// sees the effect of every bucket command of the transaction, the later
// ones included, where in Redis it would see only those before it.
//
// Invalidations (CLIENT TRACKING) of the tracked bucket commands follow
// the whole EXEC reply, never an element of it. CLIENT CACHING given
// before MULTI applies to the whole transaction, as in Redis: trackCommand
// keeps it while the transaction is open.
//
// A transaction holds at most maxQueued commands and --max-query-bytes
// bytes, counted as RESP encodes them: what one command may buffer, a
// transaction may queue. Beyond either, the command is refused and the
// transaction discarded at EXEC, and what it had queued is freed at once.

// maxQueued is the most commands one transaction may queue.
const maxQueued = 1 << 16

// txKeep is the largest buffer a connection keeps for the next
// transaction; a larger one, from a big transaction, is given back.
const txKeep = 64 << 10

// transaction is one connection's MULTI state; the zero value is none.
// Owned by the connection's goroutine. The queued commands' arguments are
// copied, one after the other, into arena, since a transaction may span
// several reads and the connection's Reader reuses its buffer.
type transaction struct {
	open  bool // MULTI was accepted; EXEC or DISCARD ends it
	dirty bool // a command was refused while queuing: EXEC discards it
	cmds  []queuedCmd
	arena []byte   // every queued argument, one after the other
	ends  []int    // where each queued argument ends in arena
	size  int      // the queued commands' size as RESP encodes them
	argv  [][]byte // one queued command's arguments, rebuilt at EXEC
}

// queuedCmd is one command waiting for EXEC: its table entry and its
// number of arguments (the name included), the next ones in ends.
type queuedCmd struct {
	spec  *commandSpec
	nargs int
}

// queue answers a command sent while a transaction is open that does not
// act at once: +QUEUED, or the error Redis gives at queue time (an unknown
// command, a wrong number of arguments, NOAUTH, resolve's e) or a full
// queue, which marks the transaction so that EXEC discards it. Once
// marked, it keeps nothing more: EXEC will run none of it anyway.
func (s *session) queue(cmd *commandSpec, e *errorReply, args [][]byte) {
	t := &s.tx
	if e == nil && cmd == &unknownEntry { // not cmd.id: subcommands have none
		e = unknownCommand(args)
	}
	if e == nil && !t.dirty && !t.add(cmd, args, s.c.Server().Limits().MaxQueryBytes) {
		e = s.e.txTooLong
	}
	if e != nil {
		t.dirty = true
		t.empty()
		s.writeError(e)
		return
	}
	s.w.String("QUEUED")
}

// add queues cmd with a copy of args, unless the transaction would then
// hold more than maxQueued commands or maxBytes bytes.
func (t *transaction) add(cmd *commandSpec, args [][]byte, maxBytes int) bool {
	size := respSize(args)
	if len(t.cmds) >= maxQueued || t.size+size > maxBytes {
		return false
	}
	t.size += size
	for _, a := range args {
		t.arena = append(t.arena, a...)
		t.ends = append(t.ends, len(t.arena))
	}
	t.cmds = append(t.cmds, queuedCmd{spec: cmd, nargs: len(args)})
	return true
}

// respSize is the size of args as one RESP command: *n, then $len and the
// bytes of each argument, each line ended by CRLF.
func respSize(args [][]byte) int {
	n := 3 + digits(len(args))
	for _, a := range args {
		n += 5 + digits(len(a)) + len(a)
	}
	return n
}

// digits is the number of decimal digits of n >= 0.
func digits(n int) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}

// argsOf returns the arguments of q, whose first is argument *arg of the
// transaction, and moves *arg past them. The slice is reused by the next
// call; the arguments stay valid until the transaction ends.
func (t *transaction) argsOf(q queuedCmd, arg *int) [][]byte {
	t.argv = t.argv[:0]
	start := 0
	if *arg > 0 {
		start = t.ends[*arg-1]
	}
	for range q.nargs {
		end := t.ends[*arg]
		t.argv = append(t.argv, t.arena[start:end:end])
		start = end
		*arg++
	}
	return t.argv
}

// empty forgets the queued commands, and gives back buffers a big
// transaction grew.
func (t *transaction) empty() {
	clear(t.argv) // drop references to arena
	t.argv, t.cmds, t.arena, t.ends = t.argv[:0], t.cmds[:0], t.arena[:0], t.ends[:0]
	t.size = 0
	if cap(t.arena) > txKeep || cap(t.ends) > txKeep/8 {
		t.cmds, t.arena, t.ends, t.argv = nil, nil, nil, nil
	}
}

// discard ends the transaction, if one is open, and forgets its commands.
func (t *transaction) discard() {
	t.open, t.dirty = false, false
	t.empty()
}

// refuseExec turns an error EXEC itself gets (a wrong number of arguments,
// NOAUTH) into Redis's reply to it, and discards the transaction, open or
// not, as Redis does.
func (t *transaction) refuseExec(e *errorReply) *errorReply {
	t.discard()
	return execAborted(e)
}

// cmdMulti starts a transaction. A nested MULTI is refused and leaves the
// transaction as it was, as in Redis.
func cmdMulti(s *session, args [][]byte) *errorReply {
	if s.tx.open {
		return errMultiNested
	}
	s.tx.open = true
	s.w.String("OK")
	return nil
}

// cmdDiscard ends the transaction without running anything.
func cmdDiscard(s *session, args [][]byte) *errorReply {
	if !s.tx.open {
		return errDiscardNoMulti
	}
	s.tx.discard()
	s.w.String("OK")
	return nil
}

// cmdWatch refuses WATCH: inside MULTI with Redis's reply (which leaves the
// transaction as it was), otherwise because bucketd has no WATCH.
func cmdWatch(s *session, args [][]byte) *errorReply {
	if s.tx.open {
		return errWatchInMulti
	}
	return errWatchUnsupported
}

// cmdUnwatch has nothing to forget: nothing is ever watched.
func cmdUnwatch(s *session, args [][]byte) *errorReply {
	s.w.String("OK")
	return nil
}

// cmdExec runs the transaction and writes EXEC's array: one reply per
// queued command, each in the connection's protocol at its turn. A marked
// transaction is discarded with EXECABORT. When the store cannot run the
// bucket commands as one unit (keys in several hash slots of a Redis
// Cluster, in store mode) nothing runs and EXEC answers CROSSSLOT, as a
// cluster does.
func cmdExec(s *session, args [][]byte) *errorReply {
	t := &s.tx
	switch {
	case !t.open:
		return errExecNoMulti
	case t.dirty:
		t.discard()
		return errExecAbort
	}
	t.open = false
	defer t.discard()
	answers, err := s.planQueued()
	if errors.Is(err, decide.ErrCrossSlot) {
		s.pipe.end()
		return errCrossSlot
	}
	s.w.Array(len(t.cmds))
	s.execing = true
	s.writeQueued(answers, err)
	s.execing = false
	s.pipe.end()
	return nil
}

// planQueued plans every queued bucket command, in order, and has the
// store answer them as one unit.
func (s *session) planQueued() ([]decide.Answer, error) {
	t := &s.tx
	arg := 0
	for _, q := range t.cmds {
		if q.spec.plan == nil {
			arg += q.nargs
			continue
		}
		if e := q.spec.plan(&s.pipe, t.argsOf(q, &arg)); e != nil {
			s.pipe.planError(e)
		}
	}
	if len(s.pipe.plan) == 0 {
		return nil, nil
	}
	return s.pipe.caller.RunIsolated()
}

// writeQueued writes the reply of each queued command in order: a bucket
// command's from its planned answers, any other command's by running it
// now. Then it writes the invalidations of the tracked bucket commands,
// after the whole array. Whether a command is tracked is decided at its
// turn, so a CLIENT TRACKING or CLIENT CACHING queued before it counts.
func (s *session) writeQueued(answers []decide.Answer, err error) {
	t := &s.tx
	arg, next, k := 0, 0, 0
	for _, q := range t.cmds {
		if s.w.Over() {
			return // past the output limit: the connection closes (resp), nothing of this is sent
		}
		if q.spec.plan == nil {
			if e := q.spec.run(s, t.argsOf(q, &arg)); e != nil {
				s.writeError(e)
			}
			continue
		}
		p := s.pipe.plan[k]
		k++
		if s.pipe.writePlanned(p, answers, &next, err) && s.tracking.on && s.tracking.tracks() {
			s.tracking.trackKeys(q.spec.keys, t.argsOf(q, &arg))
		} else {
			arg += q.nargs // the arguments are not needed again
		}
	}
	// Pushes exist only in RESP3: a HELLO 2 in the transaction leaves the
	// recorded invalidations unsent.
	for n := len(s.tracking.pendingCounts); n > 0; n-- {
		s.tracking.writeInvalidation(s.w, s.w.RESP3())
	}
}
