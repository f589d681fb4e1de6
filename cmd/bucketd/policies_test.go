package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Policies with several limits, and shadow policies, are read and checked
// by config, but the protocol serves neither yet: bucketd refuses them at
// start, and a reload that brings one is refused as a whole, the running
// policies staying in force.
const (
	multiLimitPolicy = "policies:\n  llm:\n    limits: [{rate: 10/second}, {rate: 1000/day}]\n"
	shadowPolicy     = "policies:\n  api: {capacity: 10, rate: 0.001, shadow: true}\n"
)

func TestMultiLimitAndShadowPoliciesRefusedAtStart(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{multiLimitPolicy, `policy "llm" has 2 limits, and this bucketd serves policies of one limit only: keep one limit (capacity and rate) in it`},
		{shadowPolicy, `policy "api" is a shadow policy, and this bucketd does not serve shadow policies yet: drop shadow: true from it`},
	} {
		file := filepath.Join(t.TempDir(), "bucketd.yaml")
		if err := os.WriteFile(file, []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		err := run(context.Background(), []string{"--config", file, "--addr", "127.0.0.1:0", "--metrics-addr="}, noEnv, io.Discard)
		if want := "config file " + file + ": " + tc.want; err == nil || err.Error() != want {
			t.Errorf("start with\n%s: error %v\nwant %s", tc.file, err, want)
		}
	}
}

func TestMultiLimitAndShadowPoliciesRefusedAtReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bucketd.yaml")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("policies:\n  api: {capacity: 10, rate: 0.001}\n")
	p := startBinary(t, "--config", file)
	c := p.client(t)
	ctx := context.Background()
	remaining := func() int64 {
		t.Helper()
		v, err := c.Do(ctx, "TB.ACQUIRE", "user", "POLICY", "api", "1", "WITHINFO").Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return v[1]
	}
	if got := remaining(); got != 9 {
		t.Fatalf("capacity 10: remaining %d", got)
	}
	for i, tc := range []struct{ file, want string }{
		{multiLimitPolicy + "  api: {capacity: 3, rate: 0.001}\n", `policy "llm" has 2 limits`},
		{shadowPolicy, `policy "api" is a shadow policy`},
	} {
		write(tc.file)
		err := c.Do(ctx, "CONFIG", "RELOAD").Err()
		if want := "ERR reload failed, the running configuration stays: config file " + file + ": " + tc.want; err == nil ||
			!strings.HasPrefix(err.Error(), want) {
			t.Errorf("CONFIG RELOAD of\n%s: %v\nwant %s…", tc.file, err, want)
		}
		p.waitLog(t, "configuration reload failed", i)
		if got := remaining(); got != int64(8-i) {
			t.Fatalf("after a refused reload: remaining %d, want %d (capacity 10 still)", got, 8-i)
		}
	}
}
