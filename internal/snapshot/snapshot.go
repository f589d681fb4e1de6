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
	"time"

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

// kindByte is each kind's byte in the file.
var kindByte = [...]byte{shard.TokenBucket: 0, shard.GCRA: 1}

// Write stores the records in path atomically: a temporary file in the same
// directory, fsync, rename, fsync of the directory. next is called until it
// returns false; it lets the caller stream records without building a
// slice. An error from next ends the write: the temporary file is removed
// and the snapshot in path stays as it was.
func Write(path string, takenUnixMicros int64, next func() (shard.Record, bool, error)) (n int, err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return 0, fmt.Errorf("snapshot: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if n, err = encode(tmp, takenUnixMicros, next); err != nil {
		return 0, fmt.Errorf("snapshot: writing %s: %w", tmp.Name(), err)
	}
	return n, commit(tmp, path)
}

// encode writes the whole file body to w: header, records, end marker and
// checksum.
func encode(w io.Writer, takenUnixMicros int64, next func() (shard.Record, bool, error)) (int, error) {
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 1<<16)
	bw.WriteString(magic)
	bw.Write(binary.LittleEndian.AppendUint64(nil, uint64(takenUnixMicros)))
	n := 0
	var buf []byte
	for {
		r, ok, err := next()
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		buf = appendRecord(buf[:0], &r)
		bw.Write(buf)
		n++
	}
	bw.WriteByte(0)
	if err := bw.Flush(); err != nil { // reports the first failed write above too
		return 0, err
	}
	_, err := w.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32()))
	return n, err
}

// appendRecord appends r in the file's record format.
func appendRecord(b []byte, r *shard.Record) []byte {
	b = append(b, 1, kindByte[r.Kind])
	b = binary.AppendUvarint(b, uint64(len(r.Key)))
	b = append(b, r.Key...)
	last := r.State.Last
	if r.Kind == shard.GCRA {
		last = r.TAT
	}
	for _, f := range []float64{r.State.Tokens, r.Limit.Capacity, r.Limit.Rate} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	return binary.LittleEndian.AppendUint64(b, uint64(last))
}

// commit makes the written temporary file the snapshot at path.
func commit(tmp *os.File, path string) error {
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("snapshot: syncing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync() //nolint:errcheck // best effort: some filesystems cannot sync directories
		d.Close()
	}
	return nil
}

// Read loads a snapshot. A missing file returns an error for which
// errors.Is(err, os.ErrNotExist) holds; a damaged one wraps ErrCorrupt and
// says what is wrong. Records are handed to fn only after the checksum has
// been verified, so a corrupt file loads nothing.
func Read(path string, fn func(shard.Record)) (takenUnixMicros int64, n int, err error) {
	return read(path, func(int64) func(shard.Record) { return fn })
}

// read is Read for a caller that needs the snapshot's time before its
// records: records(taken) returns the function that gets them.
func read(path string, records func(takenUnixMicros int64) func(shard.Record)) (takenUnixMicros int64, n int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	// First pass: verify the checksum without keeping the records.
	taken, _, err := decode(f, true, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, 0, err
	}
	taken, n, err = decode(f, false, records(taken))
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	return taken, n, nil
}

// Taken returns when the snapshot in path was taken, from its header
// alone: the checksum is not verified.
func Taken(path string) (time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, err
	}
	defer f.Close()
	d := &decoder{r: bufio.NewReaderSize(f, len(magic)+8)}
	taken, err := d.header()
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", path, err)
	}
	return time.UnixMicro(taken), nil
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// decode reads the records and hands them to fn (if not nil); with check it
// also verifies the trailer against the CRC of exactly the bytes decoded.
func decode(f io.Reader, check bool, fn func(shard.Record)) (int64, int, error) {
	d := &decoder{r: bufio.NewReaderSize(f, 1<<16)}
	if check {
		d.sum = crc32.New(castagnoli)
	}
	taken, err := d.header()
	if err != nil {
		return 0, 0, err
	}
	n := 0
	for {
		rec, more, err := d.record(n)
		if err != nil {
			return 0, 0, err
		}
		if !more {
			break
		}
		if fn != nil {
			fn(rec)
		}
		n++
	}
	return taken, n, d.trailer(check)
}

// decoder reads the file's parts, counting the bytes it consumes (for
// error messages) and summing them when it checks the CRC.
type decoder struct {
	r        *bufio.Reader
	consumed int64
	sum      hash.Hash32 // nil: no check
}

func (d *decoder) read(p []byte) error {
	_, err := io.ReadFull(d.r, p)
	d.consumed += int64(len(p))
	if err != nil {
		return corrupt("truncated after %d bytes", d.consumed-int64(len(p)))
	}
	if d.sum != nil {
		d.sum.Write(p)
	}
	return nil
}

// ReadByte makes the decoder an io.ByteReader for binary.ReadUvarint.
func (d *decoder) ReadByte() (byte, error) {
	var b [1]byte
	err := d.read(b[:])
	return b[0], err
}

func (d *decoder) header() (int64, error) {
	head := make([]byte, len(magic)+8)
	if err := d.read(head); err != nil {
		return 0, err
	}
	if string(head[:len(magic)]) != magic {
		return 0, corrupt("not a bucketd snapshot (bad magic)")
	}
	return int64(binary.LittleEndian.Uint64(head[len(magic):])), nil
}

// record reads record n; more is false at the end-of-records marker.
func (d *decoder) record(n int) (rec shard.Record, more bool, err error) {
	var flag [2]byte
	if err := d.read(flag[:1]); err != nil || flag[0] == 0 {
		return rec, false, err
	}
	if flag[0] != 1 {
		return rec, false, corrupt("bad record marker %d at byte %d", flag[0], d.consumed-1)
	}
	if err := d.read(flag[1:2]); err != nil {
		return rec, false, err
	}
	keyLen, err := binary.ReadUvarint(d)
	if err != nil {
		return rec, false, corrupt("truncated key length at byte %d", d.consumed)
	}
	if keyLen > MaxKeyBytes {
		return rec, false, corrupt("key length %d at byte %d is beyond the limit", keyLen, d.consumed)
	}
	key := make([]byte, keyLen)
	var fixed [32]byte
	if err := d.read(key); err != nil {
		return rec, false, err
	}
	if err := d.read(fixed[:]); err != nil {
		return rec, false, err
	}
	rec, ok := record(string(key), flag[1], fixed)
	if !ok {
		return rec, false, corrupt("record %d (%q) has impossible values", n, key)
	}
	return rec, true, nil
}

// trailer reads the checksum (and compares it, with check) and makes sure
// nothing follows it.
func (d *decoder) trailer(check bool) error {
	var want uint32
	if d.sum != nil {
		want = d.sum.Sum32()
	}
	var trailer [4]byte
	if err := d.read(trailer[:]); err != nil {
		return err
	}
	if check && binary.LittleEndian.Uint32(trailer[:]) != want {
		return corrupt("checksum mismatch")
	}
	if _, err := d.r.ReadByte(); err != io.EOF {
		return corrupt("bytes after the checksum")
	}
	return nil
}

// record builds a Record from its kind byte and its fixed fields, and
// reports whether the values can be those of a bucket: a capacity and a
// rate that are numbers > 0 and finite, and tokens from 0 to the capacity.
// (A finite capacity or rate above what the commands accept is not
// impossible in the file's terms; Keeper.Load caps it.)
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
	ok := kind == kindByte[shard.TokenBucket] && positiveFinite(r.Limit.Capacity) && positiveFinite(r.Limit.Rate) &&
		r.State.Tokens >= 0 && r.State.Tokens <= r.Limit.Capacity
	return r, ok
}

// positiveFinite reports whether f is a number > 0 and not infinite (NaN
// is neither).
func positiveFinite(f float64) bool { return f > 0 && f <= math.MaxFloat64 }
