package command_test

import (
	"context"
	"github.com/redis/go-redis/v9"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSlowlogEntries: with slowlog-log-slower-than 0 every command is
// logged, newest first, each entry as Redis writes it (go-redis parses
// them, in RESP3 and RESP2).
func TestSlowlogEntries(t *testing.T) {
	for _, proto := range []int{3, 2} {
		t.Run("RESP"+strconv.Itoa(proto), func(t *testing.T) {
			ts := startServer(t, nil)
			ts.Commands.SetSlowlog(0, 128)
			ctx := context.Background()
			c := ts.Client(t, func(o *redis.Options) { o.Protocol = proto; o.ClientName = "slow-one" })
			if err := c.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
				t.Fatal(err)
			}
			c.Do(ctx, "TB.ACQUIRE", "k", "10", "1")
			c.Do(ctx, "AUTH", "secret") // fails (no password), and is logged redacted
			before := time.Now().Unix()
			entries, err := c.SlowLogGet(ctx, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 3 {
				t.Fatalf("%d entries, want 3 (RESET, TB.ACQUIRE, AUTH): %+v", len(entries), entries)
			}
			auth, acq := entries[0], entries[1]
			if strings.Join(auth.Args, " ") != "AUTH (redacted)" || strings.Join(acq.Args, " ") != "TB.ACQUIRE k 10 1" {
				t.Errorf("args %q, %q", auth.Args, acq.Args)
			}
			if auth.ID != acq.ID+1 || acq.ClientName != "slow-one" || acq.ClientAddr == "" || acq.Time.Unix() > before || before-acq.Time.Unix() > 5 {
				t.Errorf("entry %+v", acq)
			}
			if n, _ := c.Do(ctx, "SLOWLOG", "LEN").Int(); n != 4 { // and SLOWLOG GET
				t.Errorf("SLOWLOG LEN %d, want 4", n)
			}
			if got, _ := c.SlowLogGet(ctx, 1).Result(); len(got) != 1 || got[0].Args[0] != "SLOWLOG" {
				t.Errorf("SLOWLOG GET 1: %+v", got)
			}
		})
	}
}

// TestSlowlogBounded: the log keeps slowlog-max-len entries, at most 32
// arguments of at most 128 bytes each, and a client name of at most 128
// bytes, however large what the client sent; off, it logs nothing; a
// reload's new settings apply at once.
func TestSlowlogBounded(t *testing.T) {
	ts := startServer(t, nil)
	ctx := context.Background()
	admin := ts.Client(t)
	admin.Ping(ctx) // connected before the log is on: its handshake is not logged
	ts.Commands.SetSlowlog(0, 3)
	c := ts.Dial(t)
	c.SetDeadline(time.Now().Add(30 * time.Second))
	huge := strings.Repeat("n", 8<<20)
	c.Do(t, "CLIENT", "SETNAME", huge)
	keys := []string{"TB.RESET"}
	for i := range 39 {
		keys = append(keys, "key"+strconv.Itoa(i))
	}
	c.Do(t, keys...)
	c.Do(t, "ECHO", strings.Repeat("e", 200))
	entries, err := admin.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Fatalf("%d entries, want slowlog-max-len 3", len(entries))
	}
	echo, reset, setname := entries[0], entries[1], entries[2]
	if want := strings.Repeat("e", 128) + "... (72 more bytes)"; echo.Args[1] != want {
		t.Errorf("a 200-byte argument: %q", echo.Args[1])
	}
	if len(reset.Args) != 32 || reset.Args[31] != "... (9 more arguments)" || reset.Args[30] != "key29" {
		t.Errorf("40 arguments: %d, last %q", len(reset.Args), reset.Args[len(reset.Args)-1])
	}
	if want := strings.Repeat("n", 128) + "... (8388480 more bytes)"; setname.Args[2] != want {
		t.Errorf("the 8 MiB name as an argument: %.200q", setname.Args[2])
	}
	if reset.ClientName != strings.Repeat("n", 128) {
		t.Errorf("client name in the entry: %d bytes, want the first 128", len(reset.ClientName))
	}
	// Off: nothing more is logged (the first SLOWLOG GET was); the
	// entries stay.
	ts.Commands.SetSlowlog(-1, 3)
	c.Do(t, "PING")
	if got, _ := admin.SlowLogGet(ctx, -1).Result(); len(got) != 3 || got[0].ID != echo.ID+1 || got[0].Args[0] != "slowlog" {
		t.Errorf("off, the log changed: %+v", got)
	}
	// A smaller max-len drops the oldest at once.
	ts.Commands.SetSlowlog(time.Hour, 1)
	if got, _ := admin.SlowLogGet(ctx, -1).Result(); len(got) != 1 || got[0].ID != echo.ID+1 {
		t.Errorf("max-len 1: %+v", got)
	}
	cfg, _ := admin.ConfigGet(ctx, "slowlog-*").Result()
	if cfg["slowlog-log-slower-than"] != "3600000000" || cfg["slowlog-max-len"] != "1" {
		t.Errorf("CONFIG GET slowlog-*: %v", cfg)
	}
	if err := admin.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	if n, _ := admin.Do(ctx, "SLOWLOG", "LEN").Int(); n != 0 {
		t.Errorf("SLOWLOG LEN after RESET: %d", n)
	}
}
