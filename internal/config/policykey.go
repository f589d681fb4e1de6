package config

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
// (see validLimitName), so a derived key names its limit unambiguously.
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
