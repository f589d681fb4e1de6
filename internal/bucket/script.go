package bucket

import (
	"crypto/sha1"
	_ "embed" // for go:embed
	"encoding/hex"
)

// Script is the Lua source of the token bucket on Redis: the same decisions
// and the same stored state as Acquire, Peek and IsFull, held equal to them
// by differential_test.go against a real redis-server. The interface is
// documented at the top of tokenbucket.lua and in docs/lua.md.
//
// bucketd calls it through internal/redisscript, which encodes the
// arguments, batches calls, falls back from EVALSHA to EVAL on NOSCRIPT and
// reads the replies; the script lives here, next to the math it must equal.
//
//go:embed tokenbucket.lua
var Script string

// ScriptSHA1 is the lowercase hex SHA-1 of Script, the name EVALSHA takes.
var ScriptSHA1 = func() string {
	sum := sha1.Sum([]byte(Script))
	return hex.EncodeToString(sum[:])
}()
