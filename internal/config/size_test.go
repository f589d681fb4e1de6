//go:build unix

package config

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loadBounded runs fn, failing the test when it has not returned within
// 10 s: a config file that is a FIFO or a device must not hang the start.
// The bound is a liveness check, not a speed figure.
func loadBounded(t *testing.T, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return within 10 s", what)
		return nil
	}
}

// comments returns a YAML file of n bytes that holds only comments.
func comments(n int) string {
	line := "# " + strings.Repeat("x", 61) + "\n" // 64 bytes
	s := strings.Repeat(line, n/len(line)+1)
	return s[:n-1] + "\n"
}

// fifo makes a named pipe in a temporary directory. The cleanup opens it
// for writing without blocking, so that a reader the code under test left
// waiting on it (the unchanged code did) gets EOF and ends.
func fifo(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bucketd.yaml")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	return path
}

// TestConfigFileSizeLimit (issue 10, item 9): the config file is read with
// a bound. A file larger than MaxFileBytes, a device such as /dev/zero (read
// without end, the unchanged code ran out of memory) and a FIFO (opening
// it blocked the start until a writer came) are refused with an error that
// names the file and says what is wrong, at start and at a reload; a file
// of exactly MaxFileBytes is read.
func TestConfigFileSizeLimit(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte(comments(MaxFileBytes+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	pipe := fifo(t)
	for _, tc := range []struct {
		name, path string
		want       []string
	}{
		{"larger than the limit", big, []string{big, "1048577 bytes", "limit of 1048576 bytes"}},
		{"/dev/zero", "/dev/zero", []string{"/dev/zero", "not a regular file", "character device"}},
		{"fifo", pipe, []string{pipe, "not a regular file", "named pipe"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := loadBounded(t, "Load", func() error {
				_, err := Load([]string{"--config", tc.path}, nil, io.Discard)
				return err
			})
			if err == nil {
				t.Fatalf("Load of %s succeeded; want an error", tc.path)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}

	t.Run("exactly the limit", func(t *testing.T) {
		c := mustLoad(t, []string{"--config", writeFile(t, comments(MaxFileBytes))}, nil)
		if len(c.Policies) != 0 {
			t.Fatalf("policies %v", c.Policies)
		}
	})

	t.Run("reload", func(t *testing.T) {
		dir := t.TempDir()
		file := filepath.Join(dir, "bucketd.yaml")
		if err := os.WriteFile(file, []byte("policies:\n  api: {capacity: 10, rate: 1}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c := mustLoad(t, []string{"--config", file}, nil)
		for _, replace := range []string{big, "/dev/zero", pipe} {
			if err := os.Remove(file); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(replace, file); err != nil {
				t.Fatal(err)
			}
			var next Config
			err := loadBounded(t, "Reload", func() error {
				var err error
				next, _, err = c.Reload(nil)
				return err
			})
			if err == nil || !strings.Contains(err.Error(), file) {
				t.Fatalf("Reload with the file replaced by %s: %v; want an error naming %s", replace, err, file)
			}
			if next.Policies["api"].Limits[0].Capacity != 10 {
				t.Fatalf("a refused reload changed the policies: %v", next.Policies)
			}
		}
	})
}
