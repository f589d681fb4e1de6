package command

import (
	"slices"
	"strings"

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
	pendingKeys          [][]byte // keys of the invalidations not yet written, in plan order
	pendingCounts        []int    // how many of pendingKeys each invalidation has
	nextCount, nextKey   int      // the next invalidation to write
}

// trackingOptions is what CLIENT TRACKING's options ask for.
type trackingOptions struct {
	bcast, optin, optout, noloop bool
	redirect                     int64
	prefixes                     []string
}

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
	case wire.EqualFold(args[2], "OFF"):
		s.tracking.disable()
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
			o.prefixes = append(o.prefixes, string(args[i]))
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
		if e := t.checkPrefixes(o.prefixes); e != nil {
			return e
		}
		if len(o.prefixes) == 0 {
			o.prefixes = []string{""}
		}
		for _, p := range o.prefixes {
			if i, found := slices.BinarySearch(t.prefixes, p); !found {
				t.prefixes = slices.Insert(t.prefixes, i, p)
			}
		}
	}
	t.on, t.redirect = true, o.redirect
	t.bcast, t.optin, t.optout, t.noloop = o.bcast, o.optin, o.optout, o.noloop
	return nil
}

// checkPrefixes refuses a prefix that overlaps (one is a prefix of the
// other) one the connection has or another one given, as Redis does.
func (t *tracking) checkPrefixes(prefixes []string) *errorReply {
	overlap := func(a, b string) bool { return strings.HasPrefix(a, b) || strings.HasPrefix(b, a) }
	for i, p := range prefixes {
		for _, old := range t.prefixes {
			if overlap(old, p) {
				return prefixOverlap(p, old, "an existing")
			}
		}
		for _, q := range prefixes[i+1:] {
			if overlap(p, q) {
				return prefixOverlap(p, q, "another provided")
			}
		}
	}
	return nil
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

func (t *tracking) matchesPrefix(key []byte) bool {
	for _, p := range t.prefixes {
		if len(key) >= len(p) && string(key[:len(p)]) == p {
			return true
		}
	}
	return false
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
