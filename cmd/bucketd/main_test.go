package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
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

	"github.com/redis/go-redis/v9"
)

// binary is bucketd built with the race detector, for behaviour; plain is
// the same without it, for memory figures the detector would inflate.
// TestMain builds both once. Under -short binary is plain: one link
// instead of two in the inner loop, and the race-detector build of the
// binary is left to the full suite (scripts/test.sh).
var binary, plain string

func TestMain(m *testing.M) {
	flag.Parse() // for testing.Short
	// A race-detector build sleeps a second at exit by default (to let
	// reports of other goroutines through); every start and stop of the
	// binary would pay it. A race still fails the test: the binary exits
	// 66 and the report is in its stderr.
	os.Setenv("GORACE", "atexit_sleep_ms=0") //nolint:errcheck // cannot fail for a valid name
	dir, err := os.MkdirTemp("", "bucketd-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	plain = filepath.Join(dir, "bucketd-plain")
	if out, err := exec.Command("go", "build", "-o", plain, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building bucketd: %v\n%s", err, out)
		os.Exit(1)
	}
	binary = plain
	if !testing.Short() {
		binary = filepath.Join(dir, "bucketd")
		if _, err := exec.Command("go", "build", "-race", "-o", binary, ".").CombinedOutput(); err != nil {
			binary = plain // -race needs cgo; where it is missing, the plain build serves
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireTool finds a Redis tool. Under the README's test command
// (BUCKETD_REQUIRE_REDIS=1) a missing tool fails the test; under a plain
// `go test` it skips with a message that says how to install it.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s not found: install it with `apt-get install -y redis-server redis-tools` (or run scripts/test.sh, which does)", name)
	if os.Getenv("BUCKETD_REQUIRE_REDIS") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// process is a running bucketd binary.
type process struct {
	cmd     *exec.Cmd
	addr    string
	port    string
	metrics string
	stderr  *logBuffer
	exited  chan error
}

// logBuffer collects the binary's log lines; a goroutine writes while the
// test reads.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) WriteString(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.WriteString(s)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var listenLine = regexp.MustCompile(`msg=listening addr=(127\.0\.0\.1:(\d+)).* metrics=(127\.0\.0\.1:\d+)`)

// startBinary runs bucketd on 127.0.0.1:0 and waits for its "listening" log
// line to learn the port.
func startBinary(t *testing.T, args ...string) *process {
	t.Helper()
	return startExecutable(t, binary, args...)
}

// startPlainBinary is startBinary without the race detector.
func startPlainBinary(t *testing.T, args ...string) *process {
	t.Helper()
	return startExecutable(t, plain, args...)
}

func startExecutable(t *testing.T, exe string, args ...string) *process {
	t.Helper()
	p, found := launchExecutable(t, exe, args...)
	select {
	case m := <-found:
		p.addr, p.port, p.metrics = m[1], m[2], m[3]
	case err := <-p.exited:
		t.Fatalf("bucketd exited before listening: %v\n%s", err, p.stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("bucketd did not log its address:\n%s", p.stderr)
	}
	return p
}

// launchExecutable starts exe like startExecutable but does not wait: the
// "listening" line's submatches arrive on found, once.
func launchExecutable(t *testing.T, exe string, args ...string) (p *process, found <-chan []string) {
	t.Helper()
	cmd := exec.Command(exe, append([]string{"--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"}, args...)...)
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p = &process{cmd: cmd, stderr: &logBuffer{}, exited: make(chan error, 1)}
	listening := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			p.stderr.WriteString(line + "\n")
			if m := listenLine.FindStringSubmatch(line); m != nil {
				listening <- m
			}
		}
	}()
	go func() {
		err := cmd.Wait()
		pw.Close()
		p.exited <- err
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.exited
		}
	})
	return p, listening
}

func (p *process) client(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: p.addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// stop sends SIGTERM and waits (at most 15 s) for a clean exit.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, p.stderr)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
}

func TestRedisCLISession(t *testing.T) {
	cli := requireTool(t, "redis-cli")
	p := startBinary(t)
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(cli, append([]string{"-p", p.port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// What the README promises a new user.
	if got := run("--no-raw", "TB.ACQUIRE", "user:1", "10", "1"); got != "(integer) 1" {
		t.Fatalf("redis-cli TB.ACQUIRE = %q, want (integer) 1", got)
	}
	// 6 tokens left; the refill since the first call (a few ms at 1/s)
	// shortens reset_after_ms from 4000 by as many milliseconds.
	got := strings.Split(run("TB.ACQUIRE", "user:1", "10", "1", "3", "WITHINFO"), "\n")
	if len(got) != 4 || got[0] != "1" || got[1] != "6" || got[2] != "0" || got[3] > "4000" || got[3] < "3000" || len(got[3]) != 4 {
		t.Fatalf("WITHINFO = %q, want 1 6 0 and about 4000", got)
	}
	if got := run("--no-raw", "TB.ACQUIRE", "user:1", "abc", "1"); got != "(error) ERR invalid capacity: must be a finite number > 0" {
		t.Fatalf("bad capacity = %q", got)
	}
	if got := run("--no-raw", "DBSIZE"); got != "(integer) 1" {
		t.Fatalf("DBSIZE = %q", got)
	}
	if got := run("INFO", "bucketd"); !strings.Contains(got, "acquire_allowed_total:2") {
		t.Fatalf("INFO bucketd = %q", got)
	}
	// A session typed at the prompt, commands on stdin.
	cmd := exec.Command(cli, "-p", p.port)
	cmd.Stdin = strings.NewReader("PING\ntb.peek fresh 10 1\nTB.RESET user:1 user:1\nnosuch a\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli with stdin: %v\n%s", err, out)
	}
	want := "PONG\n1\n9\n0\n1000\n1\nERR unknown command 'nosuch', with args beginning with: 'a' \n"
	if strings.TrimRight(string(out), "\n") != strings.TrimRight(want, "\n") {
		t.Fatalf("stdin session:\n%q\nwant\n%q", out, want)
	}
}

func TestGoRedisAgainstTheBinary(t *testing.T) {
	p := startBinary(t, "--shards", "8", "--max-key-bytes", "16")
	c := p.client(t)
	ctx := context.Background()
	for i := range 5 {
		v, err := c.Do(ctx, "TB.ACQUIRE", "e2e", 3, 0.001).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(map[bool]int{true: 1, false: 0}[i < 3]); v != want {
			t.Fatalf("acquire %d = %d, want %d", i, v, want)
		}
	}
	if err := c.Do(ctx, "TB.ACQUIRE", strings.Repeat("k", 17), 1, 1).Err(); err == nil || err.Error() != "ERR key too long" {
		t.Fatalf("--max-key-bytes 16 with a 17-byte key: %v", err)
	}
	if info := c.Info(ctx, "bucketd").Val(); !strings.Contains(info, "shards:8\r\n") {
		t.Fatalf("--shards 8 not in effect: %q", info)
	}
}

func TestSignalsShutDownGracefullyWithExitZero(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			p := startBinary(t)
			c := p.client(t)
			if err := c.Ping(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-p.exited:
				if err != nil {
					t.Fatalf("exit after %v: %v\n%s", sig, err, p.stderr)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("no exit 15 s after %v", sig)
			}
			if !strings.Contains(p.stderr.String(), "msg=stopped") {
				t.Fatalf("no 'stopped' log line:\n%s", p.stderr)
			}
		})
	}
}

func TestHelpAndBadFlags(t *testing.T) {
	var help bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, noEnv, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, f := range []string{"--addr", "--shards", "--max-key-bytes", "--max-query-bytes", "--max-args", "--shutdown-timeout",
		"--log-level", "--log-format", "--metrics-addr", "--requirepass", "--tls-cert", "--protected-mode", "--max-clients",
		"--idle-timeout", "--config", "BUCKETD_ADDR", "GOMAXPROCS"} {
		if !strings.Contains(help.String(), f) {
			t.Errorf("--help does not mention %s", f)
		}
	}
	for _, bad := range [][]string{{"--shards", "0"}, {"--max-args", "5"}, {"--log-level", "loud"}, {"--nope"}, {"extra"}} {
		if err := run(context.Background(), bad, noEnv, io.Discard); err == nil || errors.Is(err, flag.ErrHelp) {
			t.Errorf("flags %q: %v", bad, err)
		}
	}
}

// TestHealthcheckHelp: `bucketd --help` lists the healthcheck subcommand,
// `bucketd healthcheck --help` answers its own usage (exit 0, as --help
// does), and a flag it does not know is a usage error, not a URL.
func TestHealthcheckHelp(t *testing.T) {
	var help bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, noEnv, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if !strings.Contains(help.String(), "bucketd healthcheck [URL]") {
		t.Errorf("--help does not list bucketd healthcheck:\n%s", help.String())
	}
	for _, arg := range []string{"--help", "-h", "-help"} {
		var out bytes.Buffer
		err := run(context.Background(), []string{"healthcheck", arg}, noEnv, &out)
		if !errors.Is(err, flag.ErrHelp) || !strings.HasPrefix(out.String(), "Usage: bucketd healthcheck [URL]") {
			t.Errorf("healthcheck %s: %v, printed %q; want flag.ErrHelp and the usage", arg, err, out.String())
		}
	}
	err := run(context.Background(), []string{"healthcheck", "--url", "http://127.0.0.1:1/healthz"}, noEnv, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "usage: bucketd healthcheck [URL]") {
		t.Errorf("healthcheck --url …: %v, want a usage error", err)
	}
}

func noEnv(string) string { return "" }

func TestRunFailsClearlyWhenThePortIsTaken(t *testing.T) {
	p := startBinary(t)
	err := run(context.Background(), []string{"--addr", p.addr, "--metrics-addr="}, noEnv, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--addr") {
		t.Fatalf("second server on %s: %v", p.addr, err)
	}
}
