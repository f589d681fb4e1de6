package testkit

import (
	"testing"
	"time"
)

// Poll calls cond until it returns true or timeout has passed, and reports
// whether it did. It is for waiting on something the test can observe but
// not control (a log line, a counter, a connection closing); cond is
// called at least once, first at once, then at growing intervals of 1 to
// 20 ms. Poll does not fail the test, so it suits goroutines and callers
// that report the last value they saw; see Eventually.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait) // the poll interval: waiting for cond, not for time
		wait = min(2*wait, 20*time.Millisecond)
	}
	return true
}

// Eventually is Poll that fails the test when cond is still false after
// timeout, saying what it waited for.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("%s: not within %v", what, timeout)
	}
}
