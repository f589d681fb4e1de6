package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/bucketd/bucketd/internal/policy"
)

// maxPolicyValue bounds capacity and rate, as the bucket math requires.
const maxPolicyValue = policy.MaxValue

// The keys a policy's mapping and a limit's mapping may hold, in the order
// the errors list them.
var (
	policyKeys = []string{"capacity", "rate", "prefix", "shadow", "limits"}
	limitKeys  = []string{"name", "capacity", "rate"}
)

// decodePolicies decodes the value of the policies key: a mapping from
// policy name to the policy's mapping (see decodePolicy).
func decodePolicies(path string, n *yaml.Node) (map[string]policy.Policy, error) {
	policies := map[string]policy.Policy{}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return policies, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: policies: give a mapping from policy name to its capacity and rate, like\n"+
			"policies:\n  api:\n    capacity: 100\n    rate: 10", path, n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		name := k.Value
		if k.Kind != yaml.ScalarNode || !validPolicyName(name) {
			return nil, fmt.Errorf("%s:%d: policy name %q: use printable ASCII without spaces, like api or login-per-ip",
				path, k.Line, name)
		}
		if _, dup := policies[name]; dup {
			return nil, fmt.Errorf("%s:%d: policy %q is defined twice: keep one of them", path, k.Line, name)
		}
		p, err := decodePolicy(path, name, k.Line, v)
		if err != nil {
			return nil, err
		}
		policies[name] = p
	}
	return policies, nil
}

// decodePolicy decodes one policy: either capacity and rate (one limit), or
// limits (a list of them), plus the optional prefix and shadow.
func decodePolicy(path, name string, line int, n *yaml.Node) (policy.Policy, error) {
	var p policy.Policy
	if n.Kind != yaml.MappingNode {
		return p, fmt.Errorf("%s:%d: policy %q: give a mapping with capacity (tokens) and rate (tokens per second), or with limits",
			path, line, name)
	}
	site := limitSite{path: path, policy: name, line: line}
	f, err := mappingFields(path, n, policyKeys, site.String())
	if err != nil {
		return p, err
	}
	if v := f["prefix"].value; v != nil {
		if v.Kind != yaml.ScalarNode {
			return p, fmt.Errorf("%s:%d: policies.%s.prefix: give a single string", path, v.Line, name)
		}
		if v.ShortTag() != "!!null" {
			p.Prefix = v.Value
		}
	}
	if v := f["shadow"].value; v != nil {
		b, ok := parseBool(v.Value)
		if v.Kind != yaml.ScalarNode || v.ShortTag() == "!!null" || !ok {
			return p, site.valueErr(v, "shadow", "use true or false")
		}
		p.Shadow = b
	}
	if f["limits"].value == nil {
		l, err := decodeLimit(site, f["capacity"].value, f["rate"].value)
		p.Limits = []policy.Limit{l}
		return p, err
	}
	if err := mixedForms(path, name, f); err != nil {
		return p, err
	}
	p.Limits, err = decodeLimits(path, name, f["limits"])
	return p, err
}

// mixedForms refuses capacity or rate next to limits: the policy would say
// its limits twice, and which one counts would not be clear.
func mixedForms(path, name string, f map[string]field) error {
	for _, k := range []string{"capacity", "rate"} {
		if f[k].key != nil {
			return fmt.Errorf("%s:%d: policy %q has both limits and %s: put capacity and rate inside each limit, "+
				"or drop limits and keep one capacity and rate", path, f[k].key.Line, name, k)
		}
	}
	return nil
}

// decodeLimits decodes a policy's limits: a list of 1 to policy.MaxLimits
// mappings with capacity and rate, and names that differ.
func decodeLimits(path, name string, f field) ([]policy.Limit, error) {
	n := f.value
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s:%d: policies.%s.limits: give a list of limits, like "+
			"[{capacity: 10, rate: 10/second}, {capacity: 1000, rate: 1000/day}]", path, n.Line, name)
	}
	switch {
	case len(n.Content) == 0:
		return nil, fmt.Errorf("%s:%d: policy %q: limits is empty: give at least one limit, like "+
			"[{capacity: 10, rate: 10/second}]", path, f.key.Line, name)
	case len(n.Content) > policy.MaxLimits:
		return nil, fmt.Errorf("%s:%d: policy %q has %d limits: at most %d are allowed, as one call checks them all: "+
			"drop or merge some, or split the policy", path, f.key.Line, name, len(n.Content), policy.MaxLimits)
	}
	limits := make([]policy.Limit, 0, len(n.Content))
	for i, item := range n.Content {
		item = resolve(item)
		site := limitSite{path: path, policy: name, index: i + 1, line: item.Line}
		if item.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s:%d: %s: give a mapping with capacity and rate, like {capacity: 10, rate: 10/second}",
				path, item.Line, site)
		}
		lf, err := mappingFields(path, item, limitKeys, site.String())
		if err != nil {
			return nil, err
		}
		if v := lf["name"].value; v != nil {
			if v.Kind != yaml.ScalarNode || !policy.ValidLimitName(v.Value) {
				return nil, site.valueErr(v, "name", "use letters, digits, '-', '_' and '.' (the name ends its buckets' keys)")
			}
			site.name = v.Value
		}
		l, err := decodeLimit(site, lf["capacity"].value, lf["rate"].value)
		if err != nil {
			return nil, err
		}
		if err := uniqueName(site, l.Name, limits); err != nil {
			return nil, err
		}
		limits = append(limits, l)
	}
	return limits, nil
}

// uniqueName refuses a limit whose name is one of the earlier limits': the
// two would share their buckets.
func uniqueName(site limitSite, name string, earlier []policy.Limit) error {
	for j, e := range earlier {
		if e.Name != name {
			continue
		}
		if site.name != "" {
			return fmt.Errorf("%s:%d: %s: name %q is limit %d's too: give each limit a name of its own",
				site.path, site.line, site, name, j+1)
		}
		return fmt.Errorf("%s:%d: %s: its default name %q (the unit of its rate) is limit %d's too: "+
			"give one of them a name of its own, like name: burst", site.path, site.line, site, name, j+1)
	}
	return nil
}

// decodeLimit builds one limit from its capacity and rate nodes (nil when
// absent). A rate written N/unit gives the capacity N when it has none.
func decodeLimit(site limitSite, capacity, rate *yaml.Node) (policy.Limit, error) {
	var l policy.Limit
	if capacity != nil {
		x, err := policyNumber(capacity)
		if err != nil {
			return l, site.valueErr(capacity, "capacity", err.Error())
		}
		l.Capacity = x
	}
	if rate == nil {
		return l, fmt.Errorf("%s:%d: %s has no rate: give rate (tokens per second, or N/second, N/minute, N/hour or N/day) "+
			"and capacity (the burst, in tokens)", site.path, site.line, site)
	}
	r, err := parseRate(rate)
	if err != nil {
		return l, site.valueErr(rate, "rate", err.Error())
	}
	l.Name, l.Rate = r.unit, r.perSecond
	if site.name != "" {
		l.Name = site.name
	}
	switch {
	case capacity != nil:
	case r.n == 0:
		return l, fmt.Errorf("%s:%d: %s has no capacity: give capacity (the burst, in tokens), "+
			"or write the rate as N/second, N/minute, N/hour or N/day, whose N is then the capacity",
			site.path, site.line, site)
	case r.n > maxPolicyValue:
		return l, fmt.Errorf("%s:%d: %s has no capacity, and N of rate %q is over the limit of %g for one: "+
			"give capacity (the burst, in tokens)", site.path, site.line, site, rate.Value, float64(maxPolicyValue))
	default:
		l.Capacity = r.n
	}
	return l, nil
}

// limitSite is where a limit is written, for its errors.
type limitSite struct {
	path, policy string
	index        int    // position in limits, from 1; 0 for capacity and rate at the policy's level
	name         string // the limit's name as written; "" when none
	line         int    // the line of the policy's name, or of the limit
}

// String names the limit: policy "llm", or policy "llm", limit 2 ("daily").
func (s limitSite) String() string {
	switch {
	case s.index == 0:
		return fmt.Sprintf("policy %q", s.policy)
	case s.name == "":
		return fmt.Sprintf("policy %q, limit %d", s.policy, s.index)
	}
	return fmt.Sprintf("policy %q, limit %d (%q)", s.policy, s.index, s.name)
}

// valueErr reports a bad value v of key: policies.api.rate "0": … at the
// policy's level (as before limits existed), policy "llm", limit 2: rate
// "0": … in a limit.
func (s limitSite) valueErr(v *yaml.Node, key, msg string) error {
	if s.index == 0 {
		return fmt.Errorf("%s:%d: policies.%s.%s %q: %s", s.path, v.Line, s.policy, key, v.Value, msg)
	}
	return fmt.Errorf("%s:%d: %s: %s %q: %s", s.path, v.Line, s, key, v.Value, msg)
}

// field is one key of a mapping and its value (with aliases followed).
type field struct{ key, value *yaml.Node }

// mappingFields collects the keys of mapping n, refusing keys not in
// allowed and keys given twice; of names the mapping for the errors.
func mappingFields(path string, n *yaml.Node, allowed []string, of string) (map[string]field, error) {
	f := map[string]field{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		known := false
		for _, a := range allowed {
			known = known || a == k.Value
		}
		if !known || k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%s:%d: unknown key %q in %s: use %s and %s",
				path, k.Line, k.Value, of, strings.Join(allowed[:len(allowed)-1], ", "), allowed[len(allowed)-1])
		}
		if prev, dup := f[k.Value]; dup {
			return nil, fmt.Errorf("%s:%d: %s: %s is already set on line %d: keep one of them",
				path, k.Line, of, k.Value, prev.key.Line)
		}
		f[k.Value] = field{key: k, value: v}
	}
	return f, nil
}

// policyNumber decodes a capacity or a rate: a finite number > 0, <= 1e15.
func policyNumber(n *yaml.Node) (float64, error) {
	hint := fmt.Errorf("use a number greater than 0 and at most %g", float64(maxPolicyValue))
	var x float64
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!str" || n.Decode(&x) != nil {
		return 0, hint
	}
	if math.IsNaN(x) || math.IsInf(x, 0) || x <= 0 || x > maxPolicyValue {
		return 0, hint
	}
	return x, nil
}

// rateUnits are the units a rate may be written in, N/unit, with their
// length in seconds.
var rateUnits = [...]struct {
	name    string
	seconds float64
}{{"second", 1}, {"minute", 60}, {"hour", 3600}, {"day", 86400}}

// rate is a decoded rate.
type rate struct {
	perSecond float64 // tokens per second
	n         float64 // N of N/unit, the default capacity; 0 for a plain number
	unit      string  // second, minute, hour or day; second for a plain number
}

// parseRate decodes a rate: a YAML number of tokens per second, or a
// string N/unit. Its errors are hints, without the value.
func parseRate(n *yaml.Node) (rate, error) {
	if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!int" || n.ShortTag() == "!!float") {
		x, err := policyNumber(n)
		return rate{perSecond: x, unit: "second"}, err
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" || !strings.Contains(n.Value, "/") {
		return rate{}, fmt.Errorf("write N/second, N/minute, N/hour or N/day, or a number of tokens per second "+
			"greater than 0 and at most %g", float64(maxPolicyValue))
	}
	num, unit, _ := strings.Cut(n.Value, "/")
	var seconds float64
	for _, u := range rateUnits {
		if u.name == unit {
			seconds = u.seconds
		}
	}
	if seconds == 0 {
		return rate{}, errors.New("write N/second, N/minute, N/hour or N/day, or a number of tokens per second")
	}
	x, ok := decimal(num)
	if !ok || !(x > 0) {
		return rate{}, fmt.Errorf("N must be a number greater than 0, as in 10/%s or 0.5/%s", unit, unit)
	}
	r := rate{perSecond: x / seconds, n: x, unit: unit}
	if r.perSecond > maxPolicyValue || r.perSecond == 0 {
		return rate{}, fmt.Errorf("that is %g tokens per second; bucketd takes more than 0 and at most %g",
			r.perSecond, float64(maxPolicyValue))
	}
	return r, nil
}

// decimal parses a decimal number (digits, '.', an exponent, a sign),
// refusing what strconv takes besides: inf, nan, hex, '_'. A number beyond
// float64's range is ±Inf or 0, which the caller's bounds refuse.
func decimal(s string) (float64, bool) {
	if s == "" || strings.Trim(s, "0123456789.eE+-") != "" {
		return 0, false
	}
	x, err := strconv.ParseFloat(s, 64)
	return x, err == nil || errors.Is(err, strconv.ErrRange)
}

// validPolicyName reports whether name is non-empty printable ASCII without
// spaces.
func validPolicyName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] <= ' ' || name[i] > '~' {
			return false
		}
	}
	return true
}
