package main

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRedisCLITransaction: MULTI ... EXEC typed into one redis-cli session,
// in RESP2 and with -3: the commands are QUEUED, EXEC's array carries their
// replies, each token is spent once, and a command bucketd does not know
// (PTTL) discards the whole transaction.
func TestRedisCLITransaction(t *testing.T) {
	cli := requireTool(t, "redis-cli")
	p := startBinary(t)
	for _, proto := range [][]string{nil, {"-3"}} {
		key := "cli" + strings.Join(proto, "")
		cmd := exec.Command(cli, append([]string{"-p", p.port}, proto...)...)
		cmd.Stdin = strings.NewReader(strings.ReplaceAll(`MULTI
TB.ACQUIRE {k} 2 0.001
TB.ACQUIRE {k} 2 0.001
TB.ACQUIRE {k} 2 0.001 1 WITHINFO
EXEC
TB.ACQUIRE {k} 2 0.001
MULTI
PTTL {k}
TB.RESET {k}
EXEC
TB.PEEK {k} 2 0.001 0
EXEC
DISCARD
`, "{k}", key))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", proto, err, out)
		}
		want := `OK
QUEUED
QUEUED
QUEUED
1
1
0
0
1000000
2000000
0
OK
ERR unknown command 'PTTL', with args beginning with: '{k}' 
QUEUED
EXECABORT Transaction discarded because of previous errors.
1
0
0
2000000
ERR EXEC without MULTI
ERR DISCARD without MULTI
`
		want = strings.ReplaceAll(want, "{k}", key)
		if got := string(out); !sameCLI(got, want) {
			t.Fatalf("redis-cli %v session:\n%s\nwant\n%s", proto, got, want)
		}
	}
}

// sameCLI compares redis-cli output line by line, without the empty lines
// it prints after an error, allowing milliseconds (numbers of a million or
// more) to have run down by up to a second since the commands ran: the
// clock is real.
func sameCLI(got, want string) bool {
	g, w := strings.Fields(strings.ReplaceAll(got, " ", "\x00")), strings.Fields(strings.ReplaceAll(want, " ", "\x00"))
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		g[i], w[i] = strings.ReplaceAll(g[i], "\x00", " "), strings.ReplaceAll(w[i], "\x00", " ")
		gn, err1 := strconv.ParseInt(g[i], 10, 64)
		wn, err2 := strconv.ParseInt(w[i], 10, 64)
		ms := err1 == nil && err2 == nil && wn >= 1000000 && gn <= wn && gn > wn-1000
		if g[i] != w[i] && !ms {
			return false
		}
	}
	return true
}

// TestGoRedisTxPipelinedAgainstTheBinary: go-redis's TxPipelined in its
// default configuration (RESP3), and in RESP2, against the real binary:
// one transaction spends each token once and gets every reply.
func TestGoRedisTxPipelinedAgainstTheBinary(t *testing.T) {
	p := startBinary(t)
	ctx := context.Background()
	for _, proto := range []int{0, 2} {
		c := redis.NewClient(&redis.Options{Addr: p.addr, Protocol: proto})
		t.Cleanup(func() { c.Close() })
		key := "tx" + string(rune('0'+proto))
		cmds, err := c.TxPipelined(ctx, func(pl redis.Pipeliner) error {
			for range 3 {
				pl.Do(ctx, "TB.ACQUIRE", key, 2, 0.001)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("protocol %d: TxPipelined: %v", proto, err)
		}
		var got []int64
		for _, cmd := range cmds {
			v, _ := cmd.(*redis.Cmd).Int64()
			got = append(got, v)
		}
		if len(got) != 3 || got[0] != 1 || got[1] != 1 || got[2] != 0 {
			t.Fatalf("protocol %d: replies %v, want [1 1 0]", proto, got)
		}
		if v, err := c.Do(ctx, "TB.ACQUIRE", key, 2, 0.001).Int64(); err != nil || v != 0 {
			t.Fatalf("protocol %d: after the transaction: %v, %v; want 0", proto, v, err)
		}
	}
}
