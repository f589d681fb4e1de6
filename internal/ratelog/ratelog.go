// Package ratelog keeps a failure that repeats thousands of times a second
// from flooding the log: a Gate lets one line through per interval and
// counts the lines it held back, so the next line can say how many there
// were. Replication and store mode log Redis failures through it; each
// caller keeps its own message and fields. A Line also writes the count
// when no next line comes: for events that come in bursts on command
// (CONFIG RELOAD), whose last count must not be lost.
//
// It is a package of its own, not part of the Redis script client, because
// it has nothing to do with Redis: any goroutine that logs per event (a
// connection, a request) can use it.
package ratelog

import (
	"sync"
	"time"
)

// Interval is how often a Gate lets a line through.
const Interval = time.Second

// Gate lets one log line through per Interval. The zero value is ready:
// the first line passes. Safe for concurrent use.
type Gate struct {
	mu         sync.Mutex
	next       time.Time // the first time the next line may pass
	suppressed int64     // lines held back since the last one that passed
}

// Allow reports whether a line may be logged at now and, if so, how many
// lines were held back since the last one that passed.
func (g *Gate) Allow(now time.Time) (suppressed int64, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Before(g.next) {
		g.suppressed++
		return 0, false
	}
	n := g.suppressed
	g.suppressed = 0
	g.next = now.Add(Interval)
	return n, true
}

// Line is a message that may be logged thousands of times a second (one
// per command, one per signal) and is written at most once an Interval
// without losing the count: the first event writes at once; events that
// come sooner are held back, and at the end of the interval the latest of
// them is written with the number of the others. So a burst writes a line
// a second while it lasts and one more when it ends, and every event is a
// line or counted in one (1 + suppressed per line), where a Gate says how
// many it held back only if another line comes. The zero value is ready.
// Safe for concurrent use.
type Line struct {
	mu      sync.Mutex
	next    time.Time              // the first time the next line may be written
	pending func(suppressed int64) // the latest held-back line; nil: none
	held    int64                  // events held back since the last line, pending's included
	armed   bool                   // a timer will write pending

	now       func() time.Time            // time.Now; tests move their own
	afterFunc func(time.Duration, func()) // time.AfterFunc's, likewise
}

// Log writes line now, or holds it back as the interval's latest (see
// Line). line writes one log line; it gets the number of events held back
// before this one that no line has counted yet. It is called with the
// Line's lock held (so lines keep their order): it must not call Log.
func (l *Line) Log(line func(suppressed int64)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	if l.pending == nil && !now.Before(l.next) {
		l.next = now.Add(Interval)
		line(0)
		return
	}
	l.held++
	l.pending = line
	if !l.armed {
		l.arm(now)
	}
}

// arm starts the timer that writes the pending line when the interval
// ends.
func (l *Line) arm(now time.Time) {
	l.armed = true
	after := l.afterFunc
	if after == nil {
		after = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	after(l.next.Sub(now), l.fire)
}

// Flush writes the held-back line, if any, at once: at shutdown, so that
// the last count is not lost with the timer.
func (l *Line) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writePending()
}

// fire is the timer's: the interval is over, unless a Flush since the
// timer was armed started another one.
func (l *Line) fire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = false
	if now := l.clock(); l.pending != nil && now.Before(l.next) {
		l.arm(now)
		return
	}
	l.writePending()
}

func (l *Line) writePending() {
	if l.pending == nil {
		return
	}
	l.pending(l.held - 1)
	l.pending, l.held = nil, 0
	l.next = l.clock().Add(Interval)
}

func (l *Line) clock() time.Time {
	if l.now == nil {
		return time.Now()
	}
	return l.now()
}
