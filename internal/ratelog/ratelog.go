// Package ratelog keeps a failure that repeats thousands of times a second
// from flooding the log: a Gate lets one line through per interval and
// counts the lines it held back, so the next line can say how many there
// were. Replication and store mode log Redis failures through it; each
// caller keeps its own message and fields.
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
