package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/testcert"
	"github.com/bucketd/bucketd/internal/testkit"
)

// waitLog waits until the binary has logged more than after lines
// containing want.
func (p *process) waitLog(t *testing.T, want string, after int) {
	t.Helper()
	if !testkit.Poll(10*time.Second, func() bool { return strings.Count(p.stderr.String(), want) > after }) {
		t.Fatalf("no log line with %q:\n%s", want, p.stderr)
	}
}

// TestSIGHUPReloadsPolicies: a policy's capacity changes in the file, SIGHUP,
// and the next TB.ACQUIRE on the same connection obeys it; a broken file
// leaves the old policy in force.
func TestSIGHUPReloadsPolicies(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bucketd.yaml")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("policies:\n  api:\n    capacity: 10\n    rate: 0.001\n")
	p := startBinary(t, "--config", file)
	c := p.client(t)
	ctx := context.Background()
	acquire := func() []int64 {
		t.Helper()
		v, err := c.Do(ctx, "TB.ACQUIRE", "user", "POLICY", "api", "1", "WITHINFO").Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := acquire(); got[1] != 9 {
		t.Fatalf("capacity 10: remaining %d", got[1])
	}
	write("policies:\n  api:\n    capacity: 3\n    rate: 0.001\n")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "configuration reloaded", 0)
	if got := acquire(); got[1] != 2 { // 9 tokens clamped to 3, one taken
		t.Fatalf("after reload to capacity 3: remaining %d, want 2", got[1])
	}
	write("policies:\n  api:\n    capacity: -1\n")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "configuration reload failed", 0)
	if got := acquire(); got[1] != 1 {
		t.Fatalf("after a broken reload: remaining %d, want 1 (old policy in force)", got[1])
	}
	// CONFIG RELOAD does the same from a client.
	write("policies:\n  api:\n    capacity: 100\n    rate: 0.001\n")
	if err := c.Do(ctx, "CONFIG", "RELOAD").Err(); err != nil {
		t.Fatal(err)
	}
	if got := acquire(); got[1] != 0 {
		t.Fatalf("after CONFIG RELOAD: remaining %d, want 0 (1 token left, bigger capacity adds none)", got[1])
	}
}

// TestRedisCLIWithTLSAndPassword: redis-cli --tls and -a sessions;
// unauthenticated commands get -NOAUTH.
func TestRedisCLIWithTLSAndPassword(t *testing.T) {
	cli := requireTool(t, "redis-cli")
	dir := t.TempDir()
	cert, key := testcert.WriteFiles(t, dir, "server")
	ccert, ckey := testcert.WriteFiles(t, dir, "client")
	t.Run("tls and password", func(t *testing.T) {
		p := startBinary(t, "--tls-cert", cert, "--tls-key", key, "--requirepass", "hunter2")
		redisCLI := func(args ...string) string {
			out, _ := exec.Command(cli, append([]string{"--tls", "--cacert", cert, "-h", "127.0.0.1", "-p", p.port}, args...)...).CombinedOutput()
			return strings.TrimSpace(string(out))
		}
		if got := redisCLI("TB.ACQUIRE", "k", "10", "1"); !strings.Contains(got, "NOAUTH Authentication required.") {
			t.Fatalf("without -a: %q", got)
		}
		if got := redisCLI("-a", "hunter2", "--no-auth-warning", "TB.ACQUIRE", "k", "10", "1"); got != "1" {
			t.Fatalf("with -a: %q", got)
		}
		if got := redisCLI("-a", "wrong", "--no-auth-warning", "PING"); !strings.Contains(got, "WRONGPASS") {
			t.Fatalf("wrong password: %q", got)
		}
		// Plain TCP to the TLS port gets nothing useful.
		out, _ := exec.Command(cli, "-h", "127.0.0.1", "-p", p.port, "-a", "hunter2", "--no-auth-warning", "PING").CombinedOutput()
		if strings.TrimSpace(string(out)) == "PONG" {
			t.Fatal("plaintext PING answered on the TLS port")
		}
	})
	t.Run("mutual tls", func(t *testing.T) {
		p := startBinary(t, "--tls-cert", cert, "--tls-key", key, "--tls-ca-cert", ccert)
		base := []string{"--tls", "--cacert", cert, "-h", "127.0.0.1", "-p", p.port}
		out, _ := exec.Command(cli, append(base, "--cert", ccert, "--key", ckey, "PING")...).CombinedOutput()
		if strings.TrimSpace(string(out)) != "PONG" {
			t.Fatalf("with a client certificate: %q", out)
		}
		out, _ = exec.Command(cli, append(base, "PING")...).CombinedOutput()
		if strings.TrimSpace(string(out)) == "PONG" {
			t.Fatal("mutual TLS let in a client without a certificate")
		}
	})
}

// TestMetricsHealthAndHealthcheck: /metrics after known commands, /healthz,
// /readyz, and the healthcheck subcommand the Dockerfile uses.
func TestMetricsHealthAndHealthcheck(t *testing.T) {
	p := startBinary(t)
	c := p.client(t)
	ctx := context.Background()
	for range 3 {
		c.Do(ctx, "TB.ACQUIRE", "m", "2", "0.001")
	}
	get := func(path string) (int, string) {
		t.Helper()
		res, err := http.Get("http://" + p.metrics + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	code, body := get("/metrics")
	for _, want := range []string{
		`bucketd_decisions_total{policy="",result="allowed"} 2`,
		`bucketd_decisions_total{policy="",result="denied"} 1`,
		`bucketd_commands_total{command="tb.acquire"} 3`,
		`bucketd_buckets 1`,
		"bucketd_command_duration_seconds_bucket",
		"go_goroutines",
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("/metrics (%d) lacks %q", code, want)
		}
	}
	if code, body := get("/healthz"); code != 200 || !strings.HasPrefix(body, "ok") {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, body := get("/readyz"); code != 200 || !strings.HasPrefix(body, "ready") {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	if err := run(ctx, []string{"healthcheck", "http://" + p.metrics + "/healthz"}, noEnv, io.Discard); err != nil {
		t.Fatalf("healthcheck: %v", err)
	}
	env := func(k string) string {
		if k == "BUCKETD_METRICS_ADDR" {
			return p.metrics
		}
		return ""
	}
	if err := run(ctx, []string{"healthcheck"}, env, io.Discard); err != nil {
		t.Fatalf("healthcheck from BUCKETD_METRICS_ADDR: %v", err)
	}
	if err := run(ctx, []string{"healthcheck", "http://127.0.0.1:1/healthz"}, noEnv, io.Discard); err == nil {
		t.Fatal("healthcheck of a dead address succeeded")
	}
}

// TestEnvironmentConfiguresTheBinary: BUCKETD_* variables reach the server.
func TestEnvironmentConfiguresTheBinary(t *testing.T) {
	t.Setenv("BUCKETD_REQUIREPASS", "envpass")
	p := startBinary(t)
	c := p.client(t)
	if err := c.Ping(context.Background()).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("BUCKETD_REQUIREPASS not in effect: %v", err)
	}
}

// TestProfilingIsOptIn: the metrics server serves no profiles by default;
// with --pprof it serves a heap profile (a gzipped protobuf, as go tool
// pprof reads it) beside /metrics.
func TestProfilingIsOptIn(t *testing.T) {
	off := startBinary(t)
	if code, body := httpGet(t, "http://"+off.metrics+"/debug/pprof/heap"); code != http.StatusNotFound {
		t.Errorf("without --pprof: /debug/pprof/heap = %d %.40q, want 404", code, body)
	}
	on := startBinary(t, "--pprof")
	if code, body := httpGet(t, "http://"+on.metrics+"/debug/pprof/heap"); code != http.StatusOK || !strings.HasPrefix(body, "\x1f\x8b") {
		t.Errorf("with --pprof: /debug/pprof/heap = %d %.40q, want 200 and a gzipped profile", code, body)
	}
	if code, _ := httpGet(t, "http://"+on.metrics+"/metrics"); code != http.StatusOK {
		t.Errorf("with --pprof: /metrics = %d", code)
	}
}
