package bucket

import (
	"crypto/sha1"
	_ "embed" // for go:embed
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Script is the Lua source of the token bucket on Redis: the same decisions
// and the same stored state as Acquire, Peek and IsFull, held equal to them
// by differential_test.go against a real redis-server. The interface is
// documented at the top of tokenbucket.lua and in docs/lua.md.
//
// Call it with EVALSHA ScriptSHA1 1 key ARGV... (falling back to EVAL Script
// on NOSCRIPT); AcquireArgs, PeekArgs, PutArgs and DelArgs build the ARGV,
// ParseReply reads the reply and TTLMillis says which expiry the script sets.
//
// Several buckets go in one call as EVALSHA ScriptSHA1 n key1 … keyn followed
// by the ARGV of each key in turn: every XxxArgs returns exactly ArgsPerKey
// arguments, so the batch's ARGV is their concatenation. The reply is then
// an array of the n replies, a failed call being an error element.
//
//go:embed tokenbucket.lua
var Script string

// ScriptSHA1 is the lowercase hex SHA-1 of Script, the name EVALSHA takes.
var ScriptSHA1 = func() string {
	sum := sha1.Sum([]byte(Script))
	return hex.EncodeToString(sum[:])
}()

// Values of the script's ARGV[4].
const (
	OpAcquire = "acquire"
	OpPeek    = "peek"
	OpPut     = "put"
	OpDel     = "del"
)

// ArgsPerKey is the number of ARGV each key takes in a call: AcquireArgs,
// PeekArgs, PutArgs and DelArgs all return this many.
const ArgsPerKey = 6

// RedisTime, passed as now to AcquireArgs or PeekArgs, leaves ARGV[5] empty
// so that the script reads the Redis server's TIME.
const RedisTime int64 = -1

// MaxTTLMillis caps the PEXPIRE the script sets: a bucket that needs more
// than 10 years (of 365 days) to refill expires after 10 years anyway.
// Without a cap a tiny rate would ask Redis for an expiry it rejects.
const MaxTTLMillis int64 = 10 * 365 * 24 * 60 * 60 * 1000

// ErrBadReply is returned (wrapped) by ParseReply for a reply that is not
// what the script sends.
var ErrBadReply = errors.New("bucket: unexpected script reply")

// AcquireArgs returns ARGV for spending cost tokens under l at now (Unix
// microseconds, or RedisTime). The script accepts integer times in
// [0, 2^53) µs (until the year 2255), where every integer is exact as a Lua
// number. Numbers are formatted in the shortest form that reads back as the
// same float64, which Lua's tonumber (C strtod) does.
func AcquireArgs(l Limit, cost float64, now int64) []any {
	return args(l, cost, OpAcquire, now)
}

// PeekArgs returns ARGV for asking what AcquireArgs(l, cost, now) would
// answer, without writing anything.
func PeekArgs(l Limit, cost float64, now int64) []any {
	return args(l, cost, OpPeek, now)
}

// PutArgs returns ARGV for storing s (replication): Redis keeps s unless its
// stored ts is newer than s.Last, and deletes the key instead when s is full
// under l. l also sets the key's expiry (TTLMillis(l, s, s.Last)).
func PutArgs(l Limit, s State) []any {
	return []any{fmtFloat(l.Capacity), fmtFloat(l.Rate), "", OpPut,
		strconv.FormatInt(s.Last, 10), fmtFloat(s.Tokens)}
}

// DelArgs returns ARGV for deleting a bucket as of ts (Unix microseconds):
// Redis deletes the key unless its stored ts is newer.
func DelArgs(ts int64) []any {
	return []any{"", "", "", OpDel, strconv.FormatInt(ts, 10), ""}
}

func args(l Limit, cost float64, op string, now int64) []any {
	a := []any{fmtFloat(l.Capacity), fmtFloat(l.Rate), fmtFloat(cost), op, "", ""}
	if now >= 0 {
		a[4] = strconv.FormatInt(now, 10)
	}
	return a
}

func fmtFloat(f float64) string {
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// ParseReply reads the script's reply to acquire or peek, as a Redis client
// library hands it over: a slice of four elements, each an integer (int64,
// or int as some clients give) or a decimal string. The script sends a
// saturated field as the string "9223372036854775807" because a Lua number
// cannot carry 2^63-1; ParseReply returns it as math.MaxInt64.
func ParseReply(v any) (Decision, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		return Decision{}, fmt.Errorf("%w: want an array of 4 elements, got %T", ErrBadReply, v)
	}
	var n [4]int64
	for i, e := range a {
		switch x := e.(type) {
		case int64:
			n[i] = x
		case int:
			n[i] = int64(x)
		case string:
			p, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return Decision{}, fmt.Errorf("%w: element %d: %w", ErrBadReply, i+1, err)
			}
			n[i] = p
		default:
			return Decision{}, fmt.Errorf("%w: element %d is a %T", ErrBadReply, i+1, e)
		}
	}
	if n[0] != 0 && n[0] != 1 {
		return Decision{}, fmt.Errorf("%w: allowed is %d", ErrBadReply, n[0])
	}
	return Decision{Allowed: n[0] == 1, Remaining: n[1], RetryAfterMs: n[2], ResetAfterMs: n[3]}, nil
}

// MinTTLMillis is the smallest PEXPIRE the script sets. Redis expires a key
// only once its millisecond clock is past the deadline, so never early, with
// one exception: PEXPIRE 1 deletes the key at once when Redis's millisecond
// ticks between the two clock reads inside the command (seen on Redis 7.0).
const MinTTLMillis int64 = 2

// TTLMillis returns the PEXPIRE, in milliseconds, that the script sets when
// it stores s at now under l: the time from now until s is refilled to
// l.Capacity, rounded up, at least MinTTLMillis and at most MaxTTLMillis. It
// uses the script's float64 operations in the script's order. A full s is
// not stored (the script deletes it), so its TTL means nothing.
func TTLMillis(l Limit, s State, now int64) int64 {
	ms := float64((l.Capacity-s.Tokens)/l.Rate*1000) + float64(s.Last-now)/1000
	if !(ms < float64(MaxTTLMillis)) {
		return MaxTTLMillis
	}
	ms = math.Ceil(ms)
	if ms < float64(MinTTLMillis) {
		return MinTTLMillis
	}
	return int64(ms)
}
