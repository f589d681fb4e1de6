package command

import (
	"bytes"
	"slices"

	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/resp/wire"
)

// Client-side caching (CLIENT TRACKING), as far as a rate limiter can
// allow it. A client with tracking on may keep a reply and serve it again
// until the server invalidates the key. Every bucket reply depends on the
// time it was made, so it is stale at once: bucketd follows each tracked
// bucket reply with an invalidation push for its keys, right after the
// reply and before the next one, and it refuses a bucket command whose
// reply the client explicitly asked to cache (OPTIN with CLIENT CACHING
// YES): a client can serve such a fill before it reads the push that
// follows (rueidis's DoCache with a static TTL did), so the push alone
// cannot keep a stale reply out of a cache. The push must not come before
// the reply either: rueidis keeps a fill that is still pending when an
// invalidation arrives.
//
// The commands and their replies and errors are Redis 7.2's. What is
// tracked follows Redis's rules too (OPTIN: the command after CLIENT
// CACHING YES; OPTOUT: all but the one after CLIENT CACHING NO; BCAST: the
// keys under its prefixes), except NOLOOP, which changes nothing: the
// reply ages with time, not with another client's write. Pushes need
// RESP3, as in Redis: a RESP2 connection with tracking on gets none, and
// REDIRECT is accepted only to the connection itself (bucketd has no
// Pub/Sub through which another connection could receive them).

// tracking is one connection's CLIENT TRACKING state; the zero value is
// off. Owned by the connection's goroutine.
type tracking struct {
	on                   bool // the one flag the command path checks
	bcast, optin, optout bool
	noloop               bool
	caching              bool     // CLIENT CACHING given for the next command
	redirect             int64    // 0, or the connection's own id
	prefixes             []string // BCAST prefixes, sorted; "" is every key
	prefixBytes          int      // the bytes of prefixes, at most maxPrefixBytes
	pendingKeys          [][]byte // keys of the invalidations not yet written, in plan order
	pendingCounts        []int    // how many of pendingKeys each invalidation has
	nextCount, nextKey   int      // the next invalidation to write
}

// trackingOptions is what CLIENT TRACKING's options ask for; the
// prefixes point into the command's arguments.
type trackingOptions struct {
	bcast, optin, optout, noloop bool
	redirect                     int64
	prefixes                     [][]byte
}

// Bounds on one connection's BCAST prefixes, in count and in bytes, so
// that one client cannot make bucketd hold unbounded memory with them (as
// it cannot with a transaction). Redis has none. A CLIENT TRACKING that
// would pass either is refused, and changes nothing.
const (
	maxPrefixes    = 4096
	maxPrefixBytes = 64 << 10
)

// cmdClientTracking answers CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p
// ...] [BCAST] [OPTIN] [OPTOUT] [NOLOOP]. The options are checked before
// ON or OFF is looked at, as Redis does.
func cmdClientTracking(s *session, args [][]byte) *errorReply {
	opts, e := s.trackingOptions(args[3:])
	if e != nil {
		return e
	}
	switch {
	case wire.EqualFold(args[2], "ON"):
		if e := s.tracking.enable(opts); e != nil {
			return e
		}
		s.c.SetOutputClass(resp.PubSubClient) // it gets pushes
	case wire.EqualFold(args[2], "OFF"):
		s.tracking.disable()
		s.c.SetOutputClass(resp.NormalClient)
	default:
		return errSyntax
	}
	s.w.String("OK")
	return nil
}

// trackingOptions parses the options of CLIENT TRACKING.
func (s *session) trackingOptions(args [][]byte) (trackingOptions, *errorReply) {
	var o trackingOptions
	for i := 0; i < len(args); i++ {
		more := i+1 < len(args)
		switch {
		case wire.EqualFold(args[i], "REDIRECT") && more:
			i++
			if o.redirect != 0 {
				return o, errRedirectTwice
			}
			id, ok := wire.ParseInt(args[i])
			if !ok {
				return o, errNotInteger
			}
			if e := s.checkRedirect(id); e != nil {
				return o, e
			}
			o.redirect = id
		case wire.EqualFold(args[i], "PREFIX") && more:
			i++
			o.prefixes = append(o.prefixes, args[i])
		case wire.EqualFold(args[i], "BCAST"):
			o.bcast = true
		case wire.EqualFold(args[i], "OPTIN"):
			o.optin = true
		case wire.EqualFold(args[i], "OPTOUT"):
			o.optout = true
		case wire.EqualFold(args[i], "NOLOOP"):
			o.noloop = true
		default:
			return o, errSyntax
		}
	}
	return o, nil
}

// checkRedirect accepts a REDIRECT to the connection itself, which is
// tracking without REDIRECT. An id never handed out is Redis's "does not
// exist"; any other connection is refused, because bucketd cannot deliver
// invalidations to it and a client that expected them there would serve
// stale replies.
func (s *session) checkRedirect(id int64) *errorReply {
	switch {
	case id == s.c.ID():
		return nil
	case id <= 0 || id > s.c.Server().LastClientID():
		return errRedirectMissing
	}
	return errRedirectElsewhere
}

// enable turns tracking on with o, after Redis's checks, in Redis's order.
// Turning it on again changes the mode; BCAST prefixes add up.
func (t *tracking) enable(o trackingOptions) *errorReply {
	switch {
	case !o.bcast && len(o.prefixes) > 0:
		return errPrefixNeedsBcast
	case t.on && t.bcast != o.bcast:
		return errBcastSwitch
	case o.bcast && (o.optin || o.optout):
		return errBcastOptIn
	case o.optin && o.optout:
		return errOptInAndOut
	case o.optin && t.optout || o.optout && t.optin:
		return errOptSwitch
	}
	if o.bcast {
		if e := t.addPrefixes(o.prefixes); e != nil {
			return e
		}
	}
	t.on, t.redirect = true, o.redirect
	t.bcast, t.optin, t.optout, t.noloop = o.bcast, o.optin, o.optout, o.noloop
	return nil
}

// addPrefixes adds BCAST prefixes, or none at all ("", every key), after
// the bounds and Redis's overlap check.
func (t *tracking) addPrefixes(prefixes [][]byte) *errorReply {
	n := 0
	for _, p := range prefixes {
		n += len(p)
	}
	if len(t.prefixes)+len(prefixes) > maxPrefixes || t.prefixBytes+n > maxPrefixBytes {
		return errTooManyPrefixes
	}
	if e := t.checkPrefixes(prefixes); e != nil {
		return e
	}
	if len(prefixes) == 0 {
		prefixes = [][]byte{nil}
	}
	for _, p := range prefixes {
		if i, found := slices.BinarySearch(t.prefixes, string(p)); !found {
			t.prefixes = slices.Insert(t.prefixes, i, string(p))
			t.prefixBytes += len(p)
		}
	}
	return nil
}

// checkPrefixes refuses a prefix that overlaps (one is a prefix of the
// other) one the connection has or another one given, with the reply
// Redis gives (checkPrefixCollisionsOrReply): for the first prefix given
// that overlaps any, the first prefix it overlaps among those the
// connection has, in their order, or else among those given after it.
// Redis compares every pair, which took 20 s for 40,000 prefixes; here
// the sorted orders find the same pair in O(n log n).
func (t *tracking) checkPrefixes(prefixes [][]byte) *errorReply {
	first, q := len(prefixes), ""
	for i, p := range prefixes { // the first prefix given that overlaps one the connection has
		if old, ok := t.overlapping(p); ok {
			first, q = i, old
			break
		}
	}
	if given := firstOverlapping(prefixes); given >= 0 && given < first {
		p := prefixes[given]
		for _, r := range prefixes[given+1:] {
			if overlap(p, r) {
				return prefixOverlap(p, r, "another provided")
			}
		}
	}
	if first < len(prefixes) {
		return prefixOverlap(prefixes[first], []byte(q), "an existing")
	}
	return nil
}

// overlapping returns the first of the connection's prefixes, in sorted
// order, that p overlaps. Of those, "" comes first; then at most one is a
// prefix of p (two would overlap each other), the largest at most p; then
// come those p is a prefix of, from the first at least p.
func (t *tracking) overlapping(p []byte) (string, bool) {
	ps := t.prefixes
	if len(ps) > 0 && ps[0] == "" {
		return "", true
	}
	i := upperBound(ps, p)
	if i > 0 && hasPrefix(p, ps[i-1]) {
		return ps[i-1], true
	}
	if i < len(ps) && len(ps[i]) >= len(p) && ps[i][:len(p)] == string(p) {
		return ps[i], true
	}
	return "", false
}

// firstOverlapping returns the position of the first of prefixes that
// overlaps another of them, or -1. Sorted, a prefix comes right before
// the strings it is a prefix of, so a walk with a stack of the prefixes
// of the current string finds every prefix involved in an overlap.
func firstOverlapping(prefixes [][]byte) int {
	order := make([]int, len(prefixes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return bytes.Compare(prefixes[a], prefixes[b]) })
	first := -1
	mark := func(i int) {
		if first < 0 || i < first {
			first = i
		}
	}
	var stack []int
	for _, i := range order {
		for len(stack) > 0 && !bytes.HasPrefix(prefixes[i], prefixes[stack[len(stack)-1]]) {
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 {
			mark(i)
			mark(stack[len(stack)-1])
		}
		stack = append(stack, i)
	}
	return first
}

func overlap(a, b []byte) bool { return bytes.HasPrefix(a, b) || bytes.HasPrefix(b, a) }

// hasPrefix reports whether key starts with p.
func hasPrefix(key []byte, p string) bool { return len(key) >= len(p) && string(key[:len(p)]) == p }

// upperBound is the number of sorted ps that are at most key.
func upperBound(ps []string, key []byte) int {
	lo, hi := 0, len(ps)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ps[m] <= string(key) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// disable turns tracking off and forgets its options and prefixes.
func (t *tracking) disable() {
	*t = tracking{
		prefixes:      t.prefixes[:0],
		pendingKeys:   t.pendingKeys[:0],
		pendingCounts: t.pendingCounts[:0],
	}
}

// cmdClientCaching answers CLIENT CACHING YES|NO, which says whether the
// next command is tracked (YES in OPTIN mode, NO in OPTOUT mode).
func cmdClientCaching(s *session, args [][]byte) *errorReply {
	t := &s.tracking
	switch {
	case !t.on:
		return errCachingOff
	case wire.EqualFold(args[2], "YES"):
		if !t.optin {
			return errCachingYes
		}
	case wire.EqualFold(args[2], "NO"):
		if !t.optout {
			return errCachingNo
		}
	default:
		return errSyntax
	}
	t.caching = true
	s.w.String("OK")
	return nil
}

// cmdClientTrackingInfo answers CLIENT TRACKINGINFO as Redis does: a map of
// the flags (a set), the redirect id (-1 when off) and the BCAST prefixes.
func cmdClientTrackingInfo(s *session, args [][]byte) *errorReply {
	t := &s.tracking
	var flags [5]string
	n := 0
	add := func(on bool, name string) {
		if on {
			flags[n] = name
			n++
		}
	}
	add(!t.on, "off")
	add(t.on, "on")
	add(t.bcast, "bcast")
	add(t.optin, "optin")
	add(t.optin && t.caching, "caching-yes")
	add(t.optout, "optout")
	add(t.optout && t.caching, "caching-no")
	add(t.noloop, "noloop")
	s.w.Map(3)
	s.w.BulkString("flags")
	s.w.Set(n)
	for _, f := range flags[:n] {
		s.w.BulkString(f)
	}
	s.w.BulkString("redirect")
	s.w.Int64(t.redirectReply())
	s.w.BulkString("prefixes")
	s.w.Array(len(t.prefixes))
	for _, p := range t.prefixes {
		s.w.BulkString(p)
	}
	return nil
}

// cmdClientGetRedir answers CLIENT GETREDIR: the redirect id, 0 for none,
// -1 when tracking is off.
func cmdClientGetRedir(s *session, args [][]byte) *errorReply {
	s.w.Int64(s.tracking.redirectReply())
	return nil
}

func (t *tracking) redirectReply() int64 {
	if !t.on {
		return -1
	}
	return t.redirect
}

// trackCommand runs after each command while tracking is on. For a bucket
// command that was planned (no error) and whose read is tracked, it queues
// the invalidation flushPlan writes after the reply. Then it uses CLIENT
// CACHING up: it applies to the next command other than CLIENT, as in
// Redis, or to the whole transaction when MULTI follows (it is kept while
// the transaction is open, and EXEC or DISCARD uses it up).
func (s *session) trackCommand(cmd *commandSpec, planned bool, args [][]byte) {
	t := &s.tracking
	if planned && t.tracks() && s.w.RESP3() && t.trackKeys(cmd.keys, args) {
		s.pipe.plan[len(s.pipe.plan)-1].push = true
	}
	if !s.tx.open && !wire.EqualFold(args[0], "CLIENT") {
		t.caching = false
	}
}

// cachingAsked reports whether the client asked, with CLIENT CACHING YES in
// OPTIN mode, to cache the reply of the command being answered. A bucket
// command gets errNotCacheable then: the invalidation push that follows
// its reply cannot be relied on, since a client may serve a cache fill
// before it reads the push (rueidis's DoCache with a static TTL was seen
// doing so), and a bucket reply is stale at once.
func (t *tracking) cachingAsked() bool { return t.optin && t.caching }

// tracks reports whether the command being answered is tracked, as far as
// OPTIN, OPTOUT and CLIENT CACHING decide.
func (t *tracking) tracks() bool {
	return !(t.optin && !t.caching) && !(t.optout && t.caching)
}

// trackKeys queues an invalidation of the keys of a bucket command (in
// BCAST mode those under a prefix), if there are any, and reports whether
// it did: whoever writes the command's reply writes it after that.
func (t *tracking) trackKeys(kr keyRange, args [][]byte) bool {
	last := kr.last
	if last < 0 {
		last += len(args)
	}
	if kr.triples { // a planned TB.MACQUIRE: numbuckets is valid
		n, _ := wire.ParseInt(args[1])
		kr.first, last, kr.step = 2, 2+3*(int(n)-1), 3
	}
	n := 0
	for i := kr.first; i <= last; i += kr.step {
		if t.bcast && !t.matchesPrefix(args[i]) {
			continue
		}
		t.pendingKeys = append(t.pendingKeys, args[i])
		n++
	}
	if n > 0 {
		t.pendingCounts = append(t.pendingCounts, n)
	}
	return n > 0
}

// matchesPrefix reports whether key is under one of the BCAST prefixes: ""
// (every key), or else the largest prefix at most key, the only one that
// can be a prefix of it (see overlapping).
func (t *tracking) matchesPrefix(key []byte) bool {
	ps := t.prefixes
	if len(ps) == 0 {
		return false
	}
	if ps[0] == "" {
		return true
	}
	i := upperBound(ps, key)
	return i > 0 && hasPrefix(key, ps[i-1])
}

// writeInvalidation takes the next queued invalidation and, if send (the
// reply carried a value, not an error), writes it:
// >2 $10 invalidate *n $len key ...
// It must follow a whole top-level reply: a reply nested in another (an
// element of EXEC's array) gets its invalidation after the outer reply
// (writeQueued).
func (t *tracking) writeInvalidation(w *wire.Writer, send bool) {
	n := t.pendingCounts[t.nextCount]
	keys := t.pendingKeys[t.nextKey : t.nextKey+n]
	t.nextCount++
	t.nextKey += n
	if send {
		w.Push(2)
		w.BulkString("invalidate")
		w.Array(n)
		for _, k := range keys {
			w.Bulk(k)
		}
	}
	if t.nextCount == len(t.pendingCounts) { // all written: drop the references to the read buffer
		clear(t.pendingKeys)
		t.pendingKeys, t.pendingCounts = t.pendingKeys[:0], t.pendingCounts[:0]
		t.nextCount, t.nextKey = 0, 0
	}
}
