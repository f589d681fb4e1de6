// Package policy is the model of named policies: a Policy is a set of
// token-bucket limits that TB.ACQUIRE … POLICY name uses instead of
// explicit numbers, and AppendKey names the bucket each limit is checked
// in. internal/config decodes the YAML file into it; the protocol front
// reads it per command. It imports only the bucket math, so both can.
package policy

import "github.com/bucketd/bucketd/internal/bucket"

// MaxLimits is the most limits one policy may list: a call checks all of a
// policy's limits at once, and one call touches at most 16 buckets (the
// bound of TB.MACQUIRE).
const MaxLimits = 16

// MaxValue bounds capacity and rate, as the bucket math requires.
const MaxValue = bucket.MaxValue

// Policy is a named set of limits that TB.ACQUIRE … POLICY name uses instead
// of explicit numbers. A Policy from Load has 1 to MaxLimits limits, whose
// names differ.
type Policy struct {
	// Limits are checked together: a call is allowed only when every limit
	// allows it. With one limit its bucket is named Prefix + key, as it
	// always was; with several, each limit has a bucket of its own, named
	// by AppendKey.
	Limits []Limit
	// Prefix, when not empty, is put in front of every key acquired with
	// this policy, so one client key under two policies names two buckets.
	Prefix string
	// Shadow marks a policy being rolled out: its decisions are computed,
	// counted and charged as usual, but the reply always says allowed, and
	// what would have been denied is counted apart.
	Shadow bool
}

// Limit is one token bucket of a policy.
type Limit struct {
	// Name tells the limit's bucket from its siblings' (see
	// Policy.AppendKey): letters, digits, '-', '_' and '.'. It defaults to
	// the unit the rate is written in (second, minute, hour or day; second
	// for a plain number of tokens per second).
	Name string
	// Capacity is the most tokens the bucket holds (the burst), > 0 and
	// <= 1e15.
	Capacity float64
	// Rate is the refill in tokens per second, > 0 and <= 1e15.
	Rate float64
}

// Multi reports whether p has several limits, each in a bucket of its own.
func (p Policy) Multi() bool { return len(p.Limits) > 1 }

// ValidLimitName reports whether name is non-empty and made of letters,
// digits, '-', '_' and '.': no braces, which would change the hash slot of
// the limit's keys, and no ':', which separates the name from the key.
func ValidLimitName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// AppendKey appends to dst the key of the bucket in which limit i of p
// (0 <= i < len(p.Limits)) is checked for the client key key, and returns
// the extended slice. It allocates nothing when dst has room, so the
// protocol can call it per command with a reused buffer.
//
// With one limit the key is Prefix + key, as it was before policies had
// several limits. With several, let K be Prefix + key; limit i's key is
//
//   - K:Name when K has a hash tag as Redis Cluster reads it (the first '{',
//     then the first '}' after it, with at least one byte between): the
//     caller's own tag decides the slot, as for any other key;
//   - {K}:Name otherwise, so that Redis Cluster hashes K alone;
//   - {{K}:Name when K is empty or starts with '}', where {K} would hold
//     an empty tag, which Redis Cluster ignores.
//
// So all keys of one call share one hash slot (store mode sends them in one
// script call), they read well in Redis (tb:{user:1}:minute), and keys
// without braces never share a bucket. Names hold no braces and no ':'
// (see ValidLimitName), so a derived key names its limit unambiguously.
func (p Policy) AppendKey(dst, key []byte, i int) []byte {
	name := p.Limits[i].Name
	if len(p.Limits) == 1 {
		dst = append(dst, p.Prefix...)
		return append(dst, key...)
	}
	switch {
	case hasHashTag(p.Prefix, key):
		dst = append(dst, p.Prefix...)
		dst = append(dst, key...)
		dst = append(dst, ':')
		return append(dst, name...)
	case len(p.Prefix) == 0 && (len(key) == 0 || key[0] == '}'), len(p.Prefix) > 0 && p.Prefix[0] == '}':
		dst = append(dst, '{')
	}
	dst = append(dst, '{')
	dst = append(dst, p.Prefix...)
	dst = append(dst, key...)
	dst = append(dst, '}', ':')
	return append(dst, name...)
}

// hasHashTag reports whether prefix + key has a non-empty Redis Cluster
// hash tag: a '{', then, after at least one byte, a '}'.
func hasHashTag(prefix string, key []byte) bool {
	open := -1 // where the first '{' is; -1 before it
	for i := 0; i < len(prefix)+len(key); i++ {
		var c byte
		if i < len(prefix) {
			c = prefix[i]
		} else {
			c = key[i-len(prefix)]
		}
		switch {
		case open < 0 && c == '{':
			open = i
		case open >= 0 && c == '}':
			return i > open+1
		}
	}
	return false
}
