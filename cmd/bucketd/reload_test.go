package main

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/config"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/redis/go-redis/v9"
)

const apiPolicy = "policies:\n  api:\n    capacity: 1000000\n    rate: 1000000\n"

func writeConfig(t *testing.T, content string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "bucketd.yaml")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

var reloadedLine = regexp.MustCompile(`msg="configuration reloaded" [^\n]*`)

// reloadsLogged returns the "configuration reloaded" lines in log and the
// reloads they account for: each line is one, plus its suppressed.
func reloadsLogged(log string) (lines, reloads int) {
	for _, l := range reloadedLine.FindAllString(log, -1) {
		lines++
		reloads++
		if m := regexp.MustCompile(` suppressed=(\d+)`).FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			reloads += n
		}
	}
	return lines, reloads
}

// TestConfigReloadLogsALineASecond: pipelined CONFIG RELOADs, as fast as
// a client can send them, write at most about a line a second while they
// last, and one more afterwards that counts the rest: the log is never
// one line per command, and no reload goes uncounted.
func TestConfigReloadLogsALineASecond(t *testing.T) {
	p := startBinary(t, "--config", writeConfig(t, apiPolicy))
	c := p.client(t)
	ctx := context.Background()
	const n = 5000
	start := time.Now()
	pipe := c.Pipeline()
	for range n {
		pipe.Do(ctx, "CONFIG", "RELOAD")
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			t.Fatalf("CONFIG RELOAD: %v", err)
		}
	}
	testkit.Eventually(t, 5*time.Second, "log lines that account for every reload", func() bool {
		_, reloads := reloadsLogged(p.stderr.String())
		return reloads == n
	})
	lines, _ := reloadsLogged(p.stderr.String())
	t.Logf("%d reloads in %v: %d log lines", n, took, lines)
	if most := int(took/time.Second) + 2; lines > most {
		t.Fatalf("%d reloads in %v wrote %d lines, want at most %d (a line a second, and the summary):\n%s",
			n, took, lines, most, strings.Join(reloadedLine.FindAllString(p.stderr.String(), 5), "\n"))
	}
}

// TestReloadRacingANonAtomicRewrite: a file rewritten in place (truncated,
// then written, here in two writes cut at a random byte, as `cat new >
// bucketd.yaml` or an editor without atomic save does) while reloads run
// back to back and clients call the policy: a reload that reads the file
// empty or cut short never takes the policy away, so no call gets
// `unknown policy`.
func TestReloadRacingANonAtomicRewrite(t *testing.T) {
	const content = "log-level: info\npolicies:\n  api:\n    capacity: 1000000\n    rate: 1000000\n"
	file := writeConfig(t, content)
	p := startBinary(t, "--config", file)
	ctx := context.Background()
	c := p.client(t)
	call := func(c *redis.Client) error { return c.Do(ctx, "TB.ACQUIRE", "k", "POLICY", "api").Err() }
	if err := call(c); err != nil {
		t.Fatal(err)
	}

	done := make(chan struct{})
	var rewrites, reloads, refused, unknown, calls atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() { // the writer
		defer close(done)
		rng := rand.New(rand.NewPCG(1, 2))
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && rewrites.Load() < 5000; {
			f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				t.Error(err)
				return
			}
			cut := rng.IntN(len(content) + 1)
			f.WriteString(content[:cut])
			runtime.Gosched() // let a reload read the half-written file
			f.WriteString(content[cut:])
			f.Close()
			rewrites.Add(1)
		}
	})
	wg.Go(func() { // the reloads
		rc := p.client(t)
		for {
			select {
			case <-done:
				return
			default:
			}
			err := rc.Do(ctx, "CONFIG", "RELOAD").Err()
			reloads.Add(1)
			if err != nil {
				refused.Add(1)
			}
		}
	})
	for range 2 { // the clients
		wg.Go(func() {
			cc := p.client(t)
			for {
				select {
				case <-done:
					return
				default:
				}
				err := call(cc)
				calls.Add(1)
				if err != nil && strings.Contains(err.Error(), "unknown policy") {
					unknown.Add(1)
				} else if err != nil {
					t.Errorf("TB.ACQUIRE: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d rewrites, %d reloads (%d refused or failed), %d calls, %d unknown policy",
		rewrites.Load(), reloads.Load(), refused.Load(), calls.Load(), unknown.Load())
	if reloads.Load() < 100 || refused.Load() == 0 || refused.Load() == reloads.Load() {
		t.Fatalf("%d reloads, %d of them refused or failed: the race was not run (want at least 100, some of them applied, some not)",
			reloads.Load(), refused.Load())
	}
	if unknown.Load() != 0 {
		t.Fatalf("%d of %d calls got unknown policy: a reload of a half-written file removed the policy", unknown.Load(), calls.Load())
	}
	if err := call(c); err != nil { // the file is whole again: so is the policy
		t.Fatal(err)
	}
}

// TestReloadWarnsWhenItRemovesPoliciesInUse: a reload that removes a
// policy calls used since the last reload, or removes every policy, says
// so at WARN with the names; removing one nobody used since is no warning.
func TestReloadWarnsWhenItRemovesPoliciesInUse(t *testing.T) {
	file := writeConfig(t, "policies:\n  api: {rate: 10/second}\n  web: {rate: 10/second}\n  old: {rate: 10/second}\n")
	p := startBinary(t, "--config", file)
	c := p.client(t)
	ctx := context.Background()
	replace := func(content string) { // atomically, as the docs say
		t.Helper()
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
		if err := c.Do(ctx, "CONFIG", "RELOAD").Err(); err != nil {
			t.Fatalf("CONFIG RELOAD: %v", err)
		}
	}
	const warn = `level=WARN msg="reload removed policies in use; calls naming them now get ERR unknown policy"`
	if err := c.Do(ctx, "TB.ACQUIRE", "k", "POLICY", "api").Err(); err != nil {
		t.Fatal(err)
	}
	replace("policies:\n  web: {rate: 10/second}\n")
	p.waitLog(t, warn, 0)
	if !strings.Contains(p.stderr.String(), warn+" file="+file+" removed=api,old used=api policies=1 ") {
		t.Fatalf("the warning does not name api as used and api, old as removed:\n%s", p.stderr)
	}
	replace("policies:\n  web: {rate: 10/second}\n  new: {rate: 10/second}\n") // adds one, removes none
	replace("reload-allow-empty: true\n")                                      // web, unused since, goes with every other
	p.waitLog(t, warn, 1)
	if !strings.Contains(p.stderr.String(), warn+" file="+file+" removed=new,web used=\"\" policies=0 ") {
		t.Fatalf("the warning does not say every policy was removed:\n%s", p.stderr)
	}
	if n := strings.Count(p.stderr.String(), warn); n != 2 {
		t.Fatalf("%d warnings, want 2 (the reload that removed nothing warns of nothing)", n)
	}
}

// TestReloadListsSettingsThatNeedARestart: apply, on the real buckets and
// protocol server, applies policies and the log level at once and returns
// the other changed settings of the file, in --help order, on every
// reload until the restart; a setting a flag holds is not reported (the
// flag still wins); a broken file returns an error and no list.
func TestReloadListsSettingsThatNeedARestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bucketd.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("max-clients: 100\nidle-timeout: 1m\nshards: 2\nlog-level: info\npolicies:\n  api:\n    capacity: 10\n    rate: 1\n")
	cfg, err := config.Load([]string{"--config", file, "--addr", "127.0.0.1:0", "--metrics-addr=", "--shards", "2"}, noEnv, nil)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	level := new(slog.LevelVar)
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: level}))
	md, err := openMode(context.Background(), cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer md.close()
	rl := &reloader{current: cfg, file: cfg.File, level: level, logger: logger, getenv: noEnv}
	if _, err := newDaemon(cfg, nil, md, rl, logger); err != nil {
		t.Fatal(err)
	}

	restart, err := rl.apply()
	if err != nil || restart != nil {
		t.Fatalf("unchanged file: %v, %v; want no error and nothing to restart", restart, err)
	}
	// shards changes in the file too, but --shards holds it.
	write("idle-timeout: 5m\nmax-clients: 200\nshards: 8\nlog-level: debug\npolicies:\n  api:\n    capacity: 20\n    rate: 1\n")
	for range 2 {
		restart, err = rl.apply()
		if err != nil || !slices.Equal(restart, []string{"max-clients", "idle-timeout"}) {
			t.Fatalf("changed file: %v, %v; want [max-clients idle-timeout] in --help order", restart, err)
		}
	}
	if level.Level() != slog.LevelDebug || rl.current.Policies["api"].Limits[0].Capacity != 20 {
		t.Errorf("live settings not applied: level %v, policy %+v", level.Level(), rl.current.Policies["api"])
	}
	write("max-clients: lots\n")
	if restart, err = rl.apply(); err == nil || restart != nil {
		t.Errorf("broken file: %v, %v; want an error and no list", restart, err)
	}
}

// TestSlowlogSettingsReloadLive: slowlog-log-slower-than and
// slowlog-max-len come from the file, CONFIG GET shows them, and a reload
// (CONFIG RELOAD, and SIGHUP) applies new values at once: the log starts
// taking every command, and keeps at most the new length.
func TestSlowlogSettingsReloadLive(t *testing.T) {
	file := writeConfig(t, apiPolicy+"slowlog-log-slower-than: -1\nslowlog-max-len: 5\n")
	p := startBinary(t, "--config", file)
	c := p.client(t)
	ctx := context.Background()
	get := func() map[string]string {
		t.Helper()
		m, err := c.ConfigGet(ctx, "slowlog*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := get(); m["slowlog-log-slower-than"] != "-1" || m["slowlog-max-len"] != "5" {
		t.Fatalf("CONFIG GET at start: %v", m)
	}
	for range 3 {
		c.Ping(ctx)
	}
	if n, _ := c.Do(ctx, "SLOWLOG", "LEN").Int(); n != 0 {
		t.Fatalf("SLOWLOG LEN %d with the log off", n)
	}
	rewrite := func(content string) {
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rewrite(apiPolicy + "slowlog-log-slower-than: 0\nslowlog-max-len: 2\n")
	if err := c.Do(ctx, "CONFIG", "RELOAD").Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c.Ping(ctx)
	}
	if n, _ := c.Do(ctx, "SLOWLOG", "LEN").Int(); n != 2 {
		t.Errorf("SLOWLOG LEN %d after the reload, want max-len 2", n)
	}
	rewrite(apiPolicy + "slowlog-log-slower-than: 123\nslowlog-max-len: 7\n")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "SIGHUP to apply the slowlog settings", func() bool {
		m := get()
		return m["slowlog-log-slower-than"] == "123" && m["slowlog-max-len"] == "7"
	})
}
