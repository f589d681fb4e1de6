package clients

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is the bucketd under test: $BUCKETD_BIN, or built by TestMain from
// this repository's cmd/bucketd (with the race detector where cgo allows).
var binary string

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	if binary = os.Getenv("BUCKETD_BIN"); binary != "" {
		return m.Run(), nil
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return 0, err
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "bucketd")); err != nil {
		return 0, fmt.Errorf("no cmd/bucketd in %s: run these tests from clients/go in the bucketd repository, or set BUCKETD_BIN to a bucketd binary", root)
	}
	dir, err := os.MkdirTemp("", "bucketd-clients")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "bucketd")
	build := func(flags ...string) ([]byte, error) {
		args := append([]string{"-C", root, "build"}, flags...)
		return exec.Command("go", append(args, "-o", binary, "./cmd/bucketd")...).CombinedOutput()
	}
	if out, err := build("-race"); err != nil {
		// -race needs cgo; build without it where it is missing.
		if out2, err2 := build(); err2 != nil {
			return 0, fmt.Errorf("building bucketd: %v\n%s\n%s", err2, out, out2)
		}
	}
	return m.Run(), nil
}

// server is a running bucketd.
type server struct {
	addr   string
	cmd    *exec.Cmd
	log    *logBuffer
	exited chan error
}

// logBuffer collects bucketd's log lines, written by one goroutine and read
// by the test.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) add(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.WriteString(line + "\n")
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var listening = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startBucketd runs bucketd on 127.0.0.1:0 with args added, learns its
// address from the "listening" log line, and stops it when the test ends
// (its log is printed if the test failed).
func startBucketd(t *testing.T, args ...string) *server {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"--addr", "127.0.0.1:0", "--metrics-addr", ""}, args...)...)
	// A binary built with -race waits a second at exit by default.
	cmd.Env = append(withoutBucketdEnv(os.Environ()), "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", binary, err)
	}
	s := &server{cmd: cmd, log: &logBuffer{}, exited: make(chan error, 1)}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			s.log.add(sc.Text())
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	go func() {
		err := cmd.Wait()
		pw.Close()
		s.exited <- err
	}()
	t.Cleanup(func() { s.stop(t) })
	select {
	case s.addr = <-found:
	case err := <-s.exited:
		s.exited <- err
		t.Fatalf("bucketd exited before listening: %v\n%s", err, s.log)
	case <-time.After(20 * time.Second):
		t.Fatalf("bucketd did not log its address within 20 s:\n%s", s.log)
	}
	return s
}

// withoutBucketdEnv drops the BUCKETD_ variables (bucketd's own settings,
// and BUCKETD_REQUIRE_REDIS, BUCKETD_BIN) so that only the test's flags
// configure the server.
func withoutBucketdEnv(env []string) []string {
	var kept []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "BUCKETD_") {
			kept = append(kept, kv)
		}
	}
	return kept
}

// stop ends bucketd with SIGTERM, which it must obey within 15 s with a
// clean exit (a data race the detector found makes it exit 66), and prints
// its log if the test failed.
func (s *server) stop(t *testing.T) {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exited:
		if err != nil {
			t.Errorf("bucketd exited with %v after SIGTERM", err)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("bucketd still running 15 s after SIGTERM; killed")
		s.cmd.Process.Kill()
		<-s.exited
	}
	if t.Failed() {
		t.Logf("bucketd log:\n%s", s.log)
	}
}

// require finds a program the test needs. Under the README's test command
// (BUCKETD_REQUIRE_REDIS=1) a missing one fails the test; under a plain
// `go test` it skips, saying how to install it.
func require(t *testing.T, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	need(t, fmt.Sprintf("%s not found: %s (or run scripts/test.sh as root, which does)", name, install))
	return ""
}

// need fails the test under BUCKETD_REQUIRE_REDIS=1, and skips it otherwise.
func need(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("BUCKETD_REQUIRE_REDIS") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
