package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// TestVersion: `bucketd --version` prints the version set at build time
// (-ldflags -X main.version=…, as scripts/build-static.sh does with
// VERSION), "dev" without it, and exits 0.
func TestVersion(t *testing.T) {
	tagged := filepath.Join(t.TempDir(), "bucketd")
	if out, err := exec.Command("go", "build", "-ldflags", "-X main.version=1.2.3-test", "-o", tagged, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	platform := " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	for _, tc := range []struct {
		exe, arg, want string
	}{
		{plain, "--version", "bucketd dev" + platform},
		{tagged, "--version", "bucketd 1.2.3-test" + platform},
		{tagged, "-version", "bucketd 1.2.3-test" + platform},
	} {
		cmd := exec.Command(tc.exe, tc.arg)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %s: %v", filepath.Base(tc.exe), tc.arg, err)
		}
		if string(out) != tc.want {
			t.Errorf("%s %s printed %q, want %q", filepath.Base(tc.exe), tc.arg, out, tc.want)
		}
	}
}
