package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// TestVersion: `bucketd --version` prints the version set at build time
// (-ldflags -X main.version=…, as scripts/build-static.sh does with
// VERSION), "dev" without it, and exits 0, whatever other flags come with
// it.
func TestVersion(t *testing.T) {
	t.Parallel() // its own build of bucketd runs beside the other tests
	tagged := filepath.Join(t.TempDir(), "bucketd")
	if out, err := exec.Command("go", "build", "-ldflags", "-X main.version=1.2.3-test", "-o", tagged, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	platform := " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	for _, tc := range []struct {
		exe  string
		args []string
		want string
	}{
		{plain, []string{"--version"}, "bucketd dev" + platform},
		{tagged, []string{"--version"}, "bucketd 1.2.3-test" + platform},
		{tagged, []string{"-version"}, "bucketd 1.2.3-test" + platform},
		{tagged, []string{"--addr", "127.0.0.1:1", "--version", "--data-dir=/nonexistent"}, "bucketd 1.2.3-test" + platform},
	} {
		out, err := exec.Command(tc.exe, tc.args...).Output()
		if err != nil {
			t.Fatalf("%s %v: %v", filepath.Base(tc.exe), tc.args, err)
		}
		if string(out) != tc.want {
			t.Errorf("%s %v printed %q, want %q", filepath.Base(tc.exe), tc.args, out, tc.want)
		}
	}
}
