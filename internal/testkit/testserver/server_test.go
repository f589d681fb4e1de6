package testserver

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestStartRunsOnTheFakeClock: the shards see only the time the test gives
// them, and Shutdown may be called before the cleanup does.
func TestStartRunsOnTheFakeClock(t *testing.T) {
	s := Start(t, Options{})
	c := s.Dial(t)
	for _, want := range []string{":1\r\n", ":0\r\n"} {
		if got := c.Do(t, "TB.ACQUIRE", "k", "1", "1"); got != want {
			t.Fatalf("TB.ACQUIRE = %q, want %q", got, want)
		}
	}
	s.Clock.Advance(999 * time.Millisecond)
	if got := c.Do(t, "TB.ACQUIRE", "k", "1", "1"); got != ":0\r\n" {
		t.Fatalf("after 999 ms at 1/s: %q, want :0", got)
	}
	s.Clock.Advance(time.Millisecond)
	if got := c.Do(t, "TB.ACQUIRE", "k", "1", "1"); got != ":1\r\n" {
		t.Fatalf("after 1 s at 1/s: %q, want :1", got)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if conn, err := net.Dial("tcp", s.Addr); err == nil {
		conn.Close()
		t.Fatal("still accepting after Shutdown")
	}
}
