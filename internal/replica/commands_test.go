package replica

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/shard"
)

// TestEncoderMatchesScriptArgs: the commands carry the prefixed keys and
// exactly the ARGV of bucket.PutArgs and bucket.DelArgs,
// batchKeys changes per call or one per call, as EVALSHA or EVAL.
func TestEncoderMatchesScriptArgs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	num := func() float64 {
		switch rng.IntN(4) {
		case 0:
			return float64(rng.IntN(1000))
		case 1:
			return rng.Float64() * math.Pow(10, float64(rng.IntN(30)-15))
		case 2:
			return 1e15
		}
		return 1.0 / float64(1+rng.IntN(7))
	}
	changes := make([]shard.Change, 150)
	for i := range changes {
		c := &changes[i]
		c.Key = fmt.Sprintf("{user%d}:k\x00\xff", i)
		c.At = rng.Int64N(1 << 40)
		if rng.IntN(4) == 0 {
			c.Deleted = true
			continue
		}
		c.Limit = bucket.Limit{Capacity: num(), Rate: num()}
		if i > 0 && rng.IntN(2) == 0 {
			c.Limit = changes[i-1].Limit // a run of one limit shares its strings
		}
		c.State = bucket.State{Tokens: num(), Last: rng.Int64N(1 << 40)}
	}
	var e encoder
	for _, per := range []int{batchKeys, 1} {
		for _, useEval := range []bool{false, true} {
			cmds := e.commands("tb:", changes, per, useEval)
			if want := (len(changes) + per - 1) / per; len(cmds) != want {
				t.Fatalf("per %d: %d commands, want %d", per, len(cmds), want)
			}
			for n, cmd := range cmds {
				chunk := changes[n*per : min((n+1)*per, len(changes))]
				want := []any{"evalsha", bucket.ScriptSHA1, strconv.Itoa(len(chunk))}
				if useEval {
					want[0], want[1] = "eval", bucket.Script
				}
				var argv []any
				for _, c := range chunk {
					want = append(want, "tb:"+c.Key)
					if c.Deleted {
						argv = append(argv, bucket.DelArgs(c.At)...)
					} else {
						st := c.State
						argv = append(argv, bucket.PutArgs(c.Limit, st)...)
					}
				}
				want = append(want, argv...)
				got := make([]any, len(cmd))
				for i, a := range cmd {
					if p, ok := a.(*string); ok {
						a = *p
					}
					got[i] = a
				}
				if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
					t.Fatalf("per %d, eval %v, command %d:\n got %q\nwant %q", per, useEval, n, got, want)
				}
			}
		}
	}
}
