package leasesim

import "container/heap"

// event is something that happens at an instant of the true clock
// (microseconds). seq orders events at the same instant as they were
// scheduled, which keeps a run deterministic.
type event struct {
	at  int64
	seq uint64
	fn  func()
}

// events is a min-heap of events by (at, seq).
type events []event

func (q events) Len() int { return len(q) }
func (q events) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q events) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)   { *q = append(*q, x.(event)) }
func (q *events) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// loop is the simulated clock: the current instant and what is to come.
type loop struct {
	now  int64
	seq  uint64
	q    events
	runs int64 // events run, for the tests' sense of scale
}

// at schedules fn at instant t; an instant in the past runs now (after
// what is already scheduled for now).
func (l *loop) at(t int64, fn func()) {
	l.seq++
	heap.Push(&l.q, event{at: max(t, l.now), seq: l.seq, fn: fn})
}

// run runs events in order until none is left before end.
func (l *loop) run(end int64) {
	for len(l.q) > 0 && l.q[0].at < end {
		e := heap.Pop(&l.q).(event)
		l.now = e.at
		l.runs++
		e.fn()
	}
	l.now = end
}
