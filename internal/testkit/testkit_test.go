package testkit

import (
	"bufio"
	"errors"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestCommandEncodesBulkStrings(t *testing.T) {
	got := Command("ECHO", "a\r\nb", "")
	if want := "*3\r\n$4\r\nECHO\r\n$4\r\na\r\nb\r\n$0\r\n\r\n"; got != want {
		t.Fatalf("Command = %q, want %q", got, want)
	}
}

// TestReadReplyEveryType: each RESP2 type comes back byte for byte, and a
// stream of them is split at the right places.
func TestReadReplyEveryType(t *testing.T) {
	replies := []string{
		"+OK\r\n", "-ERR bad\r\n", ":-42\r\n", "$5\r\nhe\r\nl\r\n", "$0\r\n\r\n", "$-1\r\n", "*-1\r\n", "*0\r\n",
		"*3\r\n:1\r\n*2\r\n+a\r\n$-1\r\n$1\r\nx\r\n",
	}
	r := bufio.NewReader(strings.NewReader(strings.Join(replies, "")))
	for _, want := range replies {
		got, err := ReadReply(r)
		if err != nil || got != want {
			t.Fatalf("ReadReply = %q, %v; want %q", got, err, want)
		}
	}
	if got, err := ReadReply(r); got != "" || err != io.EOF {
		t.Fatalf("at the end: %q, %v; want io.EOF", got, err)
	}
}

func TestReadReplyRefusesBadFraming(t *testing.T) {
	for _, in := range []string{
		"+OK\n", ":x\r\n", "$3\r\nabcd\r\n", "$-2\r\n", "$99999999999\r\n", "*-2\r\n", "*2\r\n:1\r\n!\r\n", "?\r\n",
	} {
		if got, err := ReadReply(bufio.NewReader(strings.NewReader(in))); !errors.Is(err, ErrBadFrame) {
			t.Errorf("ReadReply(%q) = %q, %v; want ErrBadFrame", in, got, err)
		}
	}
	// A reply cut short by the connection ending is an I/O error, not bad
	// framing, and what was read is returned.
	got, err := ReadReply(bufio.NewReader(strings.NewReader("*2\r\n:1\r\n$3\r\nab")))
	if errors.Is(err, ErrBadFrame) || err == nil || got != "*2\r\n:1\r\n$3\r\n" {
		t.Fatalf("cut short: %q, %v", got, err)
	}
}

func TestClockMovesOnlyWhenAdvanced(t *testing.T) {
	c := NewClock()
	start := c.Now()
	if start != startMicros {
		t.Fatalf("a new clock reads %d µs, want %d", start, startMicros)
	}
	c.Advance(1500*time.Microsecond + 999*time.Nanosecond)
	if got := c.Now() - start; got != 1500 {
		t.Fatalf("Advance(1.500999 ms) moved the clock %d µs, want 1500", got)
	}
	if d := c.Base().UnixMicros(start) - time.Now().UnixMicro(); d > 0 || d < -int64(time.Minute/time.Microsecond) {
		t.Fatalf("the start is %d µs from now in Unix time; want the moment NewClock ran", d)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Advance with a negative duration did not panic")
		}
	}()
	c.Advance(-time.Microsecond)
}

func TestPollAndEventually(t *testing.T) {
	var n atomic.Int64
	Eventually(t, 5*time.Second, "the third call", func() bool { return n.Add(1) >= 3 })
	if n.Load() != 3 {
		t.Fatalf("cond called %d times, want 3", n.Load())
	}
	start := time.Now()
	if Poll(30*time.Millisecond, func() bool { return false }) {
		t.Fatal("Poll reported a false condition as true")
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("Poll gave up after %v, before its 30ms timeout", d)
	}
}

// TestSkipShort: SkipShort skips exactly under -short, and its message
// names the reason and where the test runs instead.
func TestSkipShort(t *testing.T) {
	reached := false
	var sub *testing.T
	t.Run("sub", func(t *testing.T) {
		sub = t
		SkipShort(t, "fault injection")
		reached = true
	})
	if sub.Skipped() != testing.Short() || reached == testing.Short() {
		t.Fatalf("-short %v: skipped %v, went on %v", testing.Short(), sub.Skipped(), reached)
	}
}

func TestReadMemoryOfThisProcess(t *testing.T) {
	m, err := ReadMemory(os.Getpid())
	if _, statErr := os.Stat("/proc/self/status"); statErr != nil {
		if err == nil {
			t.Fatal("no /proc, yet ReadMemory succeeded")
		}
		t.Logf("no /proc here: %v", err)
		return
	}
	if err != nil || m.RSS <= 0 || m.HWM < m.RSS {
		t.Fatalf("ReadMemory = %+v, %v; want 0 < RSS <= HWM", m, err)
	}
}
