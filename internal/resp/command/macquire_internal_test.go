package command

import (
	"github.com/bucketd/bucketd/internal/policy"

	"bytes"
	"testing"

	"github.com/bucketd/bucketd/internal/resp/wire"
)

// TestGroupsAllocateNothing: TB.MACQUIRE (explicit numbers, policies of
// one and of several limits, a shadow policy), TB.ACQUIRE and TB.PEEK
// with a policy of several limits or a shadow one, and their errors that
// quote nothing cost no allocation in steady state, the counting per
// policy included.
func TestGroupsAllocateNothing(t *testing.T) {
	srv, c := newBenchServer(t)
	one := []policy.Limit{{Name: "second", Capacity: 10, Rate: 1}}
	two := []policy.Limit{{Name: "second", Capacity: 10, Rate: 10}, {Name: "day", Capacity: 1000, Rate: 0.01}}
	srv.SetPolicies(map[string]policy.Policy{
		"api":   {Limits: one, Prefix: "api:"},
		"llm":   {Limits: two},
		"trial": {Limits: two, Shadow: true},
	})
	for _, cmd := range []wire.Command{
		command("TB.MACQUIRE", "2", "user:1", "100", "10", "org:1", "1000", "10"),
		command("tb.macquire", "3", "user:1", "100.5", "0.25", "u", "policy", "llm", "o", "POLICY", "api", "cost", "2", "withinfo"),
		command("TB.MACQUIRE", "2", "user:1", "100", "10", "u", "POLICY", "trial", "WITHINFO"),
		command("TB.ACQUIRE", "u", "POLICY", "llm", "1", "WITHINFO"),
		command("TB.ACQUIRE", "u", "POLICY", "trial"),
		command("TB.PEEK", "u", "POLICY", "llm", "2"),
		command("TB.MACQUIRE", "2", "user:1", "100", "10", "user:1", "100", "10"),
		command("TB.MACQUIRE", "2", "user:1", "100", "10", "org:1", "nan", "10"),
		command("TB.MACQUIRE", "17", "user:1", "100", "10"),
	} {
		allocs := testing.AllocsPerRun(1000, func() {
			c.out = c.out[:0]
			srv.handle(c, cmd)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per command, want 0 (reply %q)", bytes.Join(cmd.Args, []byte(" ")), allocs, c.out)
		}
	}
}
