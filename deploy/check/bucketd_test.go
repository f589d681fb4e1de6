package check

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is bucketd, built once by TestMain from the repository's
// cmd/bucketd; settings are the flag names its --help lists.
var (
	binary   string
	settings map[string]bool
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bucketd-deploy-check")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		binary = filepath.Join(dir, "bucketd")
		if out, err := exec.Command("go", "-C", "../..", "build", "-o", binary, "./cmd/bucketd").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building bucketd: %v\n%s", err, out)
			return 1
		}
		if settings, err = helpSettings(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

var helpFlag = regexp.MustCompile(`(?m)^  --([a-z-]+) `)

// helpSettings returns the flags `bucketd --help` lists.
func helpSettings() (map[string]bool, error) {
	out, _ := exec.Command(binary, "--help").CombinedOutput() // exits 0; the text says it all
	names := map[string]bool{}
	for _, m := range helpFlag.FindAllStringSubmatch(string(out), -1) {
		names[m[1]] = true
	}
	if len(names) < 10 {
		return nil, fmt.Errorf("bucketd --help lists %d flags:\n%s", len(names), out)
	}
	return names, nil
}

// envSetting returns the flag an environment variable sets (BUCKETD_MAX_BUCKETS:
// max-buckets), and whether bucketd has that setting.
func envSetting(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "BUCKETD_")
	if !ok {
		return "", false
	}
	flag := strings.ToLower(strings.ReplaceAll(rest, "_", "-"))
	return flag, settings[flag]
}

// flagSetting returns the flag of a command-line argument --name=value
// and whether bucketd has it.
func flagSetting(arg string) (string, bool) {
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	return name, strings.HasPrefix(arg, "--") && settings[name]
}

// requireTool finds an outside tool. Under the README's test command
// (BUCKETD_REQUIRE_REDIS=1, which requires every one) a missing tool fails
// the test; under a plain `go test` it skips, saying what to install.
func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found: install the Debian package %s (scripts/test.sh does, as root)", name, pkg)
	if os.Getenv("BUCKETD_REQUIRE_REDIS") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startRedis starts a redis-server on a free loopback port, with password
// pass if not empty, and stops it when the test ends.
func startRedis(t *testing.T, pass string) string {
	t.Helper()
	server := requireTool(t, "redis-server", "redis-server")
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	args := []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir()}
	if pass != "" {
		args = append(args, "--requirepass", pass)
	}
	cmd := exec.Command(server, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // our own child; Wait reaps it
		cmd.Wait()         //nolint:errcheck // killed on purpose
	})
	eventually(t, 10*time.Second, "redis-server answers PING", func() bool {
		c, err := dialRESP(addr)
		if err != nil {
			return false
		}
		defer c.Close()
		if pass != "" {
			c.do("AUTH", pass) //nolint:errcheck // PING says whether it worked
		}
		got, err := c.do("PING")
		return err == nil && got == "+PONG"
	})
	return addr
}

// eventually polls cond every 20 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond) // polling a process of our own; nothing to wait on
	}
}

// respConn is a minimal RESP client: commands out, one-line replies in.
type respConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRESP(addr string) (*respConn, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck // a fresh TCP connection
	return &respConn{Conn: c, r: bufio.NewReader(c)}, nil
}

// do sends a command and returns the reply's first line without its
// CRLF ("+OK", ":1", "-ERR …"); a bulk reply is returned as its contents.
func (c *respConn) do(args ...string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if n, err := strconv.Atoi(strings.TrimPrefix(line, "$")); err == nil && line[0] == '$' && n >= 0 {
		body := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, body); err != nil {
			return "", err
		}
		return string(body[:n]), nil
	}
	return line, nil
}

// process is a bucketd started by a test.
type process struct {
	cmd    *exec.Cmd
	log    *syncBuffer
	exited chan error
}

type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startBucketd runs the binary with exactly args and env (no variable of
// the test's own environment), and kills it when the test ends if it is
// still running.
func startBucketd(t *testing.T, args, env []string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(binary, args...), log: &syncBuffer{}, exited: make(chan error, 1)}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill() //nolint:errcheck // our own child, still running
			<-p.exited
		}
	})
	return p
}

// httpStatus GETs url and returns the status code, 0 when it fails.
func httpStatus(url string) int {
	c := &http.Client{Timeout: 2 * time.Second}
	res, err := c.Get(url)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// serving waits for /healthz and /readyz on metricsAddr, then acquires a
// token over RESP on addr with password pass: what Kubernetes' probes and
// a client do first.
func (p *process) serving(t *testing.T, addr, metricsAddr, pass string) {
	t.Helper()
	eventually(t, 20*time.Second, "/healthz answers 200", func() bool {
		select {
		case err := <-p.exited:
			t.Fatalf("bucketd exited: %v\n%s", err, p.log)
		default:
		}
		return httpStatus("http://"+metricsAddr+"/healthz") == 200
	})
	eventually(t, 20*time.Second, "/readyz answers 200", func() bool {
		return httpStatus("http://"+metricsAddr+"/readyz") == 200
	})
	c, err := dialRESP(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := c.do("TB.ACQUIRE", "deploy-check", "10", "1"); err != nil || !strings.HasPrefix(got, "-NOAUTH") {
		t.Errorf("TB.ACQUIRE before AUTH: %q, %v; want NOAUTH (the password from the Secret is set)", got, err)
	}
	if got, err := c.do("AUTH", pass); err != nil || got != "+OK" {
		t.Fatalf("AUTH with the Secret's password: %q, %v\n%s", got, err, p.log)
	}
	if got, err := c.do("TB.ACQUIRE", "deploy-check", "10", "1"); err != nil || got != ":1" {
		t.Fatalf("TB.ACQUIRE: %q, %v; want :1\n%s", got, err, p.log)
	}
}

// stop sends SIGTERM, as Kubernetes and systemd do, and returns how long
// bucketd took to exit; it must exit 0 within limit.
func (p *process) stop(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		var exit *exec.ExitError
		if errors.As(err, &exit) || err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.log)
		}
	case <-time.After(limit):
		t.Fatalf("no exit within %v of SIGTERM\n%s", limit, p.log)
	}
	return time.Since(start)
}
