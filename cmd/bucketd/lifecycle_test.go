package main

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/shard"
	"github.com/bucketd/bucketd/internal/snapshot"
)

// logTap is run's stderr in a test: it hands every log line to lines, in
// order, and blocks the writer of the first line that contains hold until
// release is closed. Holding a line holds the goroutine that logs it at
// that point of its work, which lets a test look at the process there.
type logTap struct {
	lines   chan string
	hold    string
	release chan struct{}
	held    bool
}

func newLogTap(hold string) *logTap {
	return &logTap{lines: make(chan string, 1000), hold: hold, release: make(chan struct{})}
}

// Write is called by slog with one whole line at a time, under slog's lock.
func (w *logTap) Write(p []byte) (int, error) {
	line := string(p)
	w.lines <- line
	if !w.held && w.hold != "" && strings.Contains(line, w.hold) {
		w.held = true
		<-w.release
	}
	return len(p), nil
}

// waitLine returns the next line that contains want.
func (w *logTap) waitLine(t *testing.T, want string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line := <-w.lines:
			if strings.Contains(line, want) {
				return line
			}
		case <-timeout:
			t.Fatalf("no log line with %q within 30 s", want)
		}
	}
}

// goroutinesIn returns the stacks of the goroutines, other than the
// caller's, that have a frame whose name contains any of funcs.
func goroutinesIn(funcs ...string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n")[1:] { // [0] is the caller
		for _, f := range funcs {
			if strings.Contains(g, f) {
				found = append(found, g)
				break
			}
		}
	}
	return found
}

// snapshotTaken returns when the snapshot in path was taken.
func snapshotTaken(t *testing.T, path string) int64 {
	t.Helper()
	taken, _, err := snapshot.Read(path, func(shard.Record) {})
	if err != nil {
		t.Fatal(err)
	}
	return taken
}

// TestNoPeriodicSnapshotAfterTheFinalOne holds the shutdown at the moment
// the final snapshot has been written (its log line) for longer than two
// snapshot intervals: if the periodic snapshots were still running then,
// one would replace the final snapshot with an older state, or overlap it.
// The periodic goroutine must have ended before the final snapshot, so
// nothing can land after it. The test stops holding as soon as no
// periodic goroutine is left, so a correct shutdown costs no waiting.
func TestNoPeriodicSnapshotAfterTheFinalOne(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/" + snapshot.FileName
	tap := newLogTap(`msg="snapshot written"`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--metrics-addr=", "--shards", "2",
			"--data-dir", dir, "--snapshot-interval", "1s"}, func(string) string { return "" }, tap)
	}()
	tap.waitLine(t, "msg=listening")
	// The goroutine shows up once scheduled. Seeing it proves the name
	// right, so that its absence below means something.
	for start := time.Now(); len(goroutinesIn("snapshot.(*Keeper).Run(")) != 1; {
		if time.Since(start) > 10*time.Second {
			t.Fatal("no goroutine runs Keeper.Run (was it renamed?)")
		}
		runtime.Gosched()
	}
	cancel()
	tap.waitLine(t, `msg="snapshot written"`) // the final one; its writer is held now
	final := snapshotTaken(t, path)

	// Two intervals and some: on a shutdown that leaves the periodic
	// snapshots running, one lands in this window.
	window := time.NewTimer(2500 * time.Millisecond)
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for waiting := true; waiting; {
		select {
		case <-window.C:
			waiting = false
		case <-poll.C:
			if taken := snapshotTaken(t, path); taken != final {
				close(tap.release)
				<-done
				t.Fatalf("a periodic snapshot (taken %s) replaced the final one (taken %s) after the final one was written",
					time.UnixMicro(taken).UTC().Format(time.RFC3339Nano), time.UnixMicro(final).UTC().Format(time.RFC3339Nano))
			}
			if len(goroutinesIn("snapshot.(*Keeper).Run(")) == 0 {
				waiting = false
			}
		}
	}
	live := goroutinesIn("snapshot.(*Keeper).Run(")
	close(tap.release)
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(live) > 0 {
		t.Fatalf("the periodic snapshots still ran after the final snapshot was written:\n%s", strings.Join(live, "\n\n"))
	}
	if taken := snapshotTaken(t, path); taken != final {
		t.Fatalf("the snapshot on disk after exit (taken %d) is not the final one (taken %d)", taken, final)
	}
}
