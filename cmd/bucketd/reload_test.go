package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/bucketd/bucketd/internal/config"
)

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
	b, err := openBuckets(context.Background(), cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	rl := &reloader{current: cfg, file: cfg.File, level: level, logger: logger, getenv: noEnv}
	if _, err := newDaemon(cfg, nil, b, rl, logger); err != nil {
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
