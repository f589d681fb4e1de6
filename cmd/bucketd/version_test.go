package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/bucketd/bucketd/internal/testkit"
)

// platform is what `bucketd --version` prints after the version.
var platform = " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"

// TestVersionWithoutStamp: a build without -ldflags -X main.version says
// it is "dev".
func TestVersionWithoutStamp(t *testing.T) {
	out, err := exec.Command(plain, "--version").Output()
	if err != nil {
		t.Fatalf("bucketd --version: %v", err)
	}
	if want := "bucketd dev" + platform; string(out) != want {
		t.Errorf("bucketd --version printed %q, want %q", out, want)
	}
}

// TestVersion: `bucketd --version` prints the version set at build time
// (-ldflags -X main.version=…, as scripts/build-static.sh does with
// VERSION) and exits 0, whatever other flags come with it.
func TestVersion(t *testing.T) {
	testkit.SkipShort(t, "a build of its own with -ldflags")
	t.Parallel() // its own build of bucketd runs beside the other tests
	tagged := filepath.Join(t.TempDir(), "bucketd")
	if out, err := exec.Command("go", "build", "-ldflags", "-X main.version=1.2.3-test", "-o", tagged, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"--version"},
		{"-version"},
		{"--addr", "127.0.0.1:1", "--version", "--data-dir=/nonexistent"},
	} {
		out, err := exec.Command(tagged, args...).Output()
		if err != nil {
			t.Fatalf("bucketd %v: %v", args, err)
		}
		if want := "bucketd 1.2.3-test" + platform; string(out) != want {
			t.Errorf("bucketd %v printed %q, want %q", args, out, want)
		}
	}
}
