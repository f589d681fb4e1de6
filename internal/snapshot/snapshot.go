// Package snapshot writes bucketd's buckets to a file and reads them back,
// so a restart without Redis does not hand every client a fresh burst.
//
// A snapshot is written to a temporary file in the same directory, synced,
// and renamed over the old one, so a crash mid-write leaves the previous
// snapshot intact. The file ends with a CRC-32C of everything before it; a
// truncated or altered file is reported as corrupt, never half-loaded.
//
// Times are stored as Unix time (microseconds; nanoseconds for CL.THROTTLE
// arrival times), so the refill during the downtime is counted when the
// snapshot is loaded by a process with another monotonic clock.
//
// Format, little endian:
//
//	magic    "bucketd snapshot v1\n" (20 bytes)
//	taken    int64  Unix microseconds when the snapshot was taken
//	records, each:
//	  flags  byte   1 = record; 0 = end of records
//	  kind   byte   0 = token bucket, 1 = CL.THROTTLE (GCRA)
//	  keylen uvarint, then the key bytes
//	  tokens, capacity, rate  float64 bits (token bucket)
//	  last   int64  Unix microseconds (token bucket) or TAT in Unix nanoseconds (GCRA)
//	crc      uint32 CRC-32C (Castagnoli) of all bytes above
package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/shard"
)

const magic = "bucketd snapshot v1\n"

// MaxKeyBytes bounds a key in a snapshot; a longer length means the file is
// corrupt, and reading it must not allocate without bound.
const MaxKeyBytes = 1 << 20

// ErrCorrupt is wrapped by every error about a damaged or truncated file.
var ErrCorrupt = errors.New("snapshot is corrupt")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Write stores the records in path atomically: a temporary file in the same
// directory, fsync, rename, fsync of the directory. next is called until it
// returns false; it lets the caller stream records without building a slice.
func Write(path string, takenUnixMicros int64, next func() (shard.Record, bool)) (n int, err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return 0, fmt.Errorf("snapshot: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	crc := crc32.New(castagnoli)
	w := bufio.NewWriterSize(io.MultiWriter(tmp, crc), 1<<16)
	var buf [binary.MaxVarintLen64 + 8]byte
	w.WriteString(magic)
	binary.LittleEndian.PutUint64(buf[:8], uint64(takenUnixMicros))
	w.Write(buf[:8])
	for {
		r, ok := next()
		if !ok {
			break
		}
		w.Write([]byte{1, kindByte[r.Kind]})
		w.Write(buf[:binary.PutUvarint(buf[:], uint64(len(r.Key)))])
		w.WriteString(r.Key)
		last := r.State.Last
		if r.Kind == shard.GCRA {
			last = r.TAT
		}
		for _, f := range []float64{r.State.Tokens, r.Limit.Capacity, r.Limit.Rate} {
			binary.LittleEndian.PutUint64(buf[:8], math.Float64bits(f))
			w.Write(buf[:8])
		}
		binary.LittleEndian.PutUint64(buf[:8], uint64(last))
		w.Write(buf[:8])
		n++
	}
	w.WriteByte(0)
	if err := w.Flush(); err != nil {
		return 0, fmt.Errorf("snapshot: writing %s: %w", tmp.Name(), err)
	}
	binary.LittleEndian.PutUint32(buf[:4], crc.Sum32())
	if _, err := tmp.Write(buf[:4]); err != nil {
		return 0, fmt.Errorf("snapshot: writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return 0, fmt.Errorf("snapshot: syncing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return 0, fmt.Errorf("snapshot: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, fmt.Errorf("snapshot: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync() //nolint:errcheck // best effort: some filesystems cannot sync directories
		d.Close()
	}
	return n, nil
}

// Read loads a snapshot. A missing file returns an error for which
// errors.Is(err, os.ErrNotExist) holds; a damaged one wraps ErrCorrupt and
// says what is wrong. Records are handed to fn only after the checksum has
// been verified, so a corrupt file loads nothing.
func Read(path string, fn func(shard.Record)) (takenUnixMicros int64, n int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	// First pass: verify the checksum without keeping the records.
	if err := verify(f); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, 0, err
	}
	taken, n, err := decode(bufio.NewReaderSize(f, 1<<16), false, fn)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	return taken, n, nil
}

func verify(f *os.File) error {
	_, _, err := decode(bufio.NewReaderSize(f, 1<<16), true, nil)
	return err
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// decode reads the records and hands them to fn (if not nil); with check it
// also verifies the trailer against the CRC of exactly the bytes decoded.
func decode(r *bufio.Reader, check bool, fn func(shard.Record)) (int64, int, error) {
	var consumed int64
	read := func(p []byte) error {
		_, err := io.ReadFull(r, p)
		consumed += int64(len(p))
		if err != nil {
			return corrupt("truncated after %d bytes", consumed-int64(len(p)))
		}
		return nil
	}
	head := make([]byte, len(magic)+8)
	if err := read(head); err != nil {
		return 0, 0, err
	}
	if string(head[:len(magic)]) != magic {
		return 0, 0, corrupt("not a bucketd snapshot (bad magic)")
	}
	taken := int64(binary.LittleEndian.Uint64(head[len(magic):]))
	checker := &crcAt{}
	if check {
		checker.sum = crc32.New(castagnoli)
		checker.sum.Write(head)
	}
	n := 0
	var fixed [32]byte
	var flag [2]byte
	for {
		if err := read(flag[:1]); err != nil {
			return 0, 0, err
		}
		checker.add(flag[:1])
		if flag[0] == 0 {
			break
		}
		if flag[0] != 1 {
			return 0, 0, corrupt("bad record marker %d at byte %d", flag[0], consumed-1)
		}
		if err := read(flag[1:2]); err != nil {
			return 0, 0, err
		}
		checker.add(flag[1:2])
		keyLen, err := binary.ReadUvarint(byteCounter{r, &consumed, checker})
		if err != nil {
			return 0, 0, corrupt("truncated key length at byte %d", consumed)
		}
		if keyLen > MaxKeyBytes {
			return 0, 0, corrupt("key length %d at byte %d is beyond the limit", keyLen, consumed)
		}
		key := make([]byte, keyLen)
		if err := read(key); err != nil {
			return 0, 0, err
		}
		checker.add(key)
		if err := read(fixed[:]); err != nil {
			return 0, 0, err
		}
		checker.add(fixed[:])
		rec, ok := record(string(key), flag[1], fixed)
		if !ok {
			return 0, 0, corrupt("record %d (%q) has impossible values", n, key)
		}
		if fn != nil {
			fn(rec)
		}
		n++
	}
	var trailer [4]byte
	if err := read(trailer[:]); err != nil {
		return 0, 0, err
	}
	if check && binary.LittleEndian.Uint32(trailer[:]) != checker.sum.Sum32() {
		return 0, 0, corrupt("checksum mismatch")
	}
	if _, err := r.ReadByte(); err != io.EOF {
		return 0, 0, corrupt("bytes after the checksum")
	}
	return taken, n, nil
}

// kindByte is each kind's byte in the file.
var kindByte = [...]byte{shard.TokenBucket: 0, shard.GCRA: 1}

// record builds a Record from its kind byte and its fixed fields, and
// reports whether the values can be those of a bucket.
func record(key string, kind byte, fixed [32]byte) (shard.Record, bool) {
	last := int64(binary.LittleEndian.Uint64(fixed[24:]))
	if kind == kindByte[shard.GCRA] {
		return shard.Record{Key: key, Kind: shard.GCRA, TAT: last}, true
	}
	r := shard.Record{Key: key, Kind: shard.TokenBucket}
	r.State = bucket.State{Tokens: math.Float64frombits(binary.LittleEndian.Uint64(fixed[0:])), Last: last}
	r.Limit = bucket.Limit{
		Capacity: math.Float64frombits(binary.LittleEndian.Uint64(fixed[8:])),
		Rate:     math.Float64frombits(binary.LittleEndian.Uint64(fixed[16:])),
	}
	ok := kind == kindByte[shard.TokenBucket] && r.Limit.Capacity > 0 && r.Limit.Rate > 0 &&
		r.State.Tokens >= 0 && r.State.Tokens <= r.Limit.Capacity
	return r, ok
}

// crcAt sums exactly the decoded bytes.
type crcAt struct{ sum hash.Hash32 }

func (c *crcAt) add(p []byte) {
	if c.sum != nil {
		c.sum.Write(p)
	}
}

// byteCounter feeds binary.ReadUvarint while counting and summing bytes.
type byteCounter struct {
	r   *bufio.Reader
	n   *int64
	crc *crcAt
}

func (b byteCounter) ReadByte() (byte, error) {
	c, err := b.r.ReadByte()
	if err == nil {
		*b.n++
		b.crc.add([]byte{c})
	}
	return c, err
}
