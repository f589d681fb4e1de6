package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/shard"
	"github.com/bucketd/bucketd/internal/testkit/testserver"
	"github.com/redis/go-redis/v9"
)

// loadServer is a server on a fake clock whose keeper loads from dir at
// the clock's instant.
func loadServer(t *testing.T, dir string, maxKeyBytes int) (*testserver.Server, *Keeper, *syncBuffer) {
	t.Helper()
	s := testserver.Start(t, testserver.Options{})
	var log syncBuffer
	k := &Keeper{
		Dir: dir, Group: s.Group, MaxKeyBytes: maxKeyBytes,
		Logger:  slog.New(slog.NewTextHandler(&log, nil)),
		UnixNow: func() int64 { return s.Clock.Base().UnixMicros(s.Clock.Now()) },
	}
	return s, k, &log
}

func peek(t *testing.T, c *redis.Client, key string, capacity, rate float64) []int64 {
	t.Helper()
	got, err := c.Do(context.Background(), "TB.PEEK", key, capacity, rate).Int64Slice()
	if err != nil {
		t.Fatalf("TB.PEEK %s: %v", key, err)
	}
	return got
}

// TestLoadClampsALastCallAfterTheLoadInstant: a snapshot written on a
// host whose clock was 30 s ahead (or before this host's clock stepped
// back) holds a bucket whose last call is later than the load instant.
// Loaded as it is, the bucket refills nothing until the clock gets there,
// while every answer says retry in a second. Loading moves that last call
// to the load instant, so the wait the answers promise is the real one,
// and the load log line says how many it moved.
func TestLoadClampsALastCallAfterTheLoadInstant(t *testing.T) {
	dir := t.TempDir()
	s, k, log := loadServer(t, dir, 0)
	now := k.UnixNow()
	ahead := now + 30_000_000
	write(t, filepath.Join(dir, FileName), []Record{
		{Key: "ahead", State: bucket.State{Tokens: 0, Last: ahead}, Limit: bucket.Limit{Capacity: 10, Rate: 1}},
		{Key: "past", State: bucket.State{Tokens: 0, Last: now - 500_000}, Limit: bucket.Limit{Capacity: 10, Rate: 1}},
	})
	if err := k.Restore(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	c := s.Client(t)
	if got := peek(t, c, "past", 10, 1); fmt.Sprint(got) != "[0 0 500 9500]" {
		t.Fatalf("a bucket last used before the load: %v, want [0 0 500 9500] (left as it was)", got)
	}
	for wait := range 8 {
		got := peek(t, c, "ahead", 10, 1)
		if got[0] == 1 {
			if wait != 1 {
				t.Fatalf("allowed after %d waits, want after the first", wait)
			}
			break
		}
		if wait == 7 {
			t.Fatalf("still %v after 7 waits of retry_after_ms + 0.5 s: the bucket never refills while its last call is in the future", got)
		}
		if wait == 0 && fmt.Sprint(got) != "[0 0 1000 10000]" {
			t.Fatalf("right after the load: %v, want [0 0 1000 10000]", got)
		}
		s.Clock.Advance(time.Duration(got[2])*time.Millisecond + 500*time.Millisecond)
	}
	if !strings.Contains(log.String(), `msg="loaded snapshot"`) || !strings.Contains(log.String(), " clamped=1 ") {
		t.Fatalf("the load line does not say one last call was clamped:\n%s", log)
	}
}

// TestLoadMovesAThrottleArrivalTimeBackBySkew: a CL.THROTTLE arrival time
// is in the future by nature (that is how GCRA remembers a spent burst),
// so it is not clamped to the load instant; a snapshot taken 30 s after the
// load instant (by a clock that far ahead) has every such time 30 s too
// far: loading moves them back by that much, and a time that was past
// when the snapshot was taken is past at the load (the key is full).
func TestLoadMovesAThrottleArrivalTimeBackBySkew(t *testing.T) {
	dir := t.TempDir()
	_, k, _ := loadServer(t, dir, 0)
	now := k.UnixNow()
	taken := now + 30_000_000
	path := filepath.Join(dir, FileName)
	if _, err := Write(path, taken, from([]Record{
		{Key: "spent", Kind: shard.GCRA, TAT: (taken + 5_000_000) * 1000}, // 5 s of burst spent when the snapshot was taken
		{Key: "done", Kind: shard.GCRA, TAT: (taken - 1_000_000) * 1000},  // full already then
	})); err != nil {
		t.Fatal(err)
	}
	l, err := k.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if l.Stored != 1 || l.Clamped != 2 {
		t.Fatalf("Load: %+v, want 1 stored (spent) and 2 clamped", l)
	}
	if _, err := k.Save(); err != nil {
		t.Fatal(err)
	}
	var got []Record
	if _, _, err := Read(path, func(r Record) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	if want := (now + 5_000_000) * 1000; len(got) != 1 || got[0].Key != "spent" || got[0].TAT != want {
		t.Fatalf("after the load: %+v, want spent with its arrival time 5 s after the load instant (%d)", got, want)
	}
}

// TestLoadRefusesWhatNoCommandAccepts: a CRC-valid file whose capacity or
// rate no command accepts (NaN, infinite, not > 0) is refused as corrupt,
// like a record with more tokens than its capacity; a finite capacity or
// rate above the commands' bound of 1e15 is capped to it; a key longer
// than --max-key-bytes, which every command refuses, is left out. The
// load line counts what it capped and left out.
func TestLoadRefusesWhatNoCommandAccepts(t *testing.T) {
	tb := func(key string, tokens, capacity, rate float64) Record {
		return Record{Key: key, State: bucket.State{Tokens: tokens, Last: 1}, Limit: bucket.Limit{Capacity: capacity, Rate: rate}}
	}
	for _, bad := range []Record{
		tb("inf capacity", 0, math.Inf(1), 1),
		tb("inf rate", 0, 10, math.Inf(1)),
		tb("nan capacity", 0, math.NaN(), 1),
		tb("nan rate", 0, 10, math.NaN()),
		tb("zero capacity", 0, 0, 1),
		tb("negative rate", 0, 10, -1),
		tb("nan tokens", math.NaN(), 10, 1),
	} {
		t.Run(bad.Key, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			write(t, path, []Record{tb("fine", 0, 10, 1), bad})
			loaded := 0
			_, _, err := Read(path, func(Record) { loaded++ })
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "impossible values") || loaded != 0 {
				t.Fatalf("Read: %v, %d records loaded; want the file refused as corrupt", err, loaded)
			}
		})
	}

	dir := t.TempDir()
	s, k, log := loadServer(t, dir, 8)
	now := k.UnixNow()
	recs := []Record{
		tb("short", 0, 10, 1),
		tb("too-long-key", 0, 10, 1),
		tb("huge", 5, 1e300, 1e16),
	}
	for i := range recs {
		recs[i].State.Last = now
	}
	write(t, filepath.Join(dir, FileName), recs)
	if err := k.Restore(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if n := s.Group.Stats().Buckets; n != 2 {
		t.Fatalf("%d buckets loaded, want 2 (short and huge; the long key left out)", n)
	}
	for _, want := range []string{" buckets=2 ", " read=3 ", " limits_capped=1", " long_keys=1"} {
		if !strings.Contains(log.String(), want) {
			t.Fatalf("the load line lacks %q:\n%s", want, log)
		}
	}
	if _, err := k.Save(); err != nil {
		t.Fatal(err)
	}
	var huge Record
	if _, _, err := Read(k.Path(), func(r Record) {
		if r.Key == "huge" {
			huge = r
		}
	}); err != nil {
		t.Fatal(err)
	}
	if huge.Limit != (bucket.Limit{Capacity: bucket.MaxValue, Rate: bucket.MaxValue}) || huge.State.Tokens != 5 {
		t.Fatalf("huge after the load: %+v, want capacity and rate capped to 1e15, 5 tokens", huge)
	}
}
