package command_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/testkit/testserver"
)

// call is one step of a protocol test: a command and its reply as fmt.Sprint
// prints what go-redis returns ("1", "[0 [1 10 0 0] [0 1 1000 4000]]", or
// "ERROR " and the error text); a step with advance moves the fake clock
// instead.
type call struct {
	args    []any
	want    string
	advance time.Duration
}

func c(want string, args ...any) call { return call{args: args, want: want} }

// runCalls runs the steps on client c of server ts. Milliseconds in a
// reply may be lower than wanted by up to a second, as a real clock (store
// mode) runs during the steps; with the fake clock they are exact.
func runCalls(t *testing.T, ts *testserver.Server, cl *redis.Client, calls []call) {
	t.Helper()
	for i, st := range calls {
		if st.advance != 0 {
			ts.Clock.Advance(st.advance)
			continue
		}
		if got := fmt.Sprint(do(t, cl, st.args...)); !near(got, st.want) {
			t.Fatalf("step %d: %v:\n got %s\nwant %s", i+1, st.args, got, st.want)
		}
	}
}

// near reports whether reply got is want, but for numbers of 1000 or
// more in want, which got may show up to 1000 lower (time has passed).
func near(got, want string) bool {
	g, w := strings.Fields(got), strings.Fields(want)
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		if g[i] == w[i] {
			continue
		}
		gn, err1 := strconv.ParseInt(strings.Trim(g[i], "[]"), 10, 64)
		wn, err2 := strconv.ParseInt(strings.Trim(w[i], "[]"), 10, 64)
		if err1 != nil || err2 != nil || wn < 1000 || gn > wn || gn < wn-1000 ||
			strings.Count(g[i], "[") != strings.Count(w[i], "[") || strings.Count(g[i], "]") != strings.Count(w[i], "]") {
			return false
		}
	}
	return true
}

// sixteen is a TB.MACQUIRE of 16 buckets of capacity 2, plus extra words.
func sixteen(extra ...any) []any {
	args := []any{"TB.MACQUIRE", 16}
	for i := range 16 {
		args = append(args, fmt.Sprintf("k%d", i), 2, 0.001)
	}
	return append(args, extra...)
}

// TestMAcquireAllOrNothing: the all-or-nothing rule and TB.ACQUIRE's rules per
// bucket, through the protocol, on shards whose clock stands still unless a
// step moves it. Every case starts on an empty server.
func TestMAcquireAllOrNothing(t *testing.T) {
	const wrongType = "ERROR WRONGTYPE Operation against a key holding the wrong kind of value (CL.THROTTLE and TB.* keys cannot be mixed)"
	cases := []struct {
		name  string
		calls []call
	}{
		{"every bucket holds the cost: each gives it", []call{
			c("1", "TB.MACQUIRE", 2, "a", 10, 0.001, "b", 5, 0.001, "COST", 3),
			c("[1 7 0 3000000]", "TB.PEEK", "a", 10, 0.001, 0),
			c("[1 2 0 3000000]", "TB.PEEK", "b", 5, 0.001, 0),
			c("2", "DBSIZE"),
		}},
		{"one bucket short: no bucket changes", []call{
			c("1", "TB.ACQUIRE", "b", 5, 0.001, 4),
			c("[0 [1 10 0 0] [0 1 1000000 4000000]]", "TB.MACQUIRE", 2, "a", 10, 0.001, "b", 5, 0.001, "COST", 2, "WITHINFO"),
			c("0", "TB.MACQUIRE", 2, "a", 10, 0.001, "b", 5, 0.001, "COST", 2),
			c("[1 10 0 0]", "TB.PEEK", "a", 10, 0.001, 0),
			c("[1 1 0 4000000]", "TB.PEEK", "b", 5, 0.001, 0),
			c("1", "DBSIZE"), // a was never created
		}},
		{"a denied group clamps nothing; an allowed one clamps as TB.ACQUIRE", []call{
			c("1", "TB.ACQUIRE", "a", 10, 0.001, 2),
			c("1", "TB.ACQUIRE", "b", 1, 0.001),
			c("0", "TB.MACQUIRE", 2, "a", 5, 0.001, "b", 1, 0.001),
			c("[1 8 0 2000000]", "TB.PEEK", "a", 10, 0.001, 0),
			c("[1 [1 4 0 1000000]]", "TB.MACQUIRE", 1, "a", 5, 0.001, "WITHINFO"),
		}},
		{"cost 0 takes nothing and creates nothing", []call{
			c("[1 [1 10 0 0] [1 3 0 0]]", "TB.MACQUIRE", 2, "a", 10, 1, "b", 3, 1, "COST", 0, "WITHINFO"),
			c("1", "TB.MACQUIRE", 2, "a", 10, 1, "b", 3, 1, "cost", 0),
			c("0", "DBSIZE"),
		}},
		{"a cost above a capacity: denied, retry -1, nothing created", []call{
			c("[0 [1 10 0 0] [0 2 -1 0]]", "TB.MACQUIRE", 2, "a", 10, 1, "b", 2, 1, "COST", 3, "WITHINFO"),
			c("0", "DBSIZE"),
		}},
		{"each bucket refills at its own rate, fractions kept", []call{
			c("1", "TB.MACQUIRE", 2, "a", 2, 1, "b", 2, 0.5, "COST", 2),
			{advance: time.Second},
			c("[0 [1 1 0 1000] [0 0 1000 3000]]", "TB.MACQUIRE", 2, "a", 2, 1, "b", 2, 0.5, "WITHINFO"),
			{advance: time.Second},
			c("[1 [1 1 0 1000] [1 0 0 4000]]", "TB.MACQUIRE", 2, "a", 2, 1, "b", 2, 0.5, "WITHINFO"),
		}},
		{"a CL.THROTTLE key fails the group, which takes nothing", []call{
			c("[0 1 0 -1 60]", "CL.THROTTLE", "t", 0, 1, 60),
			c(wrongType, "TB.MACQUIRE", 2, "a", 10, 1, "t", 10, 1),
			c("[1 10 0 0]", "TB.PEEK", "a", 10, 1, 0),
			c("1", "DBSIZE"),
		}},
		{"16 buckets, options in any order and case", []call{
			c("1", sixteen()...),
			c(fmt.Sprint(append([]any{0}, repeat("[0 1 1000000 1000000]", 16)...)), sixteen("withinfo", "Cost", 2)...),
			c(fmt.Sprint(append([]any{1}, repeat("[1 0 0 2000000]", 16)...)), sixteen("COST", 1, "WITHINFO")...),
			c("16", "DBSIZE"),
		}},
		{"errors name the bucket and change nothing", []call{
			c("ERROR ERR invalid numbuckets: must be an integer from 1 to 16", "TB.MACQUIRE", 17, "a", 1, 1),
			c("ERROR ERR invalid numbuckets: must be an integer from 1 to 16", "TB.MACQUIRE", 0, "a", 1, 1),
			c("ERROR ERR invalid numbuckets: must be an integer from 1 to 16", "TB.MACQUIRE", "1.0", "a", 1, 1),
			c("ERROR ERR invalid numbuckets: must be an integer from 1 to 16", "TB.MACQUIRE", "-1", "a", 1, 1),
			c("ERROR ERR bucket 2 is missing: give numbuckets times key capacity rate (or key POLICY name), then COST cost and WITHINFO if wanted",
				"TB.MACQUIRE", 2, "a", 1, 1, "COST", 1),
			c("ERROR ERR bucket 3 repeats the key of an earlier bucket (keys a policy derives count): give each bucket a key of its own",
				"TB.MACQUIRE", 3, "a", 1, 1, "b", 1, 1, "a", 2, 2),
			c("ERROR ERR invalid capacity for bucket 2: must be a finite number > 0", "TB.MACQUIRE", 2, "a", 1, 1, "b", "inf", 1),
			c("ERROR ERR invalid capacity for bucket 1: must be at most 1e15", "TB.MACQUIRE", 2, "a", 2e15, 1, "b", 1, "x"),
			c("ERROR ERR invalid rate for bucket 3: must be a finite number > 0", "TB.MACQUIRE", 3, "a", 1, 1, "b", 1, 1, "c", 1, 0),
			c("ERROR ERR invalid rate for bucket 2: must be at most 1e15", "TB.MACQUIRE", 2, "a", 1, 1, "b", 1, 2e15),
			c("ERROR ERR key too long for bucket 2", "TB.MACQUIRE", 2, "a", 1, 1, strings.Repeat("k", 1025), 1, 1),
			c("ERROR ERR unknown policy 'nope' for bucket 1: define it under policies: in the --config file", "TB.MACQUIRE", 1, "a", "policy", "nope"),
			c("ERROR ERR invalid cost: must be a finite number >= 0", "TB.MACQUIRE", 1, "a", 1, 1, "COST", -1),
			c("ERROR ERR invalid cost: must be at most 1e15", "TB.MACQUIRE", 1, "a", 1, 1, "COST", 2e15),
			c("ERROR ERR syntax error", "TB.MACQUIRE", 1, "a", 1, 1, "COST", 1, "COST", 1),
			c("ERROR ERR syntax error", "TB.MACQUIRE", 1, "a", 1, 1, "WITHINFO", "WITHINFO"),
			c("ERROR ERR syntax error", "TB.MACQUIRE", 1, "a", 1, 1, "COST"),
			c("ERROR ERR syntax error", "TB.MACQUIRE", 1, "a", 1, 1, 1),
			c("ERROR ERR wrong number of arguments for 'tb.macquire' command", "TB.MACQUIRE", 1, "a", 1),
			c("0", "DBSIZE"),
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, nil)
			runCalls(t, ts, ts.Client(t), tc.calls)
		})
	}
}

func repeat(s string, n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestMAcquireInPipelinesAndTransactions: a TB.MACQUIRE among other
// commands of a pipeline, and in MULTI/EXEC, takes effect in its place.
func TestMAcquireInPipelinesAndTransactions(t *testing.T) {
	ts := startServer(t, nil)
	cl := ts.Client(t)
	ctx := context.Background()
	cmds, err := cl.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "TB.ACQUIRE", "a", 3, 0.001)
		p.Do(ctx, "TB.MACQUIRE", 2, "a", 3, 0.001, "b", 3, 0.001, "COST", 2)
		p.Do(ctx, "TB.ACQUIRE", "a", 3, 0.001)
		p.Do(ctx, "TB.MACQUIRE", 2, "b", 3, 0.001, "c", 3, 0.001, "WITHINFO")
		p.Do(ctx, "TB.PEEK", "c", 3, 0.001, 0)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, cmd := range cmds {
		got = append(got, fmt.Sprint(cmd.(*redis.Cmd).Val()))
	}
	if want := "1 1 0 [1 [1 0 0 3000000] [1 2 0 1000000]] [1 2 0 1000000]"; strings.Join(got, " ") != want {
		t.Fatalf("pipeline: %s\nwant %s", strings.Join(got, " "), want)
	}
	tx, err := cl.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "TB.MACQUIRE", 2, "x", 2, 0.001, "y", 1, 0.001)
		p.Do(ctx, "TB.MACQUIRE", 2, "x", 2, 0.001, "y", 1, 0.001, "WITHINFO")
		p.Do(ctx, "TB.ACQUIRE", "x", 2, 0.001)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, cmd := range tx {
		got = append(got, fmt.Sprint(cmd.(*redis.Cmd).Val()))
	}
	if want := "1 [0 [1 1 0 1000000] [0 0 1000000 1000000]] 1"; strings.Join(got, " ") != want {
		t.Fatalf("transaction: %s\nwant %s", strings.Join(got, " "), want)
	}
}

// policyFile has a policy of two limits, a shadow policy of two limits and
// a policy of one limit with a prefix, all slow enough that the steps of
// TestPolicyGroups see no refill worth a millisecond in store mode.
const policyFile = `policies:
  llm:
    limits:
      - {capacity: 3, rate: 3/hour}
      - {capacity: 5, rate: 5/day}
  trial:
    shadow: true
    limits: [{capacity: 1, rate: 1/hour}, {name: daily, capacity: 2, rate: 2/day}]
  api: {capacity: 2, rate: 2/hour, prefix: "api:"}
`

// policySteps are TestPolicyGroups's steps. llm's buckets of user u are
// {u}:hour and {u}:day; trial's of s, {s}:hour and {s}:daily.
var policySteps = []call{
	// Both limits take 2: 1 left in the hour, 3 in the day.
	c("[1 1 0 34560000]", "TB.ACQUIRE", "u", "POLICY", "llm", 2, "WITHINFO"),
	// The hour is short: nothing is taken from the day either.
	c("[0 1 1200000 34560000]", "TB.ACQUIRE", "u", "POLICY", "llm", 2, "WITHINFO"),
	c("1", "TB.ACQUIRE", "u", "POLICY", "llm"),
	c("[0 0 1200000 51840000]", "TB.PEEK", "u", "POLICY", "llm"),
	c("[0 [1 10 0 0] [0 0 1200000 51840000]]", "TB.MACQUIRE", 2, "{u}:v", 10, 0.001, "u", "POLICY", "llm", "WITHINFO"),
	c("ERROR ERR bucket 2 repeats the key of an earlier bucket (keys a policy derives count): give each bucket a key of its own",
		"TB.MACQUIRE", 2, "{u}:day", 10, 0.001, "u", "POLICY", "llm"),
	// A shadow policy charges as usual and always says allowed.
	c("1", "TB.ACQUIRE", "s", "POLICY", "trial"),
	c("1", "TB.ACQUIRE", "s", "POLICY", "trial"),
	c("[1 0 3600000 43200000]", "TB.ACQUIRE", "s", "POLICY", "trial", 1, "WITHINFO"),
	c("[1 0 3600000 43200000]", "TB.PEEK", "s", "POLICY", "trial"),
	// In TB.MACQUIRE it is a group of its own, and the others decide.
	c("[1 [1 0 0 1000000] [1 0 3600000 43200000]]", "TB.MACQUIRE", 2, "{s}:w", 1, 0.001, "s", "POLICY", "trial", "WITHINFO"),
	c("0", "TB.MACQUIRE", 2, "{s}:w", 1, 0.001, "s", "POLICY", "trial"),
	c("1", "TB.ACQUIRE", "x", "POLICY", "api"),
	// The buckets, under their derived keys ({u}:v was never created).
	c("6", "TB.RESET", "{u}:hour", "{u}:day", "{s}:hour", "{s}:daily", "api:x", "{s}:w", "{u}:v"),
}

// policyCounts is INFO's # Policies section after policySteps.
const policyCounts = "policies:3\r\n" +
	"policy_api:limits=1,shadow=0,allowed=1,denied=0,shadow_denied=0\r\n" +
	"policy_llm:limits=2,shadow=0,allowed=2,denied=2,shadow_denied=0\r\n" +
	"policy_trial:limits=2,shadow=1,allowed=1,denied=0,shadow_denied=4\r\n"

// TestPolicyGroups: policies of several limits (a group over the derived
// keys, combined replies) and shadow policies, through TB.ACQUIRE, TB.PEEK
// and TB.MACQUIRE, counted in INFO. In store mode see TestGroupsInStoreMode.
func TestPolicyGroups(t *testing.T) {
	ts := startServer(t, nil)
	ts.Commands.SetPolicies(loadPolicies(t, policyFile))
	cl := ts.Client(t)
	runCalls(t, ts, cl, policySteps)
	expectPolicyCounts(t, cl, policyCounts)
}

// expectPolicyCounts checks INFO policies.
func expectPolicyCounts(t *testing.T, cl *redis.Client, want string) {
	t.Helper()
	info, err := cl.Info(context.Background(), "policies").Result()
	if err != nil {
		t.Fatal(err)
	}
	if want = "# Policies\r\n" + want; info != want {
		t.Fatalf("INFO policies:\n%s\nwant\n%s", info, want)
	}
}

// TestReloadKeepsPolicyCounts: a reload keeps the counts of the policies
// that remain, even when their limits or shadow setting change, and drops
// those of the others.
func TestReloadKeepsPolicyCounts(t *testing.T) {
	ts := startServer(t, nil)
	ts.Commands.SetPolicies(loadPolicies(t, "policies:\n  a: {capacity: 1, rate: 0.001}\n  b: {capacity: 1, rate: 0.001}\n"))
	cl := ts.Client(t)
	expect(t, cl, int64(1), "TB.ACQUIRE", "k1", "POLICY", "a")
	expect(t, cl, int64(0), "TB.ACQUIRE", "k1", "POLICY", "a")
	expect(t, cl, int64(1), "TB.ACQUIRE", "k2", "POLICY", "b")
	ts.Commands.SetPolicies(loadPolicies(t, "policies:\n  a: {capacity: 2, rate: 0.001, shadow: true}\n  c: {capacity: 1, rate: 0.001}\n"))
	for range 3 {
		expect(t, cl, int64(1), "TB.ACQUIRE", "k3", "POLICY", "a")
	}
	expectPolicyCounts(t, cl, "policies:2\r\n"+
		"policy_a:limits=1,shadow=1,allowed=3,denied=1,shadow_denied=1\r\n"+
		"policy_c:limits=1,shadow=0,allowed=0,denied=0,shadow_denied=0\r\n")
}

// TestMAcquireBucketBound: one call checks at most 16 buckets, a policy's
// limits counted.
func TestMAcquireBucketBound(t *testing.T) {
	var yaml strings.Builder
	yaml.WriteString("policies:\n  wide:\n    limits:\n")
	for i := range 16 {
		fmt.Fprintf(&yaml, "      - {name: l%d, capacity: 1, rate: 0.001}\n", i)
	}
	ts := startServer(t, nil)
	ts.Commands.SetPolicies(loadPolicies(t, yaml.String()))
	runCalls(t, ts, ts.Client(t), []call{
		c("1", "TB.ACQUIRE", "u", "POLICY", "wide"),
		c("1", "TB.MACQUIRE", 1, "v", "POLICY", "wide"),
		c("ERROR ERR too many buckets: one call checks at most 16 buckets, and the limits of the policies named make more: "+
			"name fewer buckets or policies with fewer limits", "TB.MACQUIRE", 2, "a", 1, 1, "w", "POLICY", "wide"),
		c("32", "DBSIZE"),
	})
}

// orgCapacity is the org bucket of the concurrency tests.
const orgCapacity = 200

// burstGroups is the concurrency test through the protocol: 50
// connections released together, each sending rounds of one pipeline,
// TB.MACQUIRE over {user_i, org} and TB.ACQUIRE on org, at a rate near 0.
// The org grants exactly its capacity, and each user bucket lost exactly
// one token per group granted: a denied group takes nothing. The keys
// share the hash tag {acme}, as a Redis Cluster needs.
func burstGroups(t *testing.T, ts *testserver.Server) {
	const conns, rounds, userCap = 50, 12, 1e6
	ctx := context.Background()
	clients := make([]*redis.Client, conns)
	for i := range clients {
		clients[i] = ts.Client(t, func(o *redis.Options) { o.PoolSize = 1 })
		if err := clients[i].Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var orgGrants atomic.Int64
	userGrants := make([]int64, conns)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Sprintf("{acme}:user:%d", i)
			<-gate
			for range rounds {
				cmds, err := cl.Pipelined(ctx, func(p redis.Pipeliner) error {
					p.Do(ctx, "TB.MACQUIRE", 2, user, userCap, 1e-9, "{acme}:org", orgCapacity, 1e-9)
					p.Do(ctx, "TB.ACQUIRE", "{acme}:org", orgCapacity, 1e-9)
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
				group, alone := cmds[0].(*redis.Cmd).Val(), cmds[1].(*redis.Cmd).Val()
				if group == int64(1) {
					orgGrants.Add(1)
					userGrants[i]++
				}
				if alone == int64(1) {
					orgGrants.Add(1)
				}
			}
		}()
	}
	close(gate)
	wg.Wait()
	if n := orgGrants.Load(); n != orgCapacity {
		t.Fatalf("org granted %d, capacity %d", n, orgCapacity)
	}
	for i := range conns {
		v, err := clients[0].Do(ctx, "TB.PEEK", fmt.Sprintf("{acme}:user:%d", i), userCap, 1e-9, 0).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		if spent := int64(userCap) - v[1]; spent != userGrants[i] {
			t.Fatalf("user %d spent %d tokens but was granted %d groups", i, spent, userGrants[i])
		}
	}
}

// TestMAcquireNeverOverGrants: the concurrency test on the shards.
func TestMAcquireNeverOverGrants(t *testing.T) {
	burstGroups(t, startServer(t, nil))
}

// TestPolicyKeysWithinMaxKeyBytes: every key a policy derives must fit in
// --max-key-bytes, in TB.ACQUIRE, TB.PEEK and TB.MACQUIRE.
func TestPolicyKeysWithinMaxKeyBytes(t *testing.T) {
	ts := startServer(t, func(cfg *frontConfig) { cfg.MaxKeyBytes = 12 })
	ts.Commands.SetPolicies(loadPolicies(t, policyFile))
	runCalls(t, ts, ts.Client(t), []call{
		c("1", "TB.ACQUIRE", "12345", "POLICY", "llm"), // {12345}:hour, 12 bytes
		c("ERROR ERR key too long", "TB.ACQUIRE", "123456", "POLICY", "llm"),
		c("ERROR ERR key too long", "TB.PEEK", "123456", "POLICY", "llm"),
		c("ERROR ERR key too long for bucket 2", "TB.MACQUIRE", 2, "a", 1, 1, "123456", "POLICY", "llm"),
		c("1", "TB.ACQUIRE", "12345678", "POLICY", "api"), // api:12345678
		c("ERROR ERR key too long", "TB.ACQUIRE", "123456789", "POLICY", "api"),
		c("3", "DBSIZE"),
	})
}
