package config

import (
	"github.com/bucketd/bucketd/internal/policy"

	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"strings"
	"testing"
)

// one is a policy of one limit written with capacity and a plain rate.
func one(capacity, rate float64, prefix string) policy.Policy {
	return policy.Policy{Limits: []policy.Limit{{Name: "second", Capacity: capacity, Rate: rate}}, Prefix: prefix}
}

// loadPolicies loads a file of only policies and returns them.
func loadPolicies(t *testing.T, yaml string) (map[string]policy.Policy, error, string) {
	t.Helper()
	file := writeFile(t, yaml)
	c, err := Load([]string{"--config", file}, nil, io.Discard)
	return c.Policies, err, file
}

// limitsYAML is a policy "p" with n limits named l1 … ln.
func limitsYAML(n int) string {
	var b strings.Builder
	b.WriteString("policies:\n  p:\n    limits:\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "      - {name: l%d, rate: %d/second}\n", i, i)
	}
	return b.String()
}

func TestPolicyForms(t *testing.T) {
	sixteen := make([]policy.Limit, 16)
	for i := range sixteen {
		sixteen[i] = policy.Limit{Name: fmt.Sprintf("l%d", i+1), Capacity: float64(i + 1), Rate: float64(i + 1)}
	}
	cases := []struct {
		name, policy string // policy: the YAML under "  p:"
		want         policy.Policy
	}{
		{"plain rate", "{capacity: 100, rate: 10}", one(100, 10, "")},
		{"per second", "{rate: 10/second}", policy.Policy{Limits: []policy.Limit{{Name: "second", Capacity: 10, Rate: 10}}}},
		{"per minute", "{rate: 100/minute}", policy.Policy{Limits: []policy.Limit{{Name: "minute", Capacity: 100, Rate: 100.0 / 60}}}},
		{"per hour", "{rate: 3600/hour}", policy.Policy{Limits: []policy.Limit{{Name: "hour", Capacity: 3600, Rate: 1}}}},
		{"per day", "{rate: 1000/day}", policy.Policy{Limits: []policy.Limit{{Name: "day", Capacity: 1000, Rate: 1000.0 / 86400}}}},
		{"fraction", "{rate: 0.5/second}", policy.Policy{Limits: []policy.Limit{{Name: "second", Capacity: 0.5, Rate: 0.5}}}},
		{"exponent", "{rate: 1e3/day}", policy.Policy{Limits: []policy.Limit{{Name: "day", Capacity: 1000, Rate: 1000.0 / 86400}}}},
		{"quoted", `{rate: "5/minute"}`, policy.Policy{Limits: []policy.Limit{{Name: "minute", Capacity: 5, Rate: 5.0 / 60}}}},
		{"capacity given", "{capacity: 5, rate: 1/minute}", policy.Policy{Limits: []policy.Limit{{Name: "minute", Capacity: 5, Rate: 1.0 / 60}}}},
		{"tiny rate", "{rate: 1e-300/day}", policy.Policy{Limits: []policy.Limit{{Name: "day", Capacity: 1e-300, Rate: 1e-300 / 86400}}}},
		{"largest", "{rate: 1e15/second}", policy.Policy{Limits: []policy.Limit{{Name: "second", Capacity: 1e15, Rate: 1e15}}}},
		{"large N, smaller capacity", "{capacity: 1e15, rate: 8.64e18/day}",
			policy.Policy{Limits: []policy.Limit{{Name: "day", Capacity: 1e15, Rate: 8.64e18 / 86400}}}},
		{"limits", "\n    limits: [{capacity: 10, rate: 10/second}, {capacity: 1000, rate: 1000/day}]",
			policy.Policy{Limits: []policy.Limit{{Name: "second", Capacity: 10, Rate: 10}, {Name: "day", Capacity: 1000, Rate: 1000.0 / 86400}}}},
		{"limits block style", "\n    limits:\n      - rate: 10/second\n      - name: daily\n        rate: 1000/day\n        capacity: 200",
			policy.Policy{Limits: []policy.Limit{{Name: "second", Capacity: 10, Rate: 10}, {Name: "daily", Capacity: 200, Rate: 1000.0 / 86400}}}},
		{"limits plain rates", "\n    limits: [{name: burst, capacity: 10, rate: 5}, {capacity: 100, rate: 0.1}]",
			policy.Policy{Limits: []policy.Limit{{Name: "burst", Capacity: 10, Rate: 5}, {Name: "second", Capacity: 100, Rate: 0.1}}}},
		{"one limit in a list", "\n    limits: [{name: Per_IP.v2-x, rate: 5/minute}]",
			policy.Policy{Limits: []policy.Limit{{Name: "Per_IP.v2-x", Capacity: 5, Rate: 5.0 / 60}}}},
		{"sixteen limits", limitsYAML(16)[len("policies:\n  p:"):], policy.Policy{Limits: sixteen}},
		{"prefix and shadow", "{prefix: 'llm:', shadow: true, limits: [{rate: 60/minute}, {rate: 1e4/day}]}",
			policy.Policy{Prefix: "llm:", Shadow: true, Limits: []policy.Limit{{Name: "minute", Capacity: 60, Rate: 1}, {Name: "day", Capacity: 1e4, Rate: 1e4 / 86400}}}},
		{"shadow false", "{capacity: 1, rate: 1, shadow: false}", one(1, 1, "")},
		{"shadow yes", "{capacity: 1, rate: 1, shadow: yes}", policy.Policy{Shadow: true, Limits: one(1, 1, "").Limits}},
		{"shadow 0", "{capacity: 1, rate: 1, shadow: 0}", one(1, 1, "")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err, _ := loadPolicies(t, "policies:\n  p: "+tc.policy+"\n")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got["p"], tc.want) {
				t.Errorf("got  %+v\nwant %+v", got["p"], tc.want)
			}
		})
	}
}

func TestPolicyAliases(t *testing.T) {
	got, err, _ := loadPolicies(t, `
policies:
  a:
    limits:
      - &fast {capacity: 10, rate: 10/second}
      - {rate: 1000/day}
  b:
    limits: [*fast, {name: slow, rate: 1/second}]
`)
	if err != nil {
		t.Fatal(err)
	}
	want := policy.Policy{Limits: []policy.Limit{{Name: "second", Capacity: 10, Rate: 10}, {Name: "slow", Capacity: 1, Rate: 1}}}
	if !reflect.DeepEqual(got["b"], want) || len(got["a"].Limits) != 2 {
		t.Errorf("got %+v", got)
	}
}

func TestPolicyFormErrors(t *testing.T) {
	const pre = "policies:\n"
	const units = "write N/second, N/minute, N/hour or N/day, or a number of tokens per second"
	const anyRate = units + " greater than 0 and at most 1e+15"
	cases := []struct{ name, file, want string }{
		// The brief's example: the policy, the limit by position and name, the value.
		{"unknown unit in a named limit", pre + "  llm:\n    limits:\n      - rate: 10/second\n      - {name: weekly, rate: 1000/week}",
			`{file}:5: policy "llm", limit 2 ("weekly"): rate "1000/week": ` + units},
		{"unknown unit in a limit", pre + "  llm:\n    limits:\n      - rate: 10/second\n      - rate: 1000/week",
			`{file}:5: policy "llm", limit 2: rate "1000/week": ` + units},
		{"short unit", pre + "  api: {rate: 10/s}", `{file}:2: policies.api.rate "10/s": ` + units},
		{"capitals", pre + "  api: {rate: 10/Second}", `{file}:2: policies.api.rate "10/Second": ` + units},
		{"plural", pre + "  api: {rate: 10/seconds}", `{file}:2: policies.api.rate "10/seconds": ` + units},
		{"space", pre + "  api: {rate: 10 / second}", `{file}:2: policies.api.rate "10 / second": ` + units},
		{"no unit", pre + "  api: {rate: 10/}", `{file}:2: policies.api.rate "10/": ` + units},
		{"two slashes", pre + "  api: {rate: 10/second/x}", `{file}:2: policies.api.rate "10/second/x": ` + units},
		{"zero N", pre + "  api: {rate: 0/second}", `{file}:2: policies.api.rate "0/second": N must be a number greater than 0, as in 10/second or 0.5/second`},
		{"negative N", pre + "  api: {rate: -1/day}", `{file}:2: policies.api.rate "-1/day": N must be a number greater than 0, as in 10/day or 0.5/day`},
		{"no N", pre + "  api: {rate: /day}", `{file}:2: policies.api.rate "/day": N must be a number greater than 0, as in 10/day or 0.5/day`},
		{"word N", pre + "  api: {rate: ten/hour}", `{file}:2: policies.api.rate "ten/hour": N must be a number greater than 0, as in 10/hour or 0.5/hour`},
		{"inf N", pre + "  api: {rate: inf/hour}", `{file}:2: policies.api.rate "inf/hour": N must be a number greater than 0, as in 10/hour or 0.5/hour`},
		{"hex N", pre + "  api: {rate: 0x10/hour}", `{file}:2: policies.api.rate "0x10/hour": N must be a number greater than 0, as in 10/hour or 0.5/hour`},
		{"underscore N", pre + "  api: {rate: 1_000/hour}", `{file}:2: policies.api.rate "1_000/hour": N must be a number greater than 0, as in 10/hour or 0.5/hour`},
		{"rate over the bound", pre + "  api: {capacity: 1, rate: 2e15/second}", `{file}:2: policies.api.rate "2e15/second": that is 2e+15 tokens per second; bucketd takes more than 0 and at most 1e+15`},
		{"N beyond float64", pre + "  api: {capacity: 1, rate: 1e999/day}", `{file}:2: policies.api.rate "1e999/day": that is +Inf tokens per second; bucketd takes more than 0 and at most 1e+15`},
		{"rate rounds to 0", pre + "  api: {capacity: 1, rate: 1e-320/day}", `{file}:2: policies.api.rate "1e-320/day": that is 0 tokens per second; bucketd takes more than 0 and at most 1e+15`},
		{"default capacity too big", pre + "  api: {rate: 2e15/day}", `{file}:2: policy "api" has no capacity, and N of rate "2e15/day" is over the limit of 1e+15 for one: give capacity (the burst, in tokens)`},
		{"rate word", pre + "  api: {capacity: 1, rate: ten}", `{file}:2: policies.api.rate "ten": ` + anyRate},
		{"rate quoted number", pre + `  api: {capacity: 1, rate: "10"}`, `{file}:2: policies.api.rate "10": ` + anyRate},
		{"rate empty", pre + "  api:\n    capacity: 1\n    rate:", `{file}:4: policies.api.rate "": ` + anyRate},
		{"rate list", pre + "  api: {capacity: 1, rate: [1]}", `{file}:2: policies.api.rate "": ` + anyRate},

		{"limits and capacity", pre + "  llm:\n    capacity: 10\n    limits: [{rate: 10/second}]",
			`{file}:3: policy "llm" has both limits and capacity: put capacity and rate inside each limit, or drop limits and keep one capacity and rate`},
		{"limits and rate", pre + "  llm:\n    limits: [{rate: 10/second}]\n    rate: 1000/day",
			`{file}:4: policy "llm" has both limits and rate: put capacity and rate inside each limit, or drop limits and keep one capacity and rate`},
		{"limits not a list", pre + "  llm:\n    limits: {rate: 10/second}",
			`{file}:3: policies.llm.limits: give a list of limits, like [{capacity: 10, rate: 10/second}, {capacity: 1000, rate: 1000/day}]`},
		{"limits empty", pre + "  llm:\n    limits: []",
			`{file}:3: policy "llm": limits is empty: give at least one limit, like [{capacity: 10, rate: 10/second}]`},
		{"seventeen limits", strings.Replace(limitsYAML(17), "  p:", "  llm:", 1),
			`{file}:3: policy "llm" has 17 limits: at most 16 are allowed, as one call checks them all: drop or merge some, or split the policy`},
		{"limit not a mapping", pre + "  llm:\n    limits:\n      - 10/second",
			`{file}:4: policy "llm", limit 1: give a mapping with capacity and rate, like {capacity: 10, rate: 10/second}`},
		{"limit unknown key", pre + "  llm:\n    limits:\n      - rate: 1/second\n        prefix: x",
			`{file}:5: unknown key "prefix" in policy "llm", limit 1: use name, capacity and rate`},
		{"limit key twice", pre + "  llm:\n    limits:\n      - rate: 1/second\n        rate: 2/second",
			`{file}:5: policy "llm", limit 1: rate is already set on line 4: keep one of them`},
		{"policy key twice", pre + "  api:\n    capacity: 1\n    rate: 1\n    capacity: 2",
			`{file}:5: policy "api": capacity is already set on line 3: keep one of them`},
		{"limit without rate", pre + "  llm:\n    limits:\n      - rate: 1/second\n      - capacity: 5",
			`{file}:5: policy "llm", limit 2 has no rate: give rate (tokens per second, or N/second, N/minute, N/hour or N/day) and capacity (the burst, in tokens)`},
		{"limit plain rate without capacity", pre + "  llm:\n    limits: [{rate: 1/second}, {name: slow, rate: 0.1}]",
			`{file}:3: policy "llm", limit 2 ("slow") has no capacity: give capacity (the burst, in tokens), or write the rate as N/second, N/minute, N/hour or N/day, whose N is then the capacity`},
		{"limit bad capacity", pre + "  llm:\n    limits:\n      - {capacity: 0, rate: 1/second}",
			`{file}:4: policy "llm", limit 1: capacity "0": use a number greater than 0 and at most 1e+15`},
		{"limit default capacity too big", pre + "  llm:\n    limits:\n      - {rate: 1/second}\n      - {rate: 1e16/day}",
			`{file}:5: policy "llm", limit 2 has no capacity, and N of rate "1e16/day" is over the limit of 1e+15 for one: give capacity (the burst, in tokens)`},

		{"same default name", pre + "  llm:\n    limits:\n      - {capacity: 10, rate: 10/second}\n      - {capacity: 100, rate: 20/second}",
			`{file}:5: policy "llm", limit 2: its default name "second" (the unit of its rate) is limit 1's too: give one of them a name of its own, like name: burst`},
		{"plain rate's default name", pre + "  llm:\n    limits:\n      - {rate: 10/second}\n      - {capacity: 100, rate: 20}",
			`{file}:5: policy "llm", limit 2: its default name "second" (the unit of its rate) is limit 1's too: give one of them a name of its own, like name: burst`},
		{"same name", pre + "  llm:\n    limits:\n      - {name: a, rate: 10/second}\n      - {name: a, rate: 20/day}",
			`{file}:5: policy "llm", limit 2 ("a"): name "a" is limit 1's too: give each limit a name of its own`},
		{"name like a default", pre + "  llm:\n    limits:\n      - {rate: 10/second}\n      - {name: second, rate: 20/day}",
			`{file}:5: policy "llm", limit 2 ("second"): name "second" is limit 1's too: give each limit a name of its own`},
		{"name with a space", pre + "  llm:\n    limits: [{name: a b, rate: 1/day}]",
			`{file}:3: policy "llm", limit 1: name "a b": use letters, digits, '-', '_' and '.' (the name ends its buckets' keys)`},
		{"name with a colon", pre + "  llm:\n    limits: [{name: 'a:b', rate: 1/day}]",
			`{file}:3: policy "llm", limit 1: name "a:b": use letters, digits, '-', '_' and '.' (the name ends its buckets' keys)`},
		{"name with braces", pre + "  llm:\n    limits: [{name: '{a}', rate: 1/day}]",
			`{file}:3: policy "llm", limit 1: name "{a}": use letters, digits, '-', '_' and '.' (the name ends its buckets' keys)`},
		{"name with a slash", pre + "  llm:\n    limits: [{name: 10/day, rate: 1/day}]",
			`{file}:3: policy "llm", limit 1: name "10/day": use letters, digits, '-', '_' and '.' (the name ends its buckets' keys)`},
		{"name empty", pre + "  llm:\n    limits: [{name: '', rate: 1/day}]",
			`{file}:3: policy "llm", limit 1: name "": use letters, digits, '-', '_' and '.' (the name ends its buckets' keys)`},
		{"name null", pre + "  llm:\n    limits:\n      - rate: 1/day\n        name:",
			`{file}:5: policy "llm", limit 1: name "": use letters, digits, '-', '_' and '.' (the name ends its buckets' keys)`},
		{"name list", pre + "  llm:\n    limits: [{name: [a], rate: 1/day}]",
			`{file}:3: policy "llm", limit 1: name "": use letters, digits, '-', '_' and '.' (the name ends its buckets' keys)`},

		{"shadow word", pre + "  api: {capacity: 1, rate: 1, shadow: maybe}", `{file}:2: policies.api.shadow "maybe": use true or false`},
		{"shadow empty", pre + "  api:\n    capacity: 1\n    rate: 1\n    shadow:", `{file}:5: policies.api.shadow "": use true or false`},
		{"shadow list", pre + "  api: {capacity: 1, rate: 1, shadow: [true]}", `{file}:2: policies.api.shadow "": use true or false`},
		{"shadow in a limit", pre + "  llm:\n    limits: [{rate: 1/day, shadow: true}]",
			`{file}:3: unknown key "shadow" in policy "llm", limit 1: use name, capacity and rate`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err, file := loadPolicies(t, tc.file)
			want := strings.ReplaceAll(tc.want, "{file}", file)
			if err == nil || err.Error() != want {
				t.Errorf("error\n got %v\nwant %s", err, want)
			}
		})
	}
}

// TestReloadMultiLimit: a reload applies a changed multi-limit policy, and
// a file with a broken one is refused as a whole, the running policies
// staying as they were.
func TestReloadMultiLimit(t *testing.T) {
	const base = "policies:\n  api: {capacity: 10, rate: 1}\n" +
		"  llm:\n    prefix: 'llm:'\n    limits:\n      - {capacity: 10, rate: 10/second}\n      - {capacity: 1000, rate: 1000/day}\n"
	file := writeFile(t, base)
	c := mustLoad(t, []string{"--config", file}, nil)
	old := c.Policies
	for _, broken := range []struct{ file, want string }{
		{strings.Replace(base, "1000/day", "1000/week", 1), `:7: policy "llm", limit 2: rate "1000/week": write N/second`},
		{strings.Replace(base, "rate: 10/second", "rate: 10/second, name: day", 1), `:7: policy "llm", limit 2: its default name "day"`},
		{base + "  more:\n" + limitsYAML(17)[len("policies:\n  p:\n"):], `:9: policy "more" has 17 limits`},
		{strings.Replace(base, "    limits:", "    rate: 5\n    limits:", 1), `:5: policy "llm" has both limits and rate`},
		{base + "  shadowy: {capacity: 1, rate: 1, shadow: perhaps}\n", `:8: policies.shadowy.shadow "perhaps"`},
	} {
		rewrite(t, file, broken.file)
		next, restart, err := c.Reload(nil)
		if err == nil || !strings.Contains(err.Error(), file+broken.want) {
			t.Errorf("reload of\n%s\nerror %v, want one with %q", broken.file, err, file+broken.want)
		}
		if restart != nil || !reflect.DeepEqual(next.Policies, old) || !reflect.DeepEqual(c.Policies, old) {
			t.Errorf("after a refused reload: policies %+v, restart %q; want the old ones", next.Policies, restart)
		}
	}
	rewrite(t, file, strings.Replace(base, "1000/day", "2000/day", 1)+"    shadow: true\n")
	next, _, err := c.Reload(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := policy.Policy{Prefix: "llm:", Shadow: true, Limits: []policy.Limit{{Name: "second", Capacity: 10, Rate: 10}, {Name: "day", Capacity: 1000, Rate: 2000.0 / 86400}}}
	if !reflect.DeepEqual(next.Policies["llm"], want) || !reflect.DeepEqual(next.Policies["api"], one(10, 1, "")) {
		t.Errorf("after a good reload: %+v", next.Policies)
	}
}

// TestDocPolicyExamples loads every YAML example of the Policies section of
// docs/configuration.md, so that the documentation stays valid, and checks
// the numbers and keys the text gives for them.
func TestDocPolicyExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n## Policies\n")
	section, _, _ = strings.Cut(section, "\n## ")
	all := map[string]policy.Policy{}
	for _, block := range strings.Split(section, "```yaml\n")[1:] {
		example, _, _ := strings.Cut(block, "```")
		got, err, _ := loadPolicies(t, example)
		if err != nil {
			t.Fatalf("%v in\n%s", err, example)
		}
		maps.Copy(all, got)
	}
	want := map[string]policy.Policy{
		"api":          {Limits: []policy.Limit{{Name: "minute", Capacity: 100, Rate: 100.0 / 60}}},
		"login-per-ip": {Prefix: "login:", Limits: []policy.Limit{{Name: "minute", Capacity: 5, Rate: 1.0 / 60}}},
		"search":       one(20, 2.5, ""),
		"llm": {Shadow: true, Limits: []policy.Limit{
			{Name: "second", Capacity: 10, Rate: 10}, {Name: "day", Capacity: 1000, Rate: 1000.0 / 86400}}},
		"llm-per-tenant": {Prefix: "tenant:", Limits: []policy.Limit{
			{Name: "burst", Capacity: 5, Rate: 1}, {Name: "sustained", Capacity: 300, Rate: 300.0 / 3600}}},
	}
	if !reflect.DeepEqual(all, want) {
		t.Errorf("the examples give\n%+v\nwant\n%+v", all, want)
	}
	var keys []string
	for _, k := range []struct{ policy, key string }{
		{"llm", "user:1"}, {"llm-per-tenant", "acme"}, {"llm", "{org:5}:user:1"}, {"llm", ""}, {"llm", "}x"},
	} {
		p := all[k.policy]
		for i := range p.Limits {
			keys = append(keys, string(p.AppendKey(nil, []byte(k.key), i)))
		}
	}
	for _, k := range keys {
		if !strings.Contains(section, "`"+k+"`") {
			t.Errorf("the Bucket keys table does not show %q", k)
		}
	}
}
