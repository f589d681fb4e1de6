package command

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketd/bucketd/internal/resp/wire"
)

// The client list: CLIENT LIST, CLIENT INFO and CLIENT KILL. The Engine
// keeps every open session in a set guarded by a mutex that only opening,
// closing and these commands take. What another connection's CLIENT LIST
// shows of a session it reads from the session's published part: atomics
// the session stores once per batch, and the name and library, written
// under a mutex by the commands that set them.

// clientSet is the sessions of the open connections.
type clientSet struct {
	mu sync.Mutex
	m  map[*session]struct{}
}

func (cs *clientSet) add(s *session) {
	cs.mu.Lock()
	if cs.m == nil {
		cs.m = make(map[*session]struct{})
	}
	cs.m[s] = struct{}{}
	cs.mu.Unlock()
}

func (cs *clientSet) remove(s *session) {
	cs.mu.Lock()
	delete(cs.m, s)
	cs.mu.Unlock()
}

// sorted returns the sessions in the order of their ids, as Redis lists
// its clients (oldest first).
func (cs *clientSet) sorted() []*session {
	cs.mu.Lock()
	all := make([]*session, 0, len(cs.m))
	for s := range cs.m {
		all = append(all, s)
	}
	cs.mu.Unlock()
	slices.SortFunc(all, func(a, b *session) int { return int(a.c.ID() - b.c.ID()) })
	return all
}

// published is what other connections read of a session.
type published struct {
	active atomic.Int64  // mono() at the start of its last batch
	cmd    atomic.Uint32 // the statRow of its last command
	state  atomic.Uint64 // pubState's bits: flags, and the commands queued in MULTI
	redir  atomic.Int64  // CLIENT TRACKING's redirect (GETREDIR)

	mu      sync.Mutex // guards session.name (writes; the owner reads it without), libName, libVer
	libName []byte
	libVer  []byte
	last    uint64 // the state stored last: the owner's, unguarded
}

// The bits of published.state; the commands queued in MULTI are above
// stateQueuedShift.
const (
	stateMulti uint64 = 1 << iota
	stateTracking
	stateRESP3
	stateMonitor
	stateQueuedShift = 8
)

// publish stores what changed in the session's published state: once per
// batch, an atomic store of the time and of the last command, and the
// state only when it changed.
func (s *session) publish() {
	s.pub.active.Store(s.clk)
	s.pub.cmd.Store(uint32(s.lastRow))
	var st uint64
	if s.tx.open {
		st |= stateMulti | uint64(len(s.tx.cmds))<<stateQueuedShift
	}
	if s.tracking.on {
		st |= stateTracking
	}
	if s.w.RESP3() {
		st |= stateRESP3
	}
	if s.streaming {
		st |= stateMonitor
	}
	if st != s.pub.last {
		s.pub.last = st
		s.pub.state.Store(st)
		s.pub.redir.Store(s.tracking.redirectReply())
	}
}

// setName sets the client name (CLIENT SETNAME, HELLO SETNAME).
func (s *session) setName(name []byte) {
	s.pub.mu.Lock()
	s.name = append(s.name[:0], name...)
	s.pub.mu.Unlock()
}

// appendClient appends t's CLIENT LIST line, without its newline, as
// Redis 7.2 writes it. Fields bucketd does not have are 0 (the buffers,
// whose sizes are the connection's own), or say what holds for bucketd:
// db 0, no subscriptions, user default.
func appendClient(b []byte, t *session, now int64, wall time.Time) []byte {
	st := t.pub.state.Load()
	b = appendField(b, "id=", strconv.FormatInt(t.c.ID(), 10))
	b = appendField(b, " addr=", t.c.RemoteAddr())
	b = appendField(b, " laddr=", t.c.LocalAddr())
	b = appendField(b, " fd=", strconv.Itoa(t.c.FD()))
	t.pub.mu.Lock()
	b = append(append(b, " name="...), t.name...)
	t.pub.mu.Unlock()
	age := int64(wall.Sub(t.c.Created()) / time.Second)
	idle := max(0, (now-t.pub.active.Load())/int64(time.Second))
	b = appendField(b, " age=", strconv.FormatInt(age, 10))
	b = appendField(b, " idle=", strconv.FormatInt(idle, 10))
	b = appendField(b, " flags=", clientFlags(st))
	multi := int64(-1)
	if st&stateMulti != 0 {
		multi = int64(st >> stateQueuedShift)
	}
	b = append(b, " db=0 sub=0 psub=0 ssub=0"...)
	b = appendField(b, " multi=", strconv.FormatInt(multi, 10))
	b = append(b, " qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r"...)
	cmd := "NULL"
	if row := t.pub.cmd.Load(); row != 0 && int(row) < len(statRows) {
		cmd = statRows[row].name
	}
	b = appendField(b, " cmd=", cmd)
	b = append(b, " user=default"...)
	b = appendField(b, " redir=", strconv.FormatInt(t.pub.redir.Load(), 10))
	resp := "2"
	if st&stateRESP3 != 0 {
		resp = "3"
	}
	b = appendField(b, " resp=", resp)
	t.pub.mu.Lock()
	b = append(append(b, " lib-name="...), t.pub.libName...)
	b = append(append(b, " lib-ver="...), t.pub.libVer...)
	t.pub.mu.Unlock()
	return b
}

func appendField(b []byte, key, value string) []byte { return append(append(b, key...), value...) }

// clientFlags are CLIENT LIST's flags: x in MULTI, t tracking, O a
// monitor, N none of them.
func clientFlags(st uint64) string {
	var f []byte
	if st&stateMonitor != 0 {
		f = append(f, 'O')
	}
	if st&stateMulti != 0 {
		f = append(f, 'x')
	}
	if st&stateTracking != 0 {
		f = append(f, 't')
	}
	if len(f) == 0 {
		return "N"
	}
	return string(f)
}

// clientType is a client type as CLIENT LIST TYPE and CLIENT KILL TYPE
// name it; typeNone matches no bucketd client (master, replica).
type clientType int8

const (
	typeAny clientType = iota
	typeNormal
	typePubSub
	typeNone
)

// parseClientType reads normal, pubsub, master, replica or slave.
func parseClientType(b []byte) (clientType, *errorReply) {
	switch {
	case wire.EqualFold(b, "NORMAL"):
		return typeNormal, nil
	case wire.EqualFold(b, "PUBSUB"):
		return typePubSub, nil
	case wire.EqualFold(b, "MASTER"), wire.EqualFold(b, "REPLICA"), wire.EqualFold(b, "SLAVE"):
		return typeNone, nil
	}
	return typeAny, &errorReply{"ERR Unknown client type '" + truncate(b) + "'", ErrInvalidArg}
}

// is reports whether t is a client of type ct: pubsub are the clients
// that get pushes (CLIENT TRACKING, whose output limits are pubsub's).
func (t *session) is(ct clientType) bool {
	tracking := t.pub.state.Load()&stateTracking != 0
	switch ct {
	case typeNormal:
		return !tracking
	case typePubSub:
		return tracking
	case typeNone:
		return false
	}
	return true
}

var errInvalidClientID = &errorReply{"ERR Invalid client ID", ErrInvalidArg}

// cmdClientList answers CLIENT LIST [TYPE type | ID id [id ...]]: a line
// per client, as a bulk string (a verbatim string in RESP3).
func cmdClientList(s *session, args [][]byte) *errorReply {
	ct, ids := typeAny, []int64(nil)
	switch {
	case len(args) == 2:
	case len(args) == 4 && wire.EqualFold(args[2], "TYPE"):
		var e *errorReply
		if ct, e = parseClientType(args[3]); e != nil {
			return e
		}
	case len(args) > 3 && wire.EqualFold(args[2], "ID"):
		for _, a := range args[3:] {
			id, ok := wire.ParseInt(a)
			if !ok || id < 1 {
				return errInvalidClientID
			}
			ids = append(ids, id)
		}
	default:
		return errSyntax
	}
	s.publish()
	now, wall := mono(), time.Now()
	var b []byte
	for _, t := range s.e.clients.sorted() {
		if !t.is(ct) || ids != nil && !slices.Contains(ids, t.c.ID()) {
			continue
		}
		b = append(appendClient(b, t, now, wall), '\n')
	}
	s.w.Verbatim(b)
	return nil
}

// cmdClientInfo answers CLIENT INFO: this connection's line of CLIENT LIST.
func cmdClientInfo(s *session, args [][]byte) *errorReply {
	s.publish()
	s.w.Verbatim(append(appendClient(nil, s, mono(), time.Now()), '\n'))
	return nil
}

var (
	errNoSuchClient = &errorReply{"ERR No such client", ErrInvalidArg}
	errKillID       = &errorReply{"ERR client-id should be greater than 0", ErrInvalidArg}
)

// killFilter is what the filter form of CLIENT KILL matches: every field
// given must match; SKIPME (yes by default) spares the caller.
type killFilter struct {
	id          int64
	ct          clientType
	addr, laddr []byte
	skipMe      bool
}

// parseKillFilter reads CLIENT KILL's filter pairs, with Redis 7.2's
// errors: ID, TYPE, ADDR, LADDR, USER and SKIPME yes|no.
func parseKillFilter(args [][]byte) (killFilter, *errorReply) {
	f := killFilter{skipMe: true}
	if len(args)%2 != 0 {
		return f, errSyntax
	}
	for i := 0; i < len(args); i += 2 {
		opt, v := args[i], args[i+1]
		var e *errorReply
		switch {
		case wire.EqualFold(opt, "ID"):
			id, ok := wire.ParseInt(v)
			if !ok || id < 1 {
				return f, errKillID
			}
			f.id = id
		case wire.EqualFold(opt, "TYPE"):
			f.ct, e = parseClientType(v)
		case wire.EqualFold(opt, "ADDR"):
			f.addr = v
		case wire.EqualFold(opt, "LADDR"):
			f.laddr = v
		case wire.EqualFold(opt, "USER"):
			if string(v) != "default" { // the only user
				e = &errorReply{"ERR No such user '" + truncate(v) + "'", ErrInvalidArg}
			}
		case wire.EqualFold(opt, "SKIPME") && wire.EqualFold(v, "YES"):
			f.skipMe = true
		case wire.EqualFold(opt, "SKIPME") && wire.EqualFold(v, "NO"):
			f.skipMe = false
		default:
			e = errSyntax
		}
		if e != nil {
			return f, e
		}
	}
	return f, nil
}

func (f *killFilter) match(t, self *session) bool {
	return (f.id == 0 || t.c.ID() == f.id) && t.is(f.ct) &&
		(f.addr == nil || string(f.addr) == t.c.RemoteAddr()) &&
		(f.laddr == nil || string(f.laddr) == t.c.LocalAddr()) &&
		!(f.skipMe && t == self)
}

// cmdClientKill answers CLIENT KILL addr:port (OK, or ERR No such client)
// and CLIENT KILL with filters (the number of clients killed). A killed
// client finishes the batch of commands it is answering, its replies are
// written, and its connection closes; so does the caller's own, after this
// reply, when it is among them.
func cmdClientKill(s *session, args [][]byte) *errorReply {
	clients := s.e.clients.sorted()
	if len(args) == 3 {
		for _, t := range clients {
			if t.c.RemoteAddr() == string(args[2]) {
				t.c.Kill()
				s.w.String("OK")
				return nil
			}
		}
		return errNoSuchClient
	}
	f, e := parseKillFilter(args[2:])
	if e != nil {
		return e
	}
	killed := 0
	for _, t := range clients {
		if f.match(t, s) {
			t.c.Kill()
			killed++
		}
	}
	s.w.Int(killed)
	return nil
}
