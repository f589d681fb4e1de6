package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/testkit"
)

// The signals of issue 10, item 5: SIGHUP during start-up ended the process
// (exit 129, nothing logged), because it was caught only once bucketd
// served. Each test holds a start-up load deterministically and signals
// bucketd in the middle of it:
//
//   - the replicate load: Redis is paused (SIGSTOP), so the load waits for
//     its reply; the URL's read_timeout=1m keeps go-redis waiting instead of
//     giving up after its default 3 s. The test signals once bucketd's
//     connection to Redis is open (/proc/<pid>/net/tcp).
//   - the snapshot load: the snapshot file is a FIFO. bucketd's open of it
//     blocks until the test opens the writing end (which the test polls
//     with O_NONBLOCK: it fails with ENXIO while no reader waits), and its
//     read then blocks until the test closes that end; an empty stream is a
//     truncated snapshot, which --ignore-corrupt-snapshot lets through.

// policyFile writes a config file with the policy api of the given
// capacity and returns its path.
func policyFile(t *testing.T, path string, capacity int) string {
	t.Helper()
	if err := os.WriteFile(path, fmt.Appendf(nil, "policies:\n  api:\n    capacity: %d\n    rate: 0.001\n", capacity), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// socketInodes returns the inodes of the sockets process pid has open.
func socketInodes(pid int) map[string]bool {
	inodes := map[string]bool{}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, _ := os.ReadDir(dir) // a process gone has none
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if ino, ok := strings.CutPrefix(link, "socket:["); ok && err == nil {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	return inodes
}

// connectedTo reports whether process pid has an established TCP
// connection to port on 127.0.0.1.
func connectedTo(pid, port int) bool {
	inodes := socketInodes(pid)
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "01" || !inodes[fields[9]] {
			continue
		}
		_, hexPort, _ := strings.Cut(fields[2], ":")
		if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
			return true
		}
	}
	return false
}

// awaitLogOrExit waits until the process has logged want; it fails the
// test at once when the process exits first, which is what the default
// action of a signal does.
func (p *process) awaitLogOrExit(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !strings.Contains(p.stderr.String(), want) {
		select {
		case err := <-p.exited:
			t.Fatalf("bucketd exited (%v) instead of logging %q:\n%s", err, want, p.stderr)
		case <-deadline:
			t.Fatalf("no log line with %q within 10 s:\n%s", want, p.stderr)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// awaitCleanExit waits (at most 15 s) for the process to exit with status
// 0.
func (p *process) awaitCleanExit(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, p.stderr)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("no exit within 15 s of SIGTERM:\n%s", p.stderr)
	}
}

func (p *process) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%v: %v", sig, err)
	}
}

// startReplicateHeld starts bucketd with --replicate on a paused Redis and
// returns once bucketd's load waits for Redis's reply.
func startReplicateHeld(t *testing.T, args ...string) (*process, <-chan []string, *redistest.Server) {
	t.Helper()
	rs := redistest.Start(t)
	rs.Pause()
	url := "redis://" + rs.Addr + "/0?read_timeout=1m"
	p, listening := launchExecutable(t, binary, append([]string{"--replicate", url}, args...)...)
	pid := p.cmd.Process.Pid
	if !testkit.Poll(20*time.Second, func() bool { return connectedTo(pid, rs.Port) }) {
		t.Fatalf("bucketd never connected to Redis:\n%s", p.stderr)
	}
	return p, listening, rs
}

// awaitListening waits for the "listening" line and fills in the address.
func (p *process) awaitListening(t *testing.T, listening <-chan []string) {
	t.Helper()
	select {
	case m := <-listening:
		p.addr, p.port, p.metrics = m[1], m[2], m[3]
	case err := <-p.exited:
		t.Fatalf("bucketd exited before listening: %v\n%s", err, p.stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("bucketd did not log its address:\n%s", p.stderr)
	}
}

// checkDeferredReload checks that the SIGHUP of the start-up was applied
// once, after "listening", from the file as it was then: the policy api
// has capacity 7.
func (p *process) checkDeferredReload(t *testing.T) {
	t.Helper()
	p.waitLog(t, "configuration reloaded", 0)
	log := p.stderr.String()
	if n := strings.Count(log, "configuration reloaded"); n != 1 {
		t.Fatalf("%d reloads; want the one deferred from start-up:\n%s", n, log)
	}
	if strings.Index(log, "configuration reloaded") < strings.Index(log, "msg=listening") {
		t.Fatalf("the reload ran before bucketd served:\n%s", log)
	}
	v, err := p.client(t).Do(context.Background(), "TB.ACQUIRE", "user", "POLICY", "api", "1", "WITHINFO").Int64Slice()
	if err != nil || v[1] != 6 {
		t.Fatalf("TB.ACQUIRE with the reloaded policy (capacity 7): %v, %v; want 6 remaining", v, err)
	}
}

// TestSIGHUPDuringReplicateLoad: SIGHUPs while the replicate load waits
// are logged and deferred; once bucketd serves, one reload reads the file
// as edited during the start-up.
func TestSIGHUPDuringReplicateLoad(t *testing.T) {
	file := policyFile(t, filepath.Join(t.TempDir(), "bucketd.yaml"), 5)
	p, listening, rs := startReplicateHeld(t, "--config", file)
	policyFile(t, file, 7)
	p.signal(t, syscall.SIGHUP)
	p.awaitLogOrExit(t, "SIGHUP during start-up")
	p.signal(t, syscall.SIGHUP)
	rs.Resume()
	p.awaitListening(t, listening)
	if !strings.Contains(p.stderr.String(), "loaded bucket state from Redis") {
		t.Fatalf("the load did not complete:\n%s", p.stderr)
	}
	p.checkDeferredReload(t)
	p.stop(t)
}

// TestSIGTERMDuringReplicateLoad: SIGTERM while the replicate load waits
// ends the load and the process, at once and cleanly (exit 0, a log line
// that says so), without ever serving.
func TestSIGTERMDuringReplicateLoad(t *testing.T) {
	p, _, _ := startReplicateHeld(t)
	p.signal(t, syscall.SIGTERM)
	p.awaitCleanExit(t)
	log := p.stderr.String()
	if !strings.Contains(log, "start-up interrupted") || strings.Contains(log, "msg=listening") {
		t.Fatalf("want a start-up interrupted line and no listening line:\n%s", log)
	}
}

// startSnapshotHeld starts bucketd with a FIFO as its snapshot and returns
// once bucketd reads from it, with the FIFO's writing end, whose closing
// ends the load.
func startSnapshotHeld(t *testing.T, args ...string) (*process, <-chan []string, *os.File, string) {
	t.Helper()
	dir := t.TempDir()
	snap := filepath.Join(dir, "buckets.snapshot")
	if err := syscall.Mkfifo(snap, 0o600); err != nil {
		t.Fatal(err)
	}
	p, listening := launchExecutable(t, binary, append([]string{"--data-dir", dir, "--ignore-corrupt-snapshot"}, args...)...)
	var w *os.File
	opened := testkit.Poll(20*time.Second, func() bool {
		var err error
		w, err = os.OpenFile(snap, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err != nil && !errors.Is(err, syscall.ENXIO) {
			t.Fatal(err)
		}
		return err == nil
	})
	if !opened {
		t.Fatalf("bucketd never opened its snapshot:\n%s", p.stderr)
	}
	t.Cleanup(func() { w.Close() })
	return p, listening, w, snap
}

// TestSIGHUPDuringSnapshotLoad: as TestSIGHUPDuringReplicateLoad, while the
// snapshot loads.
func TestSIGHUPDuringSnapshotLoad(t *testing.T) {
	file := policyFile(t, filepath.Join(t.TempDir(), "bucketd.yaml"), 5)
	p, listening, w, _ := startSnapshotHeld(t, "--config", file)
	policyFile(t, file, 7)
	p.signal(t, syscall.SIGHUP)
	p.awaitLogOrExit(t, "SIGHUP during start-up")
	w.Close()
	p.awaitListening(t, listening)
	p.checkDeferredReload(t)
	p.stop(t)
}

// TestSIGTERMDuringSnapshotLoad: SIGTERM while the snapshot loads ends
// the process cleanly once the load returns, without serving and without
// writing a snapshot over the one it could not finish loading.
func TestSIGTERMDuringSnapshotLoad(t *testing.T) {
	p, _, w, snap := startSnapshotHeld(t)
	p.signal(t, syscall.SIGTERM)
	p.awaitLogOrExit(t, "signal during start-up")
	// The read of a FIFO cannot be cut short; its end is the load's end.
	w.Close()
	p.awaitCleanExit(t)
	log := p.stderr.String()
	if !strings.Contains(log, "start-up interrupted") || strings.Contains(log, "msg=listening") {
		t.Fatalf("want a start-up interrupted line and no listening line:\n%s", log)
	}
	if fi, err := os.Stat(snap); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the snapshot was replaced after an interrupted start: %v, %v", fi, err)
	}
}

// TestSIGHUPWithoutConfigDuringStartup: without --config, a SIGHUP during
// start-up is ignored with the usual warning, not deferred.
func TestSIGHUPWithoutConfigDuringStartup(t *testing.T) {
	p, listening, w, _ := startSnapshotHeld(t)
	p.signal(t, syscall.SIGHUP)
	p.awaitLogOrExit(t, "SIGHUP ignored: no --config file to reload")
	w.Close()
	p.awaitListening(t, listening)
	p.stop(t)
	if n := strings.Count(p.stderr.String(), "SIGHUP ignored"); n != 1 {
		t.Fatalf("%d warnings for one SIGHUP:\n%s", n, p.stderr)
	}
}
