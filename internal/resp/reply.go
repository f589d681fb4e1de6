package resp

import (
	"math"
	"strconv"

	"github.com/tidwall/redcon"
)

// The reply types that differ between RESP2 and RESP3, written in the
// connection's protocol. redcon writes RESP2 only; a handler that sends a
// map, a set, a null, a verbatim string or a double calls one of these (the
// one push, an invalidation, is in tracking.go). On a RESP3 connection the
// header is appended to the session's scratch buffer and handed to WriteRaw,
// which copies it, so nothing is allocated once the buffer has grown.
// Integers, simple and bulk strings, arrays and errors are the same in both
// protocols: handlers write them with redcon's methods, and the bucket
// commands' replies never come here.

// wire is a connection's choice of protocol: the RESP version of its
// replies and client-side caching. Owned by the connection's goroutine;
// the zero value is RESP2 without tracking, what a new connection has.
type wire struct {
	resp3    bool     // HELLO 3 was accepted; HELLO 2 clears it
	tracking tracking // CLIENT TRACKING (tracking.go)
	scratch  []byte   // reused to encode RESP3 headers and pushes
}

// Replies that are the same bytes every time, shared: WriteRaw copies them.
var (
	null3      = []byte("_\r\n")
	nullArray2 = []byte("*-1\r\n")
	crlf       = []byte("\r\n")
)

// appendHeader appends a type byte, a count or length, and CRLF.
func appendHeader(dst []byte, typ byte, n int) []byte {
	dst = append(dst, typ)
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, '\r', '\n')
}

// writeRaw3 writes a RESP3 header through the scratch buffer.
func (sess *session) writeRaw3(c redcon.Conn, typ byte, n int) {
	sess.scratch = appendHeader(sess.scratch[:0], typ, n)
	c.WriteRaw(sess.scratch)
}

// writeMap starts a map of n key-value pairs; RESP2 sends it as a flat
// array of 2n elements, as Redis does.
func (sess *session) writeMap(c redcon.Conn, n int) {
	if sess.resp3 {
		sess.writeRaw3(c, '%', n)
	} else {
		c.WriteArray(2 * n)
	}
}

// writeSet starts a set of n elements; an array in RESP2.
func (sess *session) writeSet(c redcon.Conn, n int) {
	if sess.resp3 {
		sess.writeRaw3(c, '~', n)
	} else {
		c.WriteArray(n)
	}
}

// writeNull writes the null Redis sends where a string is missing
// (addReplyNull): the null bulk string $-1 in RESP2, _ in RESP3.
func (sess *session) writeNull(c redcon.Conn) {
	if sess.resp3 {
		c.WriteRaw(null3)
	} else {
		c.WriteNull()
	}
}

// writeNullArray writes the null Redis sends where an array is missing
// (addReplyNullArray, e.g. an EXEC aborted by WATCH): *-1 in RESP2, _ in
// RESP3.
func (sess *session) writeNullArray(c redcon.Conn) {
	if sess.resp3 {
		c.WriteRaw(null3)
	} else {
		c.WriteRaw(nullArray2)
	}
}

// writeVerbatim writes text as a verbatim string of format "txt", as Redis
// sends INFO in RESP3 (the length counts the "txt:" prefix); a bulk string
// in RESP2.
func (sess *session) writeVerbatim(c redcon.Conn, text []byte) {
	if !sess.resp3 {
		c.WriteBulk(text)
		return
	}
	sess.scratch = appendHeader(sess.scratch[:0], '=', len("txt:")+len(text))
	sess.scratch = append(sess.scratch, "txt:"...)
	c.WriteRaw(sess.scratch)
	c.WriteRaw(text)
	c.WriteRaw(crlf)
}

// writeDouble writes f as Redis 7.2 does (addReplyDouble): a RESP3 double,
// or in RESP2 a bulk string of the same text, the shortest that reads back
// as f, and inf, -inf or nan.
func (sess *session) writeDouble(c redcon.Conn, f float64) {
	var num [32]byte
	var text []byte
	switch {
	case math.IsInf(f, 1):
		text = append(num[:0], "inf"...)
	case math.IsInf(f, -1):
		text = append(num[:0], "-inf"...)
	case math.IsNaN(f):
		text = append(num[:0], "nan"...)
	default:
		text = strconv.AppendFloat(num[:0], f, 'g', -1, 64)
	}
	if !sess.resp3 {
		c.WriteBulk(text)
		return
	}
	sess.scratch = append(append(sess.scratch[:0], ','), text...)
	sess.scratch = append(sess.scratch, '\r', '\n')
	c.WriteRaw(sess.scratch)
}
