package clock

import (
	"testing"
	"time"
)

func TestBaseConvertsBothWays(t *testing.T) {
	b := NewBase(5_000_000, 1_700_000_000_000_000)
	for _, mono := range []int64{0, 5_000_000, 123_456_789, -42} {
		unix := b.UnixMicros(mono)
		if unix-mono != 1_700_000_000_000_000-5_000_000 {
			t.Fatalf("UnixMicros(%d) = %d", mono, unix)
		}
		if back := b.FromUnixMicros(unix); back != mono {
			t.Fatalf("FromUnixMicros(UnixMicros(%d)) = %d", mono, back)
		}
		ns := Nanos(mono) + 999 // a GCRA time is not a whole microsecond
		if back := b.FromUnixNanos(b.UnixNanos(ns)); back != ns {
			t.Fatalf("nanoseconds %d came back as %d", ns, back)
		}
		if b.UnixNanos(ns) != Nanos(unix)+999 {
			t.Fatalf("UnixNanos(%d) = %d, want %d", ns, b.UnixNanos(ns), Nanos(unix)+999)
		}
	}
	var zero Base
	if zero.UnixMicros(42) != 42 || zero.FromUnixNanos(42) != 42 {
		t.Fatal("the zero Base is not the identity")
	}
}

func TestStartTiesTheClockToUnixTime(t *testing.T) {
	before := time.Now().UnixMicro()
	c, b := Start()
	now := c()
	after := time.Now().UnixMicro()
	if now < 0 {
		t.Fatalf("a fresh clock reads %d", now)
	}
	if u := b.UnixMicros(now); u < before || u > after {
		t.Fatalf("UnixMicros(now) = %d, want within [%d, %d]", u, before, after)
	}
	if later := c(); later < now {
		t.Fatalf("the clock went back from %d to %d", now, later)
	}
}
