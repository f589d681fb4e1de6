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

// Bytes returns what was written since the last Flush (or Reset), valid
// until the next write.
func (w *Writer) Bytes() []byte { return w.b }

// Reset forgets what was written since the last Flush.
func (w *Writer) Reset() { w.b = w.b[:0] }

// Flush writes everything written since the last Flush to dst.
func (w *Writer) Flush(dst io.Writer) error {
	if len(w.b) == 0 {
		return nil
	}
	_, err := dst.Write(w.b)
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

// Bulk writes a bulk string.
func (w *Writer) Bulk(b []byte) { w.b = redcon.AppendBulk(w.b, b) }

// BulkString writes a bulk string.
func (w *Writer) BulkString(s string) { w.b = redcon.AppendBulkString(w.b, s) }

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

// Raw writes b as it is: bytes that are RESP already.
func (w *Writer) Raw(b []byte) { w.b = append(w.b, b...) }

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
