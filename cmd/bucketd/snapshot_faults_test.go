package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/snapshot"
	"github.com/bucketd/bucketd/internal/testkit"
)

// nobody is the user the file-permission tests run bucketd as when the
// tests run as root, to whom every mode bit allows writing.
const nobody = 65534

// permissionSandbox is where a test can take write permission away from
// bucketd: directories owned by the user bucketd runs as, under a base
// that user can reach, and the executable to start.
type permissionSandbox struct {
	exe  string
	base string
}

// newPermissionSandbox runs bucketd as the tests' own user, or, under
// root, as nobody through a setpriv wrapper (the test binaries' directory
// is root's alone, so the wrapper and a link to the binary live in the
// sandbox).
func newPermissionSandbox(t *testing.T) *permissionSandbox {
	t.Helper()
	base, err := os.MkdirTemp("", "bucketd-perm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	sb := &permissionSandbox{exe: binary, base: base}
	if os.Geteuid() != 0 {
		return sb
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("running as root, the test needs setpriv (util-linux) to run bucketd as another user: %v", err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "bucketd")
	if err := os.Link(binary, bin); err != nil {
		t.Fatal(err)
	}
	sb.exe = filepath.Join(base, "bucketd-as-nobody")
	script := fmt.Sprintf("#!/bin/sh\nexec %s --reuid=%d --regid=%d --clear-groups %s \"$@\"\n", setpriv, nobody, nobody, bin)
	if err := os.WriteFile(sb.exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return sb
}

// dir returns a new data directory bucketd may write to.
func (sb *permissionSandbox) dir(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(sb.base, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.Chmod(dir, 0o700) }) // so that it can be removed
	return dir
}

// TestReadOnlyDataDirIsRefusedAtStart: a data directory bucketd cannot
// write stops the start with a message that names it and says what to
// do, instead of serving and failing every snapshot.
func TestReadOnlyDataDirIsRefusedAtStart(t *testing.T) {
	sb := newPermissionSandbox(t)
	dir := sb.dir(t, "data")
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sb.exe, "--addr", "127.0.0.1:0", "--metrics-addr=", "--data-dir", dir)
	out, err := startUntil(cmd, "msg=listening")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("bucketd with a read-only --data-dir: %v, want exit status 2\n%s", err, out)
	}
	want := "bucketd: --data-dir " + dir + " is not writable, so no snapshot could be saved there ("
	if !strings.Contains(out, want) || !strings.Contains(out, "make it writable for the user bucketd runs as") {
		t.Fatalf("the message does not say which directory and what to do:\n%s", out)
	}
}

// startUntil runs cmd until it exits or its stderr shows a line with
// stopAt (then it is killed, and the error says it was still running). It
// returns the output.
func startUntil(cmd *exec.Cmd, stopAt string) (string, error) {
	var out strings.Builder
	var mu sync.Mutex
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return "", err
	}
	seen := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := pr.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			hit := strings.Contains(out.String(), stopAt)
			mu.Unlock()
			if hit {
				close(seen)
				io.Copy(io.Discard, pr)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); pw.Close() }()
	var err error
	select {
	case err = <-exited:
	case <-seen:
		cmd.Process.Kill()
		<-exited
		err = fmt.Errorf("still running: it logged %q", stopAt)
	}
	mu.Lock()
	defer mu.Unlock()
	return out.String(), err
}

// TestFailedFinalSnapshotExitsNonZero: bucketd runs, its data directory
// turns read-only. Each periodic snapshot fails, and the metrics say so;
// the final one fails too, and the process exits with status 2 and says
// how many buckets were not saved and which older snapshot the next start
// loads. That start loads it and logs its age.
func TestFailedFinalSnapshotExitsNonZero(t *testing.T) {
	testkit.SkipShort(t, "fault injection: a data directory turned read-only, periodic snapshots failing in real time")
	sb := newPermissionSandbox(t)
	dir := sb.dir(t, "data")
	ctx := context.Background()
	start := func() *process {
		return startExecutable(t, sb.exe, "--data-dir", dir, "--snapshot-interval", "1s")
	}
	p1 := start()
	drain1 := p1.client(t)
	if err := drain1.Do(ctx, "TB.ACQUIRE", "first", "5", "0.001", "5").Err(); err != nil {
		t.Fatal(err)
	}
	p1.stop(t)
	earlier, err := snapshot.Taken(filepath.Join(dir, snapshot.FileName))
	if err != nil {
		t.Fatal(err)
	}

	p2 := start()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	c := p2.client(t)
	for _, key := range []string{"second", "third"} {
		if err := c.Do(ctx, "TB.ACQUIRE", key, "5", "0.001", "5").Err(); err != nil {
			t.Fatal(err)
		}
	}
	p2.waitLog(t, `msg="snapshot failed; the previous one stays"`, 0)
	metrics := scrape(t, p2.metrics)
	if !regexp.MustCompile(`(?m)^bucketd_snapshot_failures_total [1-9]`).MatchString(metrics) {
		t.Fatalf("no failure counted:\n%s", metrics)
	}
	last := regexp.MustCompile(`(?m)^bucketd_snapshot_last_success_timestamp_seconds (\S+)$`).FindStringSubmatch(metrics)
	var lastSeconds float64
	if last == nil {
		t.Fatalf("no bucketd_snapshot_last_success_timestamp_seconds:\n%s", metrics)
	}
	fmt.Sscan(last[1], &lastSeconds)
	if lastSeconds < float64(earlier.Unix()) || lastSeconds > float64(time.Now().Unix()) {
		t.Fatalf("last success %v, want a time between the earlier snapshot %v and now", lastSeconds, earlier)
	}

	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	select {
	case err := <-p2.exited:
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Fatalf("exit after a failed final snapshot: %v, want status 2\n%s", err, p2.stderr)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
	wantLine := regexp.MustCompile(`bucketd: final snapshot failed: the state of 3 buckets was not saved to ` + regexp.QuoteMeta(dir) +
		` \(the next start loads the earlier snapshot there, taken [0-9hms]+ ago\): snapshot: `)
	if !wantLine.MatchString(p2.stderr.String()) {
		t.Fatalf("the exit does not say what was lost:\n%s", p2.stderr)
	}

	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p3 := start()
	if !regexp.MustCompile(`msg="loaded snapshot" .* buckets=\d+ read=\d+ evicted=0 clamped=0 limits_capped=0 long_keys=0 age=[0-9hms]+ `).MatchString(p3.stderr.String()) {
		t.Fatalf("the load does not give the snapshot's age:\n%s", p3.stderr)
	}
}

// TestSnapshotStreamsInBoundedMemory: at a million buckets a periodic
// snapshot raises the server's peak RSS (VmHWM, reset just before) by at
// most 10% over its RSS before the snapshot: the snapshot never holds a
// copy of all buckets. A client changes 50,000 of them all the while, so
// the shards keep copies of those for the snapshot's cut (at most 64
// bytes each here, 3 MiB, where a copy of all would be over 60 MiB). A
// kill -9 in the middle of one leaves a temporary file, which the next
// start removes, loading the snapshot before it.
func TestSnapshotStreamsInBoundedMemory(t *testing.T) {
	testkit.SkipShort(t, "memory bound: writes 1,000,000 buckets")
	const buckets = 1_000_000
	dir := t.TempDir()
	ctx := context.Background()
	p1 := startPlainBinary(t, "--data-dir", dir, "--snapshot-interval", "1h")
	fill(t, p1.addr, buckets)
	p1.stop(t)

	// A fresh process loads the million buckets; its first periodic
	// snapshot comes 2 s after it listens.
	p2 := startPlainBinary(t, "--data-dir", dir, "--snapshot-interval", "2s", "--log-level", "debug")
	if n, err := p2.client(t).DBSize(ctx).Result(); err != nil || n != buckets {
		t.Fatalf("DBSIZE %d, %v after the load", n, err)
	}
	pid := p2.cmd.Process.Pid
	stopWriting := changeBuckets(t, p2.addr, buckets, 50_000)
	before := p2.rss(t)
	// Writing 5 to clear_refs resets VmHWM to the current RSS.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
	p2.waitLog(t, `msg="snapshot written"`, 0)
	m, err := testkit.ReadMemory(pid)
	if err != nil {
		t.Fatal(err)
	}
	changed := stopWriting()
	if changed == 0 {
		t.Fatal("the client changed no bucket before the snapshot was written: the copies it costs were not measured")
	}
	t.Logf("%d buckets, %d calls changing 50,000 of them meanwhile: RSS %s before the snapshot, peak %s during it (+%.1f%%)",
		buckets, changed, mib(before), mib(m.HWM), 100*float64(m.HWM-before)/float64(before))
	if m.HWM > before+before/10 {
		t.Fatalf("a snapshot raised the peak RSS from %s to %s, more than 10%%", mib(before), mib(m.HWM))
	}

	// kill -9 while the next snapshot is being written.
	tmp := filepath.Join(dir, snapshot.FileName+".tmp-*")
	testkit.Eventually(t, 30*time.Second, "a snapshot being written", func() bool {
		left, _ := filepath.Glob(tmp)
		return len(left) > 0
	})
	kill9(t, p2)
	if left, _ := filepath.Glob(tmp); len(left) != 1 {
		t.Fatalf("after kill -9 mid-snapshot: temporary files %v, want one", left)
	}
	p3 := startPlainBinary(t, "--data-dir", dir)
	if left, _ := filepath.Glob(tmp); len(left) != 0 {
		t.Fatalf("the next start left %v", left)
	}
	for _, want := range []string{`msg="removed temporary snapshot files a previous run left behind`, "files=1 ",
		`msg="loaded snapshot"`, fmt.Sprintf("buckets=%d ", buckets)} {
		if !strings.Contains(p3.stderr.String(), want) {
			t.Fatalf("no %q in the log:\n%s", want, p3.stderr)
		}
	}
}

// changeBuckets spends from n of the buckets fill created (every
// (total/n)th), over and over, in pipelines of 1,000 from one connection,
// until the returned function is called; that returns how many calls were
// answered.
func changeBuckets(t *testing.T, addr string, total, n int) (stop func() int) {
	t.Helper()
	c := testkit.Dial(t, addr)
	if err := c.SetDeadline(time.Now().Add(5 * time.Minute)); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	var stopped atomic.Bool
	errs := make(chan error, 1)
	var batch strings.Builder
	go func() {
		defer close(errs)
		for i := 0; !stopped.Load(); {
			batch.Reset()
			for range 1000 {
				batch.WriteString(testkit.Command("TB.ACQUIRE", fmt.Sprintf("fill:%011d", i*(total/n)), "10", "0.000001", "1"))
				i = (i + 1) % n
			}
			if _, err := io.WriteString(c.Conn, batch.String()); err != nil {
				errs <- err
				return
			}
			for range 1000 {
				if _, err := c.ReadReply(); err != nil {
					errs <- err
					return
				}
			}
			calls.Add(1000)
		}
	}()
	return func() int {
		stopped.Store(true)
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		return int(calls.Load())
	}
}

// fill creates n drained buckets (16-byte keys) in the server at addr, in
// pipelines of 1,000 from 4 connections.
func fill(t *testing.T, addr string, n int) {
	t.Helper()
	const conns, depth = 4, 1000
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for w := range conns {
		c := testkit.Dial(t, addr)
		if err := c.SetDeadline(time.Now().Add(5 * time.Minute)); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			var batch strings.Builder
			for first := w * depth; first < n; first += conns * depth {
				batch.Reset()
				last := min(first+depth, n)
				for i := first; i < last; i++ {
					batch.WriteString(testkit.Command("TB.ACQUIRE", fmt.Sprintf("fill:%011d", i), "10", "0.000001", "10"))
				}
				if _, err := io.WriteString(c.Conn, batch.String()); err != nil {
					errs <- err
					return
				}
				for i := first; i < last; i++ {
					if r, err := c.ReadReply(); err != nil || r != ":1\r\n" {
						errs <- fmt.Errorf("fill reply %q, %v", r, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
