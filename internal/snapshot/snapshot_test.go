package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/shard"
)

func records() []Record {
	tb := func(key string, tokens, capacity, rate float64, last int64) Record {
		return Record{Key: key, State: bucket.State{Tokens: tokens, Last: last}, Limit: bucket.Limit{Capacity: capacity, Rate: rate}}
	}
	return []Record{
		tb("a", 0.1, 10, 0.5, 1_700_000_000_000_000),
		tb("", 0, 1e15, 1e-300, 5),
		{Key: "t\x00\r\n", Kind: shard.GCRA, TAT: 1_700_000_000_000_000_123},
		tb(strings.Repeat("k", 5000), 3, 4, 1, 42),
	}
}

// Record is the record type of the file format: shard's.
type Record = shard.Record

// from returns Write's next function over recs.
func from(recs []Record) func() (Record, bool, error) {
	i := 0
	return func() (Record, bool, error) {
		if i == len(recs) {
			return Record{}, false, nil
		}
		i++
		return recs[i-1], true, nil
	}
}

func write(t *testing.T, path string, recs []Record) {
	t.Helper()
	n, err := Write(path, 123456789, from(recs))
	if err != nil || n != len(recs) {
		t.Fatalf("Write: %d, %v", n, err)
	}
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buckets.snapshot")
	write(t, path, records())
	var got []Record
	taken, n, err := Read(path, func(r Record) { got = append(got, r) })
	if err != nil || taken != 123456789 || n != 4 {
		t.Fatalf("Read: %d %d %v", taken, n, err)
	}
	for i, r := range records() {
		if got[i] != r {
			t.Fatalf("record %d: %+v, want %+v", i, got[i], r)
		}
	}
	// Overwriting replaces the file atomically and leaves no temp file.
	write(t, path, records()[:1])
	if _, n, _ := Read(path, func(Record) {}); n != 1 {
		t.Fatalf("after overwrite: %d records", n)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("leftover files: %v", entries)
	}
}

func TestMissingFile(t *testing.T) {
	if _, _, err := Read(filepath.Join(t.TempDir(), "none"), func(Record) {}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// TestCorruptionIsDetectedAndLoadsNothing: every truncation and every
// single-bit flip is reported as corrupt, and no record reaches the caller.
func TestCorruptionIsDetectedAndLoadsNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "good")
	write(t, path, records()[:3])
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad")
	check := func(data []byte, what string) {
		t.Helper()
		if err := os.WriteFile(bad, data, 0o600); err != nil {
			t.Fatal(err)
		}
		loaded := 0
		_, _, err := Read(bad, func(Record) { loaded++ })
		if !errors.Is(err, ErrCorrupt) || loaded != 0 {
			t.Fatalf("%s: err %v, %d records loaded", what, err, loaded)
		}
	}
	for cut := 0; cut < len(good); cut++ {
		check(good[:cut], "truncated")
	}
	for i := range good {
		for bit := range 8 {
			flipped := append([]byte(nil), good...)
			flipped[i] ^= 1 << bit
			check(flipped, "bit flip")
		}
	}
	check(append(append([]byte(nil), good...), 0), "trailing byte")
}

// FuzzRead: no input file makes Read panic, allocate without bound, or hand
// out records without a valid checksum.
func FuzzRead(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "seed")
	if _, err := Write(path, 1, from(records()[:3])); err != nil {
		f.Fatal(err)
	}
	seed, _ := os.ReadFile(path)
	f.Add(seed)
	f.Add([]byte(magic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "s")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, n, err := Read(p, func(Record) {})
		if err != nil && n != 0 {
			t.Fatalf("error %v but %d records", err, n)
		}
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("unexpected error kind: %v", err)
		}
	})
}
