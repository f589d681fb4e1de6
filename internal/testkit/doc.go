// Package testkit is what bucketd's tests share: a clock the test moves by
// hand, one polling helper, one reader of a process's resident memory, one
// raw RESP client for what a Redis library cannot send or does not show, a
// burst of racing go-redis clients for limits shared under contention, and
// SkipShort, the one way a test stays out of `go test -short`.
// Package testserver, below it, runs a bucketd protocol server on
// 127.0.0.1:0 on that clock.
//
// It is for tests only: only _test.go files import it, so it is never linked
// into the bucketd binary. Of bucketd it imports only internal/clock, so
// that every package's own tests (shard and resp included) can use it
// without an import cycle; the server lives in testserver because it needs
// resp and shard.
//
// Helpers that take a testing.TB report problems with t.Fatal, so call them
// from the test's own goroutine; the functions without one (Poll, ReadReply,
// ReadMemory, Command) return what happened and suit other goroutines.
package testkit
