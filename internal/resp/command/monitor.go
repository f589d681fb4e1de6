package command

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketd/bucketd/internal/resp"
)

// MONITOR: every command any client sends, shown to the monitoring
// clients as Redis shows it, `+<unix time> [0 <addr>] "arg" ...`. A
// session formats its batch's lines, while a monitor is connected (one
// atomic load per command otherwise), and appends them to each monitor's
// pending bytes once per batch; the monitor's connection writes them
// (resp.Stream). Nobody waits for a monitor: one that reads too slowly, so
// that its pending bytes pass the pubsub class's hard limit, or its soft
// limit for longer than the soft time, is closed, as Redis closes a
// pub/sub client past client-output-buffer-limit.

// monitorSet is the Engine's monitors.
type monitorSet struct {
	n   atomic.Int32 // how many: the request path's check
	mu  sync.RWMutex // guards set; read-locked to feed, locked to add and remove
	set map[*monitor]struct{}
}

// monitor is one monitoring connection's pending output.
type monitor struct {
	ms   *monitorSet
	conn connection
	wake chan struct{} // one token: there is output, or the monitor closed
	lim  resp.OutputLimit

	mu        sync.Mutex // guards what follows
	pending   []byte
	out       []byte // being written: Next's, kept for reuse
	closed    bool
	over      bool
	dropped   int
	softSince time.Time // when pending passed the soft limit; zero when below
}

// feed appends one batch's lines to every monitor.
func (ms *monitorSet) feed(lines []byte) {
	now := time.Now()
	ms.mu.RLock()
	for m := range ms.set {
		m.push(lines, now)
	}
	ms.mu.RUnlock()
}

// push appends lines to m's pending output, or closes m when they would
// pass its limits: its connection is aborted, so a write blocked on a
// client that does not read returns.
func (m *monitor) push(lines []byte, now time.Time) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	size := len(m.pending) + len(lines)
	switch {
	case m.lim.SoftBytes > 0 && size > m.lim.SoftBytes && m.softSince.IsZero():
		m.softSince = now
	case m.lim.SoftBytes > 0 && size <= m.lim.SoftBytes:
		m.softSince = time.Time{}
	}
	hard := m.lim.HardBytes > 0 && size > m.lim.HardBytes
	soft := !m.softSince.IsZero() && now.Sub(m.softSince) > m.lim.SoftTime
	if hard || soft {
		m.closed, m.over, m.dropped = true, true, size
		m.pending, m.out = nil, nil
		m.mu.Unlock()
		m.conn.Abort()
		m.signal()
		return
	}
	m.pending = append(m.pending, lines...)
	m.mu.Unlock()
	m.signal()
}

func (m *monitor) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Next returns the pending output (resp.Stream).
func (m *monitor) Next() ([]byte, bool) {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, false
		}
		if len(m.pending) > 0 {
			m.pending, m.out = m.out[:0], m.pending
			m.mu.Unlock()
			return m.out, true
		}
		m.mu.Unlock()
		<-m.wake
	}
}

// Close ends the monitor (resp.Stream): it gets nothing more.
func (m *monitor) Close() {
	m.mu.Lock()
	m.closed = true
	m.pending = nil
	m.mu.Unlock()
	m.signal()
	m.ms.remove(m)
}

// Overflowed reports whether m was closed for reading too slowly
// (resp.Stream).
func (m *monitor) Overflowed() (int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dropped, m.over
}

func (ms *monitorSet) add(m *monitor) {
	ms.mu.Lock()
	if ms.set == nil {
		ms.set = make(map[*monitor]struct{})
	}
	ms.set[m] = struct{}{}
	ms.n.Store(int32(len(ms.set)))
	ms.mu.Unlock()
}

func (ms *monitorSet) remove(m *monitor) {
	ms.mu.Lock()
	delete(ms.set, m)
	ms.n.Store(int32(len(ms.set)))
	ms.mu.Unlock()
}

var errMonitorInExec = &errorReply{"ERR MONITOR isn't allowed for DENY BLOCKING client", ErrInvalidArg}

// cmdMonitor answers MONITOR: OK, and from then on the connection shows
// every command of every client; the commands after MONITOR in the same
// read, and those the client sends later (but QUIT), are dropped.
func cmdMonitor(s *session, args [][]byte) *errorReply {
	if s.execing {
		return errMonitorInExec
	}
	lim := s.c.Server().OutputLimits()[resp.PubSubClient]
	m := &monitor{ms: &s.e.monitors, conn: s.c, wake: make(chan struct{}, 1), lim: lim}
	s.c.SetOutputClass(resp.PubSubClient)
	s.e.monitors.add(m)
	s.c.Stream(m)
	s.streaming = true
	s.w.String("OK")
	return nil
}

// monitorLine appends the monitors' line for args: the time, the
// database and the client's address, and each argument quoted as Redis
// quotes it (sdscatrepr); AUTH's and HELLO's secrets are redacted.
func (s *session) monitorLine(b []byte, args [][]byte) []byte {
	now := time.Now()
	b = append(b, '+')
	b = strconv.AppendInt(b, now.Unix(), 10)
	b = append(b, '.')
	us := now.Nanosecond() / 1000
	for d := 100000; d > 1 && us < d; d /= 10 {
		b = append(b, '0')
	}
	b = strconv.AppendInt(b, int64(us), 10)
	b = append(b, " [0 "...)
	b = append(b, s.c.RemoteAddr()...)
	b = append(b, ']')
	for j, a := range args {
		b = append(b, ' ')
		if redacted(args, j) {
			b = append(b, `"(redacted)"`...)
			continue
		}
		b = appendRepr(b, a)
	}
	return append(b, '\r', '\n')
}

// appendRepr quotes a as Redis's sdscatrepr does.
func appendRepr(b, a []byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for _, c := range a {
		switch c {
		case '\\', '"':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\a':
			b = append(b, '\\', 'a')
		case '\b':
			b = append(b, '\\', 'b')
		default:
			if c >= ' ' && c <= '~' {
				b = append(b, c)
			} else {
				b = append(b, '\\', 'x', hex[c>>4], hex[c&15])
			}
		}
	}
	return append(b, '"')
}
