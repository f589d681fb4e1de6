package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/testkit"
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
