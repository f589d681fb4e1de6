package snapshot

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/testkit"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/shard"
)

// syncBuffer is a log destination the keeper's goroutines and the test
// share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newKeeper(t *testing.T, dir string) (*Keeper, *syncBuffer) {
	t.Helper()
	g := shard.New(shard.Config{Shards: 2})
	t.Cleanup(g.Close)
	var log syncBuffer
	return &Keeper{Dir: dir, Group: g, Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))}, &log
}

// drained is a bucket that is far from full, so it stays live.
func drained(key string) shard.Record {
	return shard.Record{Key: key, State: bucket.State{Tokens: 0, Last: time.Now().UnixMicro()}, Limit: bucket.Limit{Capacity: 10, Rate: 0.001}}
}

func keysIn(t *testing.T, path string) []string {
	t.Helper()
	var keys []string
	if _, _, err := Read(path, func(r shard.Record) { keys = append(keys, r.Key) }); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestSavesDoNotOverlap: a Save that starts while another is writing waits
// for it, so the renames land in the order the shards were read. Save 1
// reads the shards, then is held inside its write; a bucket changes; Save
// 2 starts. Were Save 2 to go ahead, it would write the newer state, and
// Save 1's rename of the older state would then land over it: the file
// would lose the change.
func TestSavesDoNotOverlap(t *testing.T) {
	k, _ := newKeeper(t, t.TempDir())
	var mu sync.Mutex
	writing, calls := 0, 0
	overlapped := false
	entered, hold := make(chan struct{}), make(chan struct{})
	k.write = func(path string, taken int64, next func() (shard.Record, bool, error)) (int, error) {
		mu.Lock()
		writing++
		calls++
		first := calls == 1
		overlapped = overlapped || writing > 1
		mu.Unlock()
		defer func() { mu.Lock(); writing--; mu.Unlock() }()
		if first {
			close(entered)
			<-hold
		}
		return Write(path, taken, next)
	}

	first := make(chan error, 1)
	go func() { _, err := k.Save(); first <- err }()
	<-entered // Save 1 has read the shards (no buckets) and is writing
	if _, err := k.Group.Restore([]shard.Record{drained("changed")}); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() { _, err := k.Save(); second <- err }()
	select {
	case err := <-second:
		t.Fatalf("Save 2 finished while Save 1 was still writing (err %v)", err)
	case <-time.After(200 * time.Millisecond): // Save 2 is waiting, as it must
	}
	close(hold)
	if err := errors.Join(<-first, <-second); err != nil {
		t.Fatal(err)
	}
	if overlapped {
		t.Fatal("two Saves wrote at the same time")
	}
	if keys := keysIn(t, k.Path()); len(keys) != 1 || keys[0] != "changed" {
		t.Fatalf("snapshot holds %q, want the newer state [changed]", keys)
	}
}

// TestRunStopsBeforeFinal: Run snapshots periodically and returns when
// its context ends; the final snapshot after it is the one on disk.
func TestRunStopsBeforeFinal(t *testing.T) {
	k, log := newKeeper(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); k.Run(ctx, time.Millisecond) }()
	testkit.Eventually(t, 10*time.Second, "a periodic snapshot", func() bool {
		return strings.Contains(log.String(), `level=DEBUG msg="snapshot written"`)
	})
	cancel()
	<-ran
	if _, err := k.Group.Restore([]shard.Record{drained("last")}); err != nil {
		t.Fatal(err)
	}
	if err := k.Final(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), `level=INFO msg="snapshot written"`) {
		t.Fatalf("no final snapshot line:\n%s", log)
	}
	if keys := keysIn(t, k.Path()); len(keys) != 1 || keys[0] != "last" {
		t.Fatalf("snapshot holds %q, want the final state [last]", keys)
	}
}

func TestFinalFailureKeepsThePreviousSnapshot(t *testing.T) {
	k, log := newKeeper(t, t.TempDir())
	if _, err := k.Group.Restore([]shard.Record{drained("a")}); err != nil {
		t.Fatal(err)
	}
	if err := k.Final(); err != nil {
		t.Fatal(err)
	}
	k.Group.Close()
	err := k.Final() // the shards are closed: the walk fails
	if !strings.Contains(log.String(), `level=ERROR msg="final snapshot failed; the previous one stays"`) {
		t.Fatalf("no failure line:\n%s", log)
	}
	if !errors.Is(err, shard.ErrClosed) {
		t.Fatalf("Final: %v, want the cause wrapped", err)
	}
	if keys := keysIn(t, k.Path()); len(keys) != 1 || keys[0] != "a" {
		t.Fatalf("snapshot holds %q, want the previous one [a]", keys)
	}
}

// TestRestorePolicy: the start-up decisions on what the data directory
// holds, and their log lines.
func TestRestorePolicy(t *testing.T) {
	t.Run("no directory yet", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "new", "data")
		k, log := newKeeper(t, dir)
		if err := k.Restore(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Fatalf("data directory: %v, %v", fi, err)
		}
		if !strings.Contains(log.String(), `msg="no snapshot yet; starting with no buckets"`) {
			t.Fatalf("log:\n%s", log)
		}
	})
	t.Run("directory is a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		k, _ := newKeeper(t, file)
		if err := k.Restore(context.Background(), false); err == nil || !strings.HasPrefix(err.Error(), "--data-dir: ") {
			t.Fatalf("Restore: %v", err)
		}
	})
	t.Run("loaded", func(t *testing.T) {
		dir := t.TempDir()
		k, _ := newKeeper(t, dir)
		if _, err := k.Group.Restore([]shard.Record{drained("a"), drained("b")}); err != nil {
			t.Fatal(err)
		}
		if err := k.Final(); err != nil {
			t.Fatal(err)
		}
		k2, log := newKeeper(t, dir)
		if err := k2.Restore(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(log.String(), `msg="loaded snapshot"`) || !strings.Contains(log.String(), "buckets=2") {
			t.Fatalf("log:\n%s", log)
		}
	})
	for _, ignore := range []bool{false, true} {
		name := map[bool]string{false: "corrupt refuses to start", true: "corrupt ignored"}[ignore]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, FileName), []byte(magic+"garbage"), 0o600); err != nil {
				t.Fatal(err)
			}
			k, log := newKeeper(t, dir)
			err := k.Restore(context.Background(), ignore)
			if ignore {
				if err != nil || !strings.Contains(log.String(), "level=WARN msg=\"snapshot is corrupt; starting with no buckets as --ignore-corrupt-snapshot says") {
					t.Fatalf("Restore: %v\n%s", err, log)
				}
				return
			}
			if !errors.Is(err, ErrCorrupt) || !strings.HasSuffix(err.Error(),
				"; refusing to start with a fresh burst for every client: fix or remove the file, or start with --ignore-corrupt-snapshot to start with no buckets") {
				t.Fatalf("Restore: %v", err)
			}
		})
	}
}
