package config

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

const storeModeConflict = "--data-dir and --max-buckets apply to buckets kept in memory; in store mode (--store, --store-cluster) Redis keeps them: drop those flags"

// TestStoreModeExcludesMemorySettings: --data-dir and --max-buckets
// configure buckets kept in memory, so store mode refuses them, from any
// source, with the same words as before the check moved here from main.
func TestStoreModeExcludesMemorySettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		file string
	}{
		{name: "store and data-dir", args: []string{"--store", "redis://h", "--data-dir", "/tmp/x"}},
		{name: "store and max-buckets", args: []string{"--store", "redis://h", "--max-buckets", "10"}},
		{name: "store-cluster and data-dir", env: map[string]string{"BUCKETD_STORE_CLUSTER": "h:7000", "BUCKETD_DATA_DIR": "/tmp/x"}},
		{name: "store-cluster and max-buckets from the file", args: []string{"--store-cluster", "h:7000"}, file: "max-buckets: 5\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append([]string{"--config", writeFile(t, tc.file)}, args...)
			}
			_, err := Load(args, envOf(tc.env), io.Discard)
			if err == nil || err.Error() != storeModeConflict {
				t.Fatalf("error %v, want %q", err, storeModeConflict)
			}
		})
	}
	for _, ok := range [][]string{
		{"--store", "redis://h", "--max-buckets", "0"},
		{"--data-dir", "/tmp/x", "--max-buckets", "10"},
		{"--replicate", "redis://h", "--data-dir", "/tmp/x", "--max-buckets", "10"},
	} {
		if _, err := Load(ok, nil, io.Discard); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

// TestReloadIntoStoreModeConflictKeepsRunning: a reloaded file that would
// add data-dir to a store-mode bucketd is refused as a whole, like every
// other invalid file, and the running configuration stays.
func TestReloadIntoStoreModeConflictKeepsRunning(t *testing.T) {
	path := writeFile(t, "max-buckets: 0\n")
	c, err := Load([]string{"--config", path, "--store", "redis://h"}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("data-dir: /tmp/x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	next, _, err := c.Reload(nil)
	if err == nil || err.Error() != storeModeConflict {
		t.Fatalf("reload: %v, want %q", err, storeModeConflict)
	}
	if next.DataDir != "" || !next.StoreMode() {
		t.Fatalf("reload changed the running configuration: data-dir %q, store mode %v", next.DataDir, next.StoreMode())
	}
}

func TestStoreMode(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--replicate", "redis://h"}, false},
		{[]string{"--store", "redis://h"}, true},
		{[]string{"--store-cluster", "a:1,b:2"}, true},
	} {
		c, err := Load(tc.args, nil, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if c.StoreMode() != tc.want {
			t.Errorf("%q: StoreMode %v, want %v", tc.args, c.StoreMode(), tc.want)
		}
	}
}

// TestLeases: lease mode needs store mode, its settings are checked, and
// its TTL must leave room for a reply that takes redis-timeout.
func TestLeases(t *testing.T) {
	c, err := Load([]string{"--store", "redis://127.0.0.1:6379", "--leases", "--lease-target", "200ms", "--lease-max-share", "0.25", "--lease-ttl", "3s"}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Leases || c.LeaseTarget != 200*time.Millisecond || c.LeaseMaxShare != 0.25 || c.LeaseTTL != 3*time.Second {
		t.Fatalf("lease settings %v %v %v %v", c.Leases, c.LeaseTarget, c.LeaseMaxShare, c.LeaseTTL)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--leases"}, "needs store mode"},
		{[]string{"--store", "redis://127.0.0.1:6379", "--leases", "--lease-max-share", "0"}, "above 0 and at most 1"},
		{[]string{"--store", "redis://127.0.0.1:6379", "--leases", "--lease-max-share", "1.5"}, "above 0 and at most 1"},
		{[]string{"--store", "redis://127.0.0.1:6379", "--leases", "--lease-ttl", "50ms"}, "at least 100ms"},
		{[]string{"--store", "redis://127.0.0.1:6379", "--leases", "--redis-timeout", "1s"}, "at least four times redis-timeout"},
	} {
		_, err := Load(tc.args, nil, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}
