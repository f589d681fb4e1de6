package wire

import (
	"io"
	"math"
	"strconv"

	"github.com/tidwall/redcon"
)

// Writer builds a connection's replies in memory, in the connection's
// protocol, and writes them with one system call at Flush. Integers,
// simple and bulk strings, arrays and errors are the same in RESP2 and
// RESP3; maps, sets, nulls, verbatim strings, doubles and pushes are
// written as Redis 7 writes them in each. The encoding is redcon's
// (redcon.AppendInt and friends); nothing here allocates once the buffer
// has grown. A Writer is used by one goroutine.
type Writer struct {
	b     []byte
	resp3 bool
	limit int  // Over's bound on the bytes written since the last Flush; 0: none
	over  bool // a payload was left out: it would have passed limit
}

// maxKeptBuffer is the largest reply buffer a connection keeps after a
// Flush; a larger one, from a big reply, is given back.
const maxKeptBuffer = 256 << 10

// SetRESP3 switches the protocol of the replies that follow: HELLO 3 and
// HELLO 2.
func (w *Writer) SetRESP3(on bool) { w.resp3 = on }

// RESP3 reports whether replies are written in RESP3.
func (w *Writer) RESP3() bool { return w.resp3 }

// Len is the number of bytes written since the last Flush.
func (w *Writer) Len() int { return len(w.b) }

// SetLimit sets the bound Over compares Len with; 0 (the zero value's)
// means none.
func (w *Writer) SetLimit(n int) { w.limit = max(n, 0) }

// Over reports whether more than the limit has been written since the last
// Flush: whoever builds replies checks it after each, so that a connection
// whose replies pass its output limit is caught while they are built, not
// when they are written. A bulk or raw payload that would pass the limit
// is left out, and Over reports true from then on: the Writer never grows
// (and copies) past its limit for it, and what it holds is not a reply
// any more, so it must not be written.
func (w *Writer) Over() bool { return w.over || w.limit > 0 && len(w.b) > w.limit }

// fits reports whether n more bytes keep the Writer within its limit, and
// marks it over otherwise.
func (w *Writer) fits(n int) bool {
	if w.limit > 0 && len(w.b)+n > w.limit {
		w.over = true
	}
	return !w.over
}

// Bytes returns what was written since the last Flush (or Reset), valid
// until the next write.
func (w *Writer) Bytes() []byte { return w.b }

// Reset forgets what was written since the last Flush.
func (w *Writer) Reset() { w.b, w.over = w.b[:0], false }

// Flush writes everything written since the last Flush to dst.
func (w *Writer) Flush(dst io.Writer) error {
	if len(w.b) == 0 {
		return nil
	}
	_, err := dst.Write(w.b)
	w.over = false
	if cap(w.b) > maxKeptBuffer {
		w.b = nil
	} else {
		w.b = w.b[:0]
	}
	return err
}

// Int writes an integer.
func (w *Writer) Int(n int) { w.b = redcon.AppendInt(w.b, int64(n)) }

// Int64 writes an integer.
func (w *Writer) Int64(n int64) { w.b = redcon.AppendInt(w.b, n) }

// Bool writes 1 for true and 0 for false, as the replies show them.
func (w *Writer) Bool(b bool) {
	if b {
		w.b = append(w.b, ":1\r\n"...)
	} else {
		w.b = append(w.b, ":0\r\n"...)
	}
}

// Bulk writes a bulk string (unless it would pass the limit: see Over).
func (w *Writer) Bulk(b []byte) {
	if w.fits(len(b)) {
		w.b = redcon.AppendBulk(w.b, b)
	}
}

// BulkString writes a bulk string (unless it would pass the limit: see
// Over).
func (w *Writer) BulkString(s string) {
	if w.fits(len(s)) {
		w.b = redcon.AppendBulkString(w.b, s)
	}
}

// String writes a simple string (+OK); s must hold no CR or LF.
func (w *Writer) String(s string) { w.b = redcon.AppendString(w.b, s) }

// ErrorReply writes an error line, with any CR or LF in msg turned into spaces
// so that a client's bytes echoed in an error cannot break framing.
func (w *Writer) ErrorReply(msg string) { w.b = AppendErrorLine(w.b, msg) }

// Array starts an array of n elements.
func (w *Writer) Array(n int) { w.b = redcon.AppendArray(w.b, n) }

// Map starts a map of n key-value pairs; RESP2 sends it as a flat array of
// 2n elements, as Redis does.
func (w *Writer) Map(n int) {
	if w.resp3 {
		w.b = appendHeader(w.b, '%', n)
	} else {
		w.Array(2 * n)
	}
}

// Set starts a set of n elements; an array in RESP2.
func (w *Writer) Set(n int) {
	if w.resp3 {
		w.b = appendHeader(w.b, '~', n)
	} else {
		w.Array(n)
	}
}

// Raw writes b as it is: bytes that are RESP already (unless they would
// pass the limit: see Over).
func (w *Writer) Raw(b []byte) {
	if w.fits(len(b)) {
		w.b = append(w.b, b...)
	}
}

// Push starts a push of n elements (an invalidation); RESP3 only, where
// callers use it.
func (w *Writer) Push(n int) { w.b = appendHeader(w.b, '>', n) }

// Null writes the null Redis sends where a string is missing
// (addReplyNull): the null bulk string $-1 in RESP2, _ in RESP3.
func (w *Writer) Null() {
	if w.resp3 {
		w.b = append(w.b, "_\r\n"...)
	} else {
		w.b = append(w.b, "$-1\r\n"...)
	}
}

// NullArray writes the null Redis sends where an array is missing
// (addReplyNullArray): *-1 in RESP2, _ in RESP3.
func (w *Writer) NullArray() {
	if w.resp3 {
		w.b = append(w.b, "_\r\n"...)
	} else {
		w.b = append(w.b, "*-1\r\n"...)
	}
}

// Verbatim writes text as a verbatim string of format "txt", as Redis
// sends INFO in RESP3 (the length counts the "txt:" prefix); a bulk string
// in RESP2.
func (w *Writer) Verbatim(text []byte) {
	if !w.resp3 {
		w.Bulk(text)
		return
	}
	if !w.fits(len(text)) {
		return
	}
	w.b = appendHeader(w.b, '=', len("txt:")+len(text))
	w.b = append(w.b, "txt:"...)
	w.b = append(w.b, text...)
	w.b = append(w.b, '\r', '\n')
}

// Double writes f as Redis 7.2 does (addReplyDouble): a RESP3 double, or
// in RESP2 a bulk string of the same text, the shortest that reads back as
// f, and inf, -inf or nan.
func (w *Writer) Double(f float64) {
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
	if !w.resp3 {
		w.Bulk(text)
		return
	}
	w.b = append(w.b, ',')
	w.b = append(w.b, text...)
	w.b = append(w.b, '\r', '\n')
}

// appendHeader appends a type byte, a count or length, and CRLF.
func appendHeader(dst []byte, typ byte, n int) []byte {
	dst = append(dst, typ)
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, '\r', '\n')
}

// AppendErrorLine appends "-msg\r\n", with any CR or LF in msg turned into
// spaces so that a client's bytes echoed in an error cannot break framing.
func AppendErrorLine(dst []byte, msg string) []byte {
	dst = append(dst, '-')
	for i := range len(msg) {
		c := msg[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		dst = append(dst, c)
	}
	return append(dst, '\r', '\n')
}
