package resp

import (
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
		write        func(*session, *bufConn)
		resp2, resp3 string
	}{
		{"map", func(s *session, c *bufConn) { s.writeMap(c, 2) }, "*4\r\n", "%2\r\n"},
		{"empty map", func(s *session, c *bufConn) { s.writeMap(c, 0) }, "*0\r\n", "%0\r\n"},
		{"set", func(s *session, c *bufConn) { s.writeSet(c, 3) }, "*3\r\n", "~3\r\n"},
		{"null", func(s *session, c *bufConn) { s.writeNull(c) }, "$-1\r\n", "_\r\n"},
		{"null array", func(s *session, c *bufConn) { s.writeNullArray(c) }, "*-1\r\n", "_\r\n"},
		{"verbatim", func(s *session, c *bufConn) { s.writeVerbatim(c, []byte("a:1\r\n")) }, "$5\r\na:1\r\n\r\n", "=9\r\ntxt:a:1\r\n\r\n"},
		{"empty verbatim", func(s *session, c *bufConn) { s.writeVerbatim(c, nil) }, "$0\r\n\r\n", "=4\r\ntxt:\r\n"},
		{"double", func(s *session, c *bufConn) { s.writeDouble(c, 1.5) }, "$3\r\n1.5\r\n", ",1.5\r\n"},
		{"large double", func(s *session, c *bufConn) { s.writeDouble(c, 1e300) }, "$6\r\n1e+300\r\n", ",1e+300\r\n"},
		{"infinity", func(s *session, c *bufConn) { s.writeDouble(c, math.Inf(-1)) }, "$4\r\n-inf\r\n", ",-inf\r\n"},
		{"nan", func(s *session, c *bufConn) { s.writeDouble(c, math.NaN()) }, "$3\r\nnan\r\n", ",nan\r\n"},
	} {
		for _, resp3 := range []bool{false, true} {
			sess := &session{}
			sess.resp3 = resp3
			c := &bufConn{sess: sess}
			tc.write(sess, c)
			want := tc.resp2
			if resp3 {
				want = tc.resp3
			}
			if string(c.out) != want {
				t.Errorf("%s, RESP3 %v: %q, want %q", tc.name, resp3, c.out, want)
			}
		}
	}
}
