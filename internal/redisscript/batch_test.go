package redisscript

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
)

// argvCases pins the six ARGV of every op down to the byte: the shortest
// decimal that reads back as the same float64, an empty now for Redis TIME,
// empty strings for the arguments an op ignores.
var argvCases = []struct {
	call Call
	argv []string
}{
	{Call{Op: Acquire, Limit: bucket.Limit{Capacity: 0.1, Rate: 1e15}, Cost: 2.5, At: 1700000000000001},
		[]string{"0.1", "1e+15", "2.5", "acquire", "1700000000000001", ""}},
	{Call{Op: Acquire, Limit: bucket.Limit{Capacity: 0.1, Rate: 1e15}, Cost: 1, At: RedisTime},
		[]string{"0.1", "1e+15", "1", "acquire", "", ""}},
	{Call{Op: Peek, Limit: bucket.Limit{Capacity: 10, Rate: 1.0 / 3}, Cost: 0, At: 5},
		[]string{"10", "0.3333333333333333", "0", "peek", "5", ""}},
	{Call{Op: Peek, Limit: bucket.Limit{Capacity: 10, Rate: 1.0 / 3}, Cost: 1e-4, At: RedisTime},
		[]string{"10", "0.3333333333333333", "0.0001", "peek", "", ""}},
	{Call{Op: Put, Limit: bucket.Limit{Capacity: 0.1, Rate: 1e15}, State: bucket.State{Tokens: 1.0 / 3, Last: 7}},
		[]string{"0.1", "1e+15", "", "put", "7", "0.3333333333333333"}},
	{Call{Op: Put, Limit: bucket.Limit{Capacity: 3, Rate: 5e-324}, State: bucket.State{Tokens: 0, Last: 1 << 52}},
		[]string{"3", "5e-324", "", "put", "4503599627370496", "0"}},
	{Call{Op: Del, At: 9}, []string{"", "", "", "del", "9", ""}},
	{Call{Op: Acquire, Limit: bucket.Limit{Capacity: 3, Rate: 5e-324}, Cost: 123456789.125, At: RedisTime},
		[]string{"3", "5e-324", "1.23456789125e+08", "acquire", "", ""}},
	{Call{Op: AcquireAll, Limit: bucket.Limit{Capacity: 10, Rate: 0.5}, Cost: 2, At: RedisTime, Group: 1},
		[]string{"10", "0.5", "2", "acquireall", "", "1"}},
	{Call{Op: AcquireAll, Limit: bucket.Limit{Capacity: 10, Rate: 0.5}, Cost: 0, At: 12},
		[]string{"10", "0.5", "0", "acquireall", "12", ""}},
}

// TestEncoding: every call's key and ARGV as argvCases and a reference
// formatting say, laid out as the package doc says: up to BatchKeys calls
// per EVALSHA on a standalone Redis, one per call on a cluster, a Reset a
// DEL that ends a run; and the EVAL that Send swaps in carries the script
// and the same arguments.
func TestEncoding(t *testing.T) {
	var b Batch
	for _, tc := range argvCases {
		b.Reset("tb:")
		b.AddString("k", tc.call)
		got := strs(b.Build(context.Background(), BatchKeys)[0].Args())
		want := append([]string{"evalsha", bucket.ScriptSHA1, "1", "tb:k"}, tc.argv...)
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
			t.Errorf("%+v:\n got %q\nwant %q", tc.call, got, want)
		}
	}

	calls, keys := randomCalls(rand.New(rand.NewPCG(1, 2)), 600)
	groups, large := 0, 0
	for _, c := range calls {
		if c.Group > 0 {
			groups++
		}
		if c.Group > BatchKeys {
			large++
		}
	}
	if groups < 5 || large == 0 {
		t.Fatalf("%d groups, %d larger than BatchKeys: the test wants several, and one larger", groups, large)
	}
	for _, per := range []int{BatchKeys, 1} {
		b.Reset("tb:")
		for i, c := range calls {
			if i%2 == 0 {
				b.AddString(keys[i], c)
			} else {
				b.Add([]byte(keys[i]), c)
			}
		}
		cmds := b.Build(context.Background(), per)
		want := layout(calls, keys, per)
		if len(cmds) != len(want) {
			t.Fatalf("per %d: %d commands, want %d", per, len(cmds), len(want))
		}
		full := 0
		for n, cmd := range cmds {
			checkCommand(t, fmt.Sprintf("per %d, command %d", per, n), cmd, want[n])
			if len(cmd.Args()) == 3+7*per {
				full++
			}
		}
		if full < 2 {
			t.Fatalf("per %d: %d commands with %d calls; the test wants runs that fill a command", per, full, per)
		}
	}
}

// checkCommand compares cmd with want, and the EVAL form of an EVALSHA.
func checkCommand(t *testing.T, what string, cmd *redis.Cmd, want []string) {
	t.Helper()
	if got := strs(cmd.Args()); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Fatalf("%s:\n got %q\nwant %q", what, got, want)
	}
	if want[0] != "evalsha" {
		return
	}
	eval := append([]string{"eval", bucket.Script}, want[2:]...)
	if got := strs(again(context.Background(), cmd, true).Args()); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", eval) {
		t.Fatalf("%s as EVAL:\n got %.80q…", what, got)
	}
}

// randomCalls returns n calls of every op on keys that need no escaping
// from Redis's point of view but hold any byte, with limits that repeat
// (the strings of a repeated limit are shared) and numbers of every size.
func randomCalls(rng *rand.Rand, n int) ([]Call, []string) {
	num := func() float64 {
		switch rng.IntN(5) {
		case 0:
			return float64(rng.IntN(1000))
		case 1:
			return rng.Float64() * math.Pow(10, float64(rng.IntN(30)-15))
		case 2:
			return 1e15
		case 3:
			return math.Copysign(0, -1) // -0 must not borrow the strings of 0
		}
		return 1.0 / float64(1+rng.IntN(7))
	}
	calls, keys := make([]Call, n), make([]string, n)
	for i := 0; i < n; i++ {
		keys[i] = fmt.Sprintf("{user%d}:k\x00\xff", i)
		c := Call{Op: Op(rng.IntN(5)), Limit: bucket.Limit{Capacity: num(), Rate: num()}, Cost: num(), At: rng.Int64N(1 << 52)}
		if i > 0 && rng.IntN(2) == 0 {
			c.Limit = calls[i-1].Limit
		}
		if c.Op == Reset && (i < 2*BatchKeys || rng.IntN(4) != 0) {
			c.Op = Acquire // resets are rarer, so that runs reach BatchKeys
		}
		if rng.IntN(3) == 0 {
			c.At = RedisTime
		}
		c.State = bucket.State{Tokens: num(), Last: rng.Int64N(1 << 52)}
		calls[i] = c
		if i >= 2*BatchKeys && rng.IntN(24) == 0 && c.Op != Reset { // a group of 1 to 2*BatchKeys, after the runs that fill commands
			size := min(1+rng.IntN(2*BatchKeys), n-i)
			if rng.IntN(4) != 0 {
				size = min(1+rng.IntN(16), n-i) // TB.MACQUIRE's sizes
			}
			calls[i].Op, calls[i].Group = AcquireAll, size
			for j := i + 1; j < i+size; j++ {
				keys[j] = fmt.Sprintf("{user%d}:k\x00\xff", j)
				calls[j] = Call{Op: AcquireAll, Limit: bucket.Limit{Capacity: num(), Rate: num()}, Cost: c.Cost, At: c.At}
			}
			i += size - 1
		}
	}
	return calls, keys
}

// layout is the reference: the commands the calls must become.
func layout(calls []Call, keys []string, per int) [][]string {
	var cmds [][]string
	var runKeys, runArgv []string
	flush := func() {
		if len(runKeys) > 0 {
			cmd := append([]string{"evalsha", bucket.ScriptSHA1, strconv.Itoa(len(runKeys))}, runKeys...)
			cmds = append(cmds, append(cmd, runArgv...))
		}
		runKeys, runArgv = nil, nil
	}
	for i := 0; i < len(calls); {
		if calls[i].Op == Reset {
			flush()
			cmds = append(cmds, []string{"del", "tb:" + keys[i]})
			i++
			continue
		}
		n := max(calls[i].Group, 1) // a group is never split
		if len(runKeys) > 0 && len(runKeys)+n > per {
			flush()
		}
		for j := i; j < i+n; j++ {
			runKeys = append(runKeys, "tb:"+keys[j])
			runArgv = append(runArgv, argv(calls[j])...)
		}
		i += n
		if len(runKeys) >= per {
			flush()
		}
	}
	flush()
	return cmds
}

// argv is the reference formatting of a call's six ARGV.
func argv(c Call) []string {
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	switch c.Op {
	case Put:
		return []string{f(c.Limit.Capacity), f(c.Limit.Rate), "", "put", strconv.FormatInt(c.State.Last, 10), f(c.State.Tokens)}
	case Del:
		return []string{"", "", "", "del", strconv.FormatInt(c.At, 10), ""}
	}
	now, group := "", ""
	if c.At >= 0 {
		now = strconv.FormatInt(c.At, 10)
	}
	if c.Op == AcquireAll && c.Group > 0 {
		group = strconv.Itoa(c.Group)
	}
	return []string{f(c.Limit.Capacity), f(c.Limit.Rate), f(c.Cost), opWords[c.Op], now, group}
}

// strs returns a command's arguments as strings.
func strs(args []any) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if p, ok := a.(*string); ok {
			a = *p
		}
		out[i] = a.(string)
	}
	return out
}

// TestBuildCopiesKeys: once Build returns, changing the caller's key
// buffers changes no command.
func TestBuildCopiesKeys(t *testing.T) {
	key := []byte("user:1")
	var b Batch
	b.Reset("tb:")
	b.Add(key, Call{Op: Acquire, Limit: bucket.Limit{Capacity: 1, Rate: 1}, Cost: 1, At: RedisTime})
	cmd := b.Build(context.Background(), BatchKeys)[0]
	copy(key, "XXXXXX")
	if got := *cmd.Args()[3].(*string); got != "tb:user:1" {
		t.Fatalf("the command's key changed with the caller's buffer: %q", got)
	}
}
