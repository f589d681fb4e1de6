package command

import (
	"fmt"
	"testing"

	"github.com/bucketd/bucketd/internal/resp/wire"
	"github.com/bucketd/bucketd/internal/shard"
)

// benchSixteen runs 16 TB.ACQUIREs on keys spread over 4 shards through the
// handler, as one read: a plain pipeline, or with tx the same commands
// between MULTI and EXEC (one unit across the shards). No network.
func benchSixteen(b *testing.B, tx bool) {
	g := shard.New(shard.Config{Shards: 4})
	defer g.Close()
	srv, c := newBenchServerWith(b, g.Limiter(), wire.Limits{})
	var cmds []wire.Command
	for i := range 16 {
		cmds = append(cmds, command("TB.ACQUIRE", fmt.Sprint("key:", i*7919), "100", "10", "1"))
	}
	first, rest := cmds[0], cmds[1:]
	if tx {
		first, rest = command("MULTI"), append(cmds, command("EXEC"))
	}
	b.ReportAllocs()
	for b.Loop() {
		c.out, c.rest = c.out[:0], rest
		srv.handle(c, first)
	}
}

// BenchmarkPipeline16 is 16 TB.ACQUIREs as a plain pipeline.
func BenchmarkPipeline16(b *testing.B) { benchSixteen(b, false) }

// BenchmarkTransaction16 is MULTI, the same 16 TB.ACQUIREs, EXEC.
func BenchmarkTransaction16(b *testing.B) { benchSixteen(b, true) }
