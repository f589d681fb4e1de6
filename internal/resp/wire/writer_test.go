package wire

import (
	"bytes"
	"math"
	"testing"
)

// TestReplyTypesInBothProtocols: each reply type that differs between the
// protocols comes out as Redis 7.2 writes it in each (networking.c:
// addReplyMapLen, addReplySetLen, addReplyNull, addReplyNullArray,
// addReplyVerbatim, addReplyDouble).
func TestReplyTypesInBothProtocols(t *testing.T) {
	for _, tc := range []struct {
		name         string
		write        func(*Writer)
		resp2, resp3 string
	}{
		{"map", func(w *Writer) { w.Map(2) }, "*4\r\n", "%2\r\n"},
		{"empty map", func(w *Writer) { w.Map(0) }, "*0\r\n", "%0\r\n"},
		{"set", func(w *Writer) { w.Set(3) }, "*3\r\n", "~3\r\n"},
		{"null", func(w *Writer) { w.Null() }, "$-1\r\n", "_\r\n"},
		{"null array", func(w *Writer) { w.NullArray() }, "*-1\r\n", "_\r\n"},
		{"verbatim", func(w *Writer) { w.Verbatim([]byte("a:1\r\n")) }, "$5\r\na:1\r\n\r\n", "=9\r\ntxt:a:1\r\n\r\n"},
		{"empty verbatim", func(w *Writer) { w.Verbatim(nil) }, "$0\r\n\r\n", "=4\r\ntxt:\r\n"},
		{"double", func(w *Writer) { w.Double(1.5) }, "$3\r\n1.5\r\n", ",1.5\r\n"},
		{"large double", func(w *Writer) { w.Double(1e300) }, "$6\r\n1e+300\r\n", ",1e+300\r\n"},
		{"infinity", func(w *Writer) { w.Double(math.Inf(-1)) }, "$4\r\n-inf\r\n", ",-inf\r\n"},
		{"nan", func(w *Writer) { w.Double(math.NaN()) }, "$3\r\nnan\r\n", ",nan\r\n"},
		{"the same in both", func(w *Writer) {
			w.Int(-7)
			w.Int64(-8)
			w.Bool(true)
			w.String("OK")
			w.ErrorReply("ERR a\r\nb")
			w.Array(1)
			w.BulkString("x")
		}, ":-7\r\n:-8\r\n:1\r\n+OK\r\n-ERR a  b\r\n*1\r\n$1\r\nx\r\n", ":-7\r\n:-8\r\n:1\r\n+OK\r\n-ERR a  b\r\n*1\r\n$1\r\nx\r\n"},
	} {
		for _, resp3 := range []bool{false, true} {
			var w Writer
			w.SetRESP3(resp3)
			tc.write(&w)
			want := tc.resp2
			if resp3 {
				want = tc.resp3
			}
			var out bytes.Buffer
			if n := w.Len(); n != len(want) {
				t.Errorf("%s, RESP3 %v: Len %d, want %d", tc.name, resp3, n, len(want))
			}
			if err := w.Flush(&out); err != nil {
				t.Fatal(err)
			}
			if out.String() != want || w.Len() != 0 {
				t.Errorf("%s, RESP3 %v: %q, want %q", tc.name, resp3, out.String(), want)
			}
		}
	}
}

// TestWriterOver: Over reports more than the limit written since the last
// Flush; the zero Writer, and a limit of 0, have none.
func TestWriterOver(t *testing.T) {
	var w Writer
	w.Raw(make([]byte, 1<<20))
	if w.Over() {
		t.Fatal("the zero Writer is over a limit")
	}
	w.Reset()
	w.SetLimit(10)
	w.String("0123456") // +0123456\r\n: 10 bytes
	if w.Over() {
		t.Fatalf("%d bytes are over a limit of 10", w.Len())
	}
	w.Int(1)
	if !w.Over() {
		t.Fatalf("%d bytes are not over a limit of 10", w.Len())
	}
	if err := w.Flush(&bytes.Buffer{}); err != nil || w.Over() {
		t.Fatalf("after Flush: over %v, %v", w.Over(), err)
	}
	// A payload that would pass the limit is left out.
	w.Bulk(make([]byte, 20))
	if !w.Over() || w.Len() != 0 {
		t.Fatalf("a bulk of 20 bytes with a limit of 10: over %v, %d bytes held", w.Over(), w.Len())
	}
	w.Int(1)
	if !w.Over() {
		t.Fatal("over no more after a payload was left out")
	}
	w.Reset()
	w.SetLimit(0)
	w.Raw(make([]byte, 100))
	if w.Over() {
		t.Fatal("a limit of 0 is a limit")
	}
}
