package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/shard"
)

// TestRestoreRemovesLeftoverTempFiles: a kill -9 in the middle of a
// snapshot leaves its temporary file; the next start removes it and says
// how many and how large, and leaves every other file alone.
func TestRestoreRemovesLeftoverTempFiles(t *testing.T) {
	dir := t.TempDir()
	for i, size := range []int{1000, 2345} {
		name := filepath.Join(dir, fmt.Sprintf("%s.tmp-%d", FileName, 100+i))
		if err := os.WriteFile(name, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(other, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, log := newKeeper(t, dir)
	if err := k.Restore(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, FileName+".tmp-*"))
	if len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("another file went too: %v", err)
	}
	if !strings.Contains(log.String(), `level=WARN msg="removed temporary snapshot files a previous run left behind (it stopped in the middle of a snapshot)"`) ||
		!strings.Contains(log.String(), "files=2 bytes=3345") {
		t.Fatalf("log:\n%s", log)
	}
}

// TestRestoreRefusesAnUnwritableDir: a directory that takes no files (here
// one of /proc, which refuses files even to root) stops the start with a
// message that names it and says what to do, instead of failing every
// snapshot later.
func TestRestoreRefusesAnUnwritableDir(t *testing.T) {
	k, _ := newKeeper(t, "/proc/self")
	err := k.Restore(context.Background(), false)
	if err == nil {
		t.Fatal("Restore accepted a directory that takes no files")
	}
	for _, want := range []string{"--data-dir /proc/self is not writable", "make it writable", "choose another --data-dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
}

// records writes a snapshot taken at taken holding n drained buckets.
func writeDrained(t *testing.T, path string, taken time.Time, n int) {
	t.Helper()
	i := 0
	_, err := Write(path, taken.UnixMicro(), func() (shard.Record, bool, error) {
		if i == n {
			return shard.Record{}, false, nil
		}
		i++
		return drained(fmt.Sprint("key", i)), true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLoadSaysItsAgeAndWhatWasKept: the load line gives the snapshot's
// age, so a stale one is seen, and with --max-buckets how many buckets
// were kept, not only how many were read.
func TestLoadSaysItsAgeAndWhatWasKept(t *testing.T) {
	dir := t.TempDir()
	writeDrained(t, filepath.Join(dir, FileName), time.Now().Add(-90*time.Minute), 200)
	g := shard.New(shard.Config{Shards: 1, MaxBuckets: 50})
	t.Cleanup(g.Close)
	var log syncBuffer
	k := &Keeper{Dir: dir, Group: g, Logger: slog.New(slog.NewTextHandler(&log, nil))}
	if err := k.Restore(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`msg="loaded snapshot" .* buckets=50 read=200 evicted=150 clamped=0 limits_capped=0 long_keys=0 age=1h30m0s `)
	if !line.MatchString(log.String()) {
		t.Fatalf("log:\n%s", log.String())
	}
	if st := k.Stats(); time.Since(st.LastSuccess).Round(time.Minute) != 90*time.Minute {
		t.Fatalf("LastSuccess %v, want the loaded snapshot's time", st.LastSuccess)
	}
}

// TestFinalFailureSaysWhatIsLost: a failed final snapshot is an error that
// says how many buckets were not saved and what the next start will load;
// Stats counts the failure and keeps the time of the last good snapshot.
func TestFinalFailureSaysWhatIsLost(t *testing.T) {
	for _, earlier := range []bool{true, false} {
		t.Run(fmt.Sprint("earlier snapshot ", earlier), func(t *testing.T) {
			dir := t.TempDir()
			k, _ := newKeeper(t, dir)
			if err := k.Restore(context.Background(), false); err != nil {
				t.Fatal(err)
			}
			if _, err := k.Group.Restore([]shard.Record{drained("a"), drained("b"), drained("c")}); err != nil {
				t.Fatal(err)
			}
			if earlier {
				if _, err := k.Save(); err != nil {
					t.Fatal(err)
				}
			}
			good := k.Stats().LastSuccess
			k.write = func(string, int64, func() (shard.Record, bool, error)) (int, error) {
				return 0, errors.New("snapshot: disk on fire")
			}
			err := k.Final()
			want := "final snapshot failed: the state of 3 buckets was not saved to " + dir
			if earlier {
				want += " (the next start loads the earlier snapshot there, taken 0s ago): snapshot: disk on fire"
			} else {
				want += " (there is no earlier snapshot there, so the next start begins with no buckets): snapshot: disk on fire"
			}
			if err == nil || err.Error() != want {
				t.Fatalf("Final: %v\nwant %s", err, want)
			}
			if st := k.Stats(); st.Failures != 1 || !st.LastSuccess.Equal(good) {
				t.Fatalf("stats %+v, want 1 failure and the last success at %v", st, good)
			}
		})
	}
}

// TestSaveWritesTheCutWhileTheShardsServe: a Save takes a cut and then
// reads the shards chunk by chunk while it writes. Held in the middle, the
// shards still answer clients; a bucket created then is newer than the
// cut and not in the snapshot, and one reset then is in it as it was at
// the cut, though its entry lay in a part of the shard not yet read.
func TestSaveWritesTheCutWhileTheShardsServe(t *testing.T) {
	k, _ := newKeeper(t, t.TempDir())
	var recs []shard.Record
	for i := range 3 * saveChunk {
		recs = append(recs, drained(fmt.Sprint("old", i)))
	}
	if _, err := k.Group.Restore(recs); err != nil {
		t.Fatal(err)
	}
	c := k.Group.NewCaller()
	lim := bucket.Limit{Capacity: 10, Rate: 0.001}
	spent := recs[len(recs)-1].Key // restored last: at the end of its shard's entries
	k.write = func(path string, taken int64, next func() (shard.Record, bool, error)) (int, error) {
		first := true
		return Write(path, taken, func() (shard.Record, bool, error) {
			r, ok, err := next()
			if first {
				first = false
				// Held inside the Save: the shards still answer.
				c.Add(decide.Request{Kind: decide.Acquire, Key: []byte("late"), Limit: lim, Cost: 4})
				c.Add(decide.Request{Kind: decide.Reset, Key: []byte(spent)})
				if _, err := c.Run(); err != nil {
					t.Error(err)
				}
			}
			return r, ok, err
		})
	}
	n, err := k.Save()
	if err != nil || n != 3*saveChunk {
		t.Fatalf("Save wrote %d (%v), want the %d buckets of the cut", n, err, 3*saveChunk)
	}
	keys := keysIn(t, k.Path())
	if contains(keys, "late") {
		t.Fatal("a bucket created during the Save, after its cut, is in it")
	}
	if !contains(keys, spent) {
		t.Fatalf("%s, reset during the Save, after its cut, is not in it", spent)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
