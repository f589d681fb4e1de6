package command

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketd/bucketd/internal/resp/wire"
)

// SLOWLOG: the commands that took at least slowlog-log-slower-than, the
// newest slowlog-max-len of them, as Redis keeps them. An entry holds at
// most slowMaxArgs arguments of at most slowMaxString bytes each (and the
// client name cut the same way), so what clients can make the log hold is
// bounded by the settings: about 5 KiB an entry.

const (
	slowMaxArgs   = 32  // Redis's SLOWLOG_ENTRY_MAX_ARGC
	slowMaxString = 128 // Redis's SLOWLOG_ENTRY_MAX_STRING
)

// Defaults of the two settings, Redis's.
const (
	DefaultSlowlogSlowerThan = 10 * time.Millisecond
	DefaultSlowlogMaxLen     = 128
)

// slowEntry is one SLOWLOG entry.
type slowEntry struct {
	id, unix, usec int64
	args           [][]byte // cut as Redis cuts them
	addr           string
	name           []byte // cut to slowMaxString bytes
}

// slowlog is the Engine's log. slow is the request path's one check: an
// atomic load per segment of a batch (cmdstats.go).
type slowlog struct {
	slower atomic.Int64 // nanoseconds; < 0: off
	mu     sync.Mutex   // guards what follows; taken only for a slow command and by SLOWLOG
	max    int
	ring   []slowEntry // the newest max entries, from head on, oldest first
	head   int
	n      int
	nextID int64
}

// slow reports whether a command that took ns nanoseconds is logged.
func (l *slowlog) slow(ns int64) bool {
	t := l.slower.Load()
	return t >= 0 && ns >= t
}

// set applies the two settings: slowerThan < 0 turns the log off (it
// keeps its entries), and maxLen drops the oldest entries beyond it.
func (l *slowlog) set(slowerThan time.Duration, maxLen int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.entries()
	if len(old) > maxLen {
		old = old[len(old)-maxLen:]
	}
	l.max = maxLen
	l.ring = append(make([]slowEntry, 0, min(maxLen, 1024)), old...)
	l.head, l.n = 0, len(old)
	if slowerThan < 0 {
		l.slower.Store(-1)
	} else {
		l.slower.Store(int64(slowerThan))
	}
}

// entries returns the entries, oldest first, in a new slice; call it with
// mu held.
func (l *slowlog) entries() []slowEntry {
	out := make([]slowEntry, 0, l.n)
	for i := range l.n {
		out = append(out, l.ring[(l.head+i)%len(l.ring)])
	}
	return out
}

// add logs a command of s that took ns nanoseconds.
func (l *slowlog) add(args [][]byte, ns int64, s *session) {
	e := slowEntry{unix: time.Now().Unix(), usec: ns / 1000, args: slowArgs(args), addr: s.c.RemoteAddr()}
	e.name = append([]byte(nil), s.name[:min(len(s.name), slowMaxString)]...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max == 0 {
		return
	}
	e.id = l.nextID
	l.nextID++
	if len(l.ring) < l.max { // grows up to max, oldest first from head 0
		l.ring = append(l.ring, e)
		l.n++
	} else { // full: the newest replaces the oldest
		l.ring[l.head] = e
		l.head = (l.head + 1) % len(l.ring)
	}
}

// slowArgs copies args as Redis logs them: at most slowMaxArgs, the last
// saying how many more there were, each cut to slowMaxString bytes,
// saying how many more bytes it had. AUTH's and HELLO's secrets are
// redacted.
func slowArgs(args [][]byte) [][]byte {
	n := min(len(args), slowMaxArgs)
	out := make([][]byte, n)
	for j := range n {
		a := args[j]
		switch {
		case n != len(args) && j == n-1:
			out[j] = []byte("... (" + strconv.Itoa(len(args)-n+1) + " more arguments)")
		case redacted(args, j):
			out[j] = []byte("(redacted)")
		case len(a) > slowMaxString:
			out[j] = append(a[:slowMaxString:slowMaxString], "... ("+strconv.Itoa(len(a)-slowMaxString)+" more bytes)"...)
		default:
			out[j] = append([]byte(nil), a...)
		}
	}
	return out
}

// redacted reports whether args[j] is a secret that SLOWLOG and MONITOR
// never show, as Redis 7 redacts them: AUTH's arguments, and the user
// name and password after HELLO's AUTH.
func redacted(args [][]byte, j int) bool {
	switch {
	case j == 0:
		return false
	case wire.EqualFold(args[0], "AUTH"):
		return true
	case wire.EqualFold(args[0], "HELLO"):
		for i := 2; i < j; i++ {
			if wire.EqualFold(args[i], "AUTH") && j <= i+2 {
				return true
			}
		}
	}
	return false
}

var errSlowlogCount = &errorReply{"ERR count should be greater than or equal to -1", ErrInvalidArg}

// cmdSlowlogGet answers SLOWLOG GET [count]: the newest count entries
// (10 by default, -1 for all), newest first, each an array of six: id,
// Unix time, microseconds, arguments, client address, client name.
func cmdSlowlogGet(s *session, args [][]byte) *errorReply {
	count := int64(10)
	if len(args) == 3 {
		n, ok := wire.ParseInt(args[2])
		switch {
		case !ok:
			return errNotInteger
		case n < -1:
			return errSlowlogCount
		}
		count = n
	}
	l := &s.e.slowlog
	l.mu.Lock()
	all := l.entries()
	l.mu.Unlock()
	if count == -1 || count > int64(len(all)) {
		count = int64(len(all))
	}
	s.w.Array(int(count))
	for i := len(all) - 1; i >= len(all)-int(count); i-- {
		e := &all[i]
		s.w.Array(6)
		s.w.Int64(e.id)
		s.w.Int64(e.unix)
		s.w.Int64(e.usec)
		s.w.Array(len(e.args))
		for _, a := range e.args {
			s.w.Bulk(a)
		}
		s.w.BulkString(e.addr)
		s.w.Bulk(e.name)
	}
	return nil
}

func cmdSlowlogLen(s *session, args [][]byte) *errorReply {
	s.e.slowlog.mu.Lock()
	n := s.e.slowlog.n
	s.e.slowlog.mu.Unlock()
	s.w.Int(n)
	return nil
}

func cmdSlowlogReset(s *session, args [][]byte) *errorReply {
	l := &s.e.slowlog
	l.mu.Lock()
	clear(l.ring)
	l.ring, l.head, l.n = l.ring[:0], 0, 0
	l.mu.Unlock()
	s.w.String("OK")
	return nil
}

// slowerMicros is slowlog-log-slower-than in microseconds, -1 when off.
func (l *slowlog) slowerMicros() int64 {
	if t := l.slower.Load(); t >= 0 {
		return t / 1000
	}
	return -1
}

func (l *slowlog) maxLen() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max
}

// SetSlowlog applies slowlog-log-slower-than (negative: off) and
// slowlog-max-len, at start and on reload. Safe for concurrent use.
func (e *Engine) SetSlowlog(slowerThan time.Duration, maxLen int) {
	e.slowlog.set(slowerThan, max(maxLen, 0))
}
