package ratelog

import (
	"fmt"
	"testing"
	"time"
)

// TestGate: one line per Interval passes, the next one says how many were
// held back in between.
func TestGate(t *testing.T) {
	var g Gate
	t0 := time.Unix(1_700_000_000, 0)
	for _, step := range []struct {
		at         time.Duration
		ok         bool
		suppressed int64
	}{
		{0, true, 0},
		{time.Millisecond, false, 0},
		{Interval - time.Nanosecond, false, 0},
		{Interval, true, 2},
		{Interval + 1, false, 0},
		{3 * Interval, true, 1},
		{3*Interval - time.Second, false, 0}, // the clock going back passes nothing
	} {
		n, ok := g.Allow(t0.Add(step.at))
		if ok != step.ok || n != step.suppressed {
			t.Fatalf("at %v: Allow = %d, %v; want %d, %v", step.at, n, ok, step.suppressed, step.ok)
		}
	}
}

// fakeTimers is the clock and the timers of a Line under test: the test
// moves the time and fires what is due.
type fakeTimers struct {
	now time.Time
	due []fakeTimer
}

type fakeTimer struct {
	at time.Time
	fn func()
}

func (f *fakeTimers) afterFunc(d time.Duration, fn func()) {
	f.due = append(f.due, fakeTimer{f.now.Add(d), fn})
}

// advance moves the time by d and runs the timers due by then.
func (f *fakeTimers) advance(d time.Duration) {
	until := f.now.Add(d)
	for len(f.due) > 0 && !f.due[0].at.After(until) {
		t := f.due[0]
		f.due = f.due[1:]
		f.now = t.at
		t.fn()
	}
	f.now = until
}

// TestLineSummarizesABurst: a burst of events writes one line at once and
// one at the end of each Interval while it lasts, the last with the count
// of the events held back, so that a burst that stops still says how
// large it was: every event is one line or counted in one.
func TestLineSummarizesABurst(t *testing.T) {
	ft := &fakeTimers{now: time.Unix(1_700_000_000, 0)}
	var l Line
	l.now = func() time.Time { return ft.now }
	l.afterFunc = ft.afterFunc
	type written struct {
		at         time.Duration
		event      int
		suppressed int64
	}
	var lines []written
	start := ft.now
	event := 0
	log := func() {
		event++
		e := event
		l.Log(func(suppressed int64) { lines = append(lines, written{ft.now.Sub(start), e, suppressed}) })
	}
	for range 2500 { // 2.5 s of one event a millisecond
		log()
		ft.advance(time.Millisecond)
	}
	ft.advance(2 * Interval) // the burst is over
	log()                    // a lone event later
	want := []written{
		{0, 1, 0},
		{Interval, 1000, 998},              // events 2..1000 held back: 1000 is written, 998 before it counted
		{2 * Interval, 2000, 999},          // 1001..2000
		{3 * Interval, 2500, 499},          // 2001..2500: the summary after the burst
		{4500 * time.Millisecond, 2501, 0}, // a second later than the last line: at once
	}
	if fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Fatalf("lines %v\nwant %v", lines, want)
	}
	total := int64(0)
	for _, w := range lines {
		total += 1 + w.suppressed
	}
	if total != int64(event) {
		t.Fatalf("the lines account for %d events, want %d", total, event)
	}

	// Flush writes a held-back line at once, and its timer then writes
	// nothing.
	log()
	log()
	l.Flush()
	if n := len(lines); n != len(want)+1 || lines[n-1].event != 2503 || lines[n-1].suppressed != 1 {
		t.Fatalf("after Flush: %v", lines[len(want):])
	}
	ft.advance(2 * Interval)
	if len(lines) != len(want)+1 {
		t.Fatalf("the timer wrote again after Flush: %v", lines[len(want):])
	}

	// An event soon after a Flush waits a whole interval from the Flush's
	// line, though the timer armed before the Flush is due sooner.
	ft.advance(10 * Interval)
	t0 := ft.now.Sub(start)
	log() // written at once
	ft.advance(100 * time.Millisecond)
	log() // held; the timer is due at t0 + 1 s
	ft.advance(400 * time.Millisecond)
	l.Flush() // writes it at t0 + 0.5 s
	ft.advance(100 * time.Millisecond)
	log() // held until t0 + 1.5 s
	ft.advance(2 * Interval)
	tail := lines[len(want)+1:]
	wantTail := []written{{t0, 2504, 0}, {t0 + 500*time.Millisecond, 2505, 0}, {t0 + 1500*time.Millisecond, 2506, 0}}
	if fmt.Sprint(tail) != fmt.Sprint(wantTail) {
		t.Fatalf("lines around a Flush: %v\nwant %v", tail, wantTail)
	}
}
