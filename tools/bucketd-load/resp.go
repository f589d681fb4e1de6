package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// appendCommand appends args as one RESP array of bulk strings and returns
// the result and, for the argument at keyArg, the offset of its first byte
// in the appended command (-1 if keyArg is out of range).
func appendCommand(b []byte, keyArg int, args ...string) ([]byte, int) {
	start := len(b)
	keyOff := -1
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for i, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		if i == keyArg {
			keyOff = len(b) - start
		}
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b, keyOff
}

// keyFormat makes fixed-width keys: prefix followed by the key number in
// decimal, zero-padded to width bytes in all. Every key has the same length
// so a pipeline's command bytes are built once and only the digits change.
type keyFormat struct {
	prefix string
	width  int // total key length in bytes
}

func (k keyFormat) digits() int { return k.width - len(k.prefix) }

// check reports whether every key number below n fits.
func (k keyFormat) check(n int64) error {
	d := k.digits()
	if d < 1 {
		return fmt.Errorf("key length %d leaves no room for digits after prefix %q", k.width, k.prefix)
	}
	if n > 0 && len(strconv.FormatInt(n-1, 10)) > d {
		return fmt.Errorf("%d keys do not fit in %d-byte keys with prefix %q (%d digits)", n, k.width, k.prefix, d)
	}
	return nil
}

// template is the key with every digit zero.
func (k keyFormat) template() string {
	b := make([]byte, k.width)
	copy(b, k.prefix)
	for i := len(k.prefix); i < k.width; i++ {
		b[i] = '0'
	}
	return string(b)
}

// put writes key number v into dst, which holds a key made by template.
func (k keyFormat) put(dst []byte, v uint64) {
	for i := k.width - 1; i >= len(k.prefix); i-- {
		dst[i] = byte('0' + v%10)
		v /= 10
	}
}

// reply is the class of one reply read by readReply.
type reply int

const (
	replyDenied  reply = iota // :0
	replyAllowed              // :1
	replyOther                // anything else: an error for this load
)

var errProtocol = errors.New("malformed reply")

// readReply reads one whole RESP2 reply. An integer 0 or 1 is a decision;
// any other reply is consumed whole (so the stream stays in step) and
// classed replyOther, with its first line returned for the report. The
// returned line aliases r's buffer: copy it to keep it. It allocates
// nothing for :0 and :1.
func readReply(r *bufio.Reader) (reply, []byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return replyOther, nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return replyOther, line, errProtocol
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case ':':
		if len(body) == 1 {
			switch body[0] {
			case '0':
				return replyDenied, nil, nil
			case '1':
				return replyAllowed, nil, nil
			}
		}
		return replyOther, line, nil
	case '+', '-':
		return replyOther, line, nil
	case '$':
		n, err := strconv.Atoi(string(body))
		if err != nil {
			return replyOther, line, errProtocol
		}
		if n >= 0 {
			if _, err := r.Discard(n + 2); err != nil {
				return replyOther, line, err
			}
		}
		return replyOther, line, nil
	case '*':
		n, err := strconv.Atoi(string(body))
		if err != nil {
			return replyOther, line, errProtocol
		}
		first := append([]byte(nil), line...)
		for i := 0; i < n; i++ {
			if _, _, err := readReply(r); err != nil {
				return replyOther, first, err
			}
		}
		return replyOther, first, nil
	}
	return replyOther, line, errProtocol
}

// readBulk reads a reply that must be a bulk string (INFO, SCRIPT LOAD).
func readBulk(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if len(line) < 3 || line[0] != '$' {
		return "", fmt.Errorf("expected a bulk string, got %q", trimLine(line))
	}
	n, err := strconv.Atoi(line[1 : len(line)-2])
	if err != nil || n < 0 {
		return "", fmt.Errorf("expected a bulk string, got %q", trimLine(line))
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func trimLine(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}
