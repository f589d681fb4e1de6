package command_test

import (
	"github.com/bucketd/bucketd/internal/policy"

	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/bucketd/bucketd/internal/config"
)

// loadPolicies reads policies from a config file holding yaml, as bucketd
// reads them at start.
func loadPolicies(t testing.TB, yaml string) map[string]policy.Policy {
	t.Helper()
	file := filepath.Join(t.TempDir(), "bucketd.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load([]string{"--config", file}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Policies
}
