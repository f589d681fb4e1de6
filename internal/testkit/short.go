package testkit

import "testing"

// SkipShort skips t under `go test -short`, for a test whose point costs
// real time or a failure: fault injection, a failover, a hostile client, a
// memory bound. why names which, so that the message says what the inner
// loop leaves out and where it runs: the full suite (scripts/test.sh, and
// CI) runs without -short, so nothing skips there.
func SkipShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip(why + ": runs in the full suite (scripts/test.sh), not under -short")
	}
}
