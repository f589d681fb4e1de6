package metrics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/bucketd/bucketd/internal/leasestore"
	"github.com/bucketd/bucketd/internal/redisstore"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// The operator documents live in docs/ at the repository root; these tests
// keep them in step with what the package exports.
const (
	alertsPath    = "../../docs/prometheus-alerts.yml"
	dashboardPath = "../../docs/grafana-dashboard.json"
	metricsDoc    = "../../docs/metrics.md"
)

// exported describes every series name a bucketd process exposes (the
// runtime collectors included) and, per name, its labels and the values
// each label takes in a scrape.
type exported map[string]map[string]map[string]bool

func exportedSeries(t *testing.T) (exported, []*dto.MetricFamily) {
	t.Helper()
	reg := prometheus.NewRegistry()
	src := fakeSources(true)
	src.Store = fakeStoreStats // every optional source: the union of the modes' series
	src.Leases = func() leasestore.Stats {
		return leasestore.Stats{FromLease: 9, FromRedis: 1, LeaseCalls: 2, Leased: 10, Leases: 1}
	}
	m, err := New(reg, src)
	if err != nil {
		t.Fatal(err)
	}
	if err := RegisterRuntime(reg); err != nil {
		t.Fatal(err)
	}
	m.ObservePipeline(0.001, 1)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// The store's policy label takes the value of --on-redis-error: the
	// other one comes from a store that fails open.
	failOpen := fakeStoreSources()
	failOpen.Store = func() redisstore.RedisStats { st := fakeStoreStats(); st.FailOpen = true; return st }
	openReg := prometheus.NewRegistry()
	if _, err := New(openReg, failOpen); err != nil {
		t.Fatal(err)
	}
	openFamilies, err := openReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	ex := exported{}
	add := func(name string, labels []*dto.LabelPair, extra ...string) {
		if ex[name] == nil {
			ex[name] = map[string]map[string]bool{}
		}
		for _, lp := range labels {
			if ex[name][lp.GetName()] == nil {
				ex[name][lp.GetName()] = map[string]bool{}
			}
			ex[name][lp.GetName()][lp.GetValue()] = true
		}
		for _, l := range extra {
			if ex[name][l] == nil {
				ex[name][l] = map[string]bool{}
			}
		}
	}
	for _, f := range append(families, openFamilies...) {
		for _, mt := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				add(f.GetName()+"_bucket", mt.GetLabel(), "le")
				add(f.GetName()+"_sum", mt.GetLabel())
				add(f.GetName()+"_count", mt.GetLabel())
			case dto.MetricType_SUMMARY:
				add(f.GetName(), mt.GetLabel(), "quantile")
				add(f.GetName()+"_sum", mt.GetLabel())
				add(f.GetName()+"_count", mt.GetLabel())
			default:
				add(f.GetName(), mt.GetLabel())
			}
		}
	}
	return ex, families
}

var (
	quoted    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	ident     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	selector  = regexp.MustCompile(`\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)
	matcherRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
)

// targetLabels are added by Prometheus at scrape time, not by bucketd.
var targetLabels = map[string]bool{"instance": true, "job": true}

// checkExpr reports the metric names in a PromQL expression that bucketd
// does not export, label matchers on labels those metrics lack, and
// equality matchers on values they never take. Only names with bucketd's
// own prefixes and the runtime collectors' are checked; "up" is
// Prometheus's own.
func checkExpr(ex exported, expr string) []string {
	var problems []string
	if err := balanced(expr); err != nil {
		problems = append(problems, err.Error())
	}
	for _, name := range ident.FindAllString(quoted.ReplaceAllString(expr, `""`), -1) {
		if isOurs(name) && ex[name] == nil {
			problems = append(problems, "unknown metric "+name)
		}
	}
	for _, sel := range selector.FindAllStringSubmatch(expr, -1) {
		name, labels := sel[1], ex[sel[1]]
		if labels == nil {
			continue // not ours, or already reported
		}
		for _, mt := range matcherRE.FindAllStringSubmatch(sel[2], -1) {
			label, op, value := mt[1], mt[2], mt[3]
			if targetLabels[label] {
				continue
			}
			values, ok := labels[label]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s has no label %q", name, label))
			case op == "=" && label != "le" && !values[value]:
				problems = append(problems, fmt.Sprintf("%s{%s} never takes the value %q", name, label, value))
			}
		}
	}
	return problems
}

func isOurs(name string) bool {
	return strings.HasPrefix(name, "bucketd_") || strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_")
}

// balanced checks that (), [] and {} nest properly outside strings.
func balanced(expr string) error {
	var stack []rune
	pair := map[rune]rune{')': '(', ']': '[', '}': '{'}
	for _, r := range quoted.ReplaceAllString(expr, `""`) {
		switch r {
		case '(', '[', '{':
			stack = append(stack, r)
		case ')', ']', '}':
			if len(stack) == 0 || stack[len(stack)-1] != pair[r] {
				return fmt.Errorf("unbalanced %q in %q", r, expr)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 {
		return fmt.Errorf("unclosed %q in %q", stack[len(stack)-1], expr)
	}
	return nil
}

// ruleFile is the Prometheus rule file format (rulefmt), strict enough to
// catch misspelt keys.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Alert         string            `yaml:"alert"`
			Record        string            `yaml:"record"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for"`
			KeepFiringFor string            `yaml:"keep_firing_for"`
			Labels        map[string]string `yaml:"labels"`
			Annotations   map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// alertTemplateFuncs stands in for the functions Prometheus offers alert
// templates, so that the templates parse.
var alertTemplateFuncs = template.FuncMap{
	"humanize": fmt.Sprint, "humanize1024": fmt.Sprint, "humanizeDuration": fmt.Sprint,
	"humanizePercentage": fmt.Sprint, "humanizeTimestamp": fmt.Sprint,
	"query": fmt.Sprint, "first": fmt.Sprint, "label": fmt.Sprint, "value": fmt.Sprint,
	"title": fmt.Sprint, "toUpper": fmt.Sprint, "toLower": fmt.Sprint, "reReplaceAll": fmt.Sprint,
}

func TestAlertRulesFile(t *testing.T) {
	ex, _ := exportedSeries(t)
	data, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var rf ruleFile
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("%s: %v", alertsPath, err)
	}
	if len(rf.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	groups, alerts := map[string]bool{}, map[string]bool{}
	rules := 0
	for _, g := range rf.Groups {
		if g.Name == "" || groups[g.Name] {
			t.Errorf("group name %q empty or repeated", g.Name)
		}
		groups[g.Name] = true
		if len(g.Rules) == 0 {
			t.Errorf("group %s has no rules", g.Name)
		}
		if g.Interval != "" {
			if _, err := model.ParseDuration(g.Interval); err != nil {
				t.Errorf("group %s: interval: %v", g.Name, err)
			}
		}
		for _, r := range g.Rules {
			rules++
			id := g.Name + "/" + r.Alert + r.Record
			if (r.Alert == "") == (r.Record == "") {
				t.Errorf("%s: a rule needs exactly one of alert and record", id)
			}
			if r.Record != "" && !model.UTF8Validation.IsValidMetricName(r.Record) {
				t.Errorf("%s: invalid record name", id)
			}
			if r.Alert != "" {
				if alerts[r.Alert] {
					t.Errorf("%s: alert name repeated", id)
				}
				alerts[r.Alert] = true
				if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
					t.Errorf("%s: needs summary and description annotations", id)
				}
				if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
					t.Errorf("%s: severity %q, want critical, warning or info", id, s)
				}
			}
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: empty expr", id)
			}
			for _, p := range checkExpr(ex, r.Expr) {
				t.Errorf("%s: %s", id, p)
			}
			for what, d := range map[string]string{"for": r.For, "keep_firing_for": r.KeepFiringFor} {
				if d == "" {
					continue
				}
				if _, err := model.ParseDuration(d); err != nil {
					t.Errorf("%s: %s: %v", id, what, err)
				}
			}
			for k := range r.Labels {
				if !model.LabelName(k).IsValidLegacy() {
					t.Errorf("%s: invalid label name %q", id, k)
				}
			}
			for k, text := range r.Annotations {
				// Prometheus defines these variables before expanding a template.
				const defs = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
				if _, err := template.New(k).Funcs(alertTemplateFuncs).Parse(defs + text); err != nil {
					t.Errorf("%s: annotation %s: %v", id, k, err)
				}
			}
		}
	}
	// The alerts the metrics exist for.
	for _, want := range []string{"BucketdDown", "BucketdHighDenialRatio", "BucketdShardQueueBackingUp",
		"BucketdProtocolErrors", "BucketdReplicationDropping", "BucketdReplicationLagging",
		"BucketdSnapshotFailing", "BucketdSnapshotStale", "BucketdStoreUnavailable", "BucketdStoreRedisErrors"} {
		if !alerts[want] {
			t.Errorf("no alert %s", want)
		}
	}
	t.Logf("%d groups, %d rules", len(rf.Groups), rules)
}

// dashboard is the part of Grafana's dashboard model this test reads.
type dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

func TestGrafanaDashboard(t *testing.T) {
	ex, _ := exportedSeries(t)
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if dec.More() {
		t.Fatalf("%s: data after the dashboard object", dashboardPath)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 || len(d.Panels) == 0 {
		t.Fatalf("uid %q, title %q, schemaVersion %d, %d panels: not a dashboard", d.UID, d.Title, d.SchemaVersion, len(d.Panels))
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		q := v.Query
		if m, ok := q.(map[string]any); ok {
			q = m["query"]
		}
		if s, ok := q.(string); ok && v.Type == "query" {
			for _, p := range checkExpr(ex, s) {
				t.Errorf("variable %s: %s", v.Name, p)
			}
		}
	}

	ids := map[int]bool{}
	var cells [][4]int // x, y, w, h of every panel, to find overlaps
	used := map[string]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d repeated", p.ID)
			}
			ids[p.ID] = true
			g := p.GridPos
			if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
				t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
			}
			for _, c := range cells {
				if g.X < c[0]+c[2] && c[0] < g.X+g.W && g.Y < c[1]+c[3] && c[1] < g.Y+g.H {
					t.Errorf("panel %q overlaps another at %+v", p.Title, g)
				}
			}
			cells = append(cells, [4]int{g.X, g.Y, g.W, g.H})
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Datasource == nil || p.Datasource.Type != "prometheus" {
				t.Errorf("panel %q: no Prometheus datasource", p.Title)
			} else if v, ok := strings.CutPrefix(p.Datasource.UID, "$"); ok && !vars[strings.Trim(v, "{}")] {
				t.Errorf("panel %q: datasource variable %s undefined", p.Title, p.Datasource.UID)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q: no queries", p.Title)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if tg.RefID == "" || refs[tg.RefID] {
					t.Errorf("panel %q: refId %q empty or repeated", p.Title, tg.RefID)
				}
				refs[tg.RefID] = true
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q: empty expr", p.Title)
				}
				for _, p2 := range checkExpr(ex, tg.Expr) {
					t.Errorf("panel %q: %s", p.Title, p2)
				}
				for _, name := range ident.FindAllString(quoted.ReplaceAllString(tg.Expr, `""`), -1) {
					used[name] = true
				}
				for _, v := range regexp.MustCompile(`\$\{?([a-zA-Z_]\w*)`).FindAllStringSubmatch(tg.Expr, -1) {
					if !vars[v[1]] && !strings.HasPrefix(v[1], "__") {
						t.Errorf("panel %q: variable $%s undefined", p.Title, v[1])
					}
				}
			}
		}
	}
	walk(d.Panels)

	// The charts the issue asks for.
	for _, want := range []string{
		"bucketd_commands_total", "bucketd_decisions_total", "bucketd_command_duration_seconds_bucket",
		"bucketd_buckets", "bucketd_shard_queue_depth", "bucketd_connected_clients",
		"bucketd_replication_queue_depth", "bucketd_replication_lag_seconds", "bucketd_replication_dropped_total",
		"bucketd_store_policy_answers_total", "bucketd_store_redis_errors_total",
	} {
		if !used[want] {
			t.Errorf("the dashboard does not chart %s", want)
		}
	}
}

// TestMetricsDocListsEveryMetric: docs/metrics.md names every bucketd
// metric family.
func TestMetricsDocListsEveryMetric(t *testing.T) {
	_, families := exportedSeries(t)
	doc, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if name := f.GetName(); strings.HasPrefix(name, "bucketd_") && !bytes.Contains(doc, []byte("`"+name+"`")) {
			t.Errorf("%s does not document `%s`", metricsDoc, name)
		}
	}
}

// TestCheckExprCatchesMistakes guards the checker the document tests rely on.
func TestCheckExprCatchesMistakes(t *testing.T) {
	ex, _ := exportedSeries(t)
	for expr, want := range map[string]string{
		`rate(bucketd_decisions_total{result="allowed"}[5m])`:               "",
		`up{job="bucketd"} == 0`:                                            "",
		`sum by (le) (rate(bucketd_command_duration_seconds_bucket[5m]))`:   "",
		`rate(bucketd_decision_total[5m])`:                                  "unknown metric bucketd_decision_total",
		`rate(bucketd_decisions_total{result="allow"}[5m])`:                 `never takes the value "allow"`,
		`rate(bucketd_errors_total{kidn="protocol"}[5m])`:                   `has no label "kidn"`,
		`rate(bucketd_errors_total{kind="protocol"}[5m]`:                    "unclosed",
		`bucketd_shard_queue_depth{shard=~"1|2", instance="a:1"} > 0`:       "",
		`go_goroutines + process_resident_memory_bytes + go_no_such_metric`: "unknown metric go_no_such_metric",
	} {
		got := strings.Join(checkExpr(ex, expr), "; ")
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("checkExpr(%s) = %q, want %q", expr, got, want)
		}
	}
}

// codeBlocks returns the contents of the fenced code blocks of the given
// language in a Markdown document.
func codeBlocks(doc, lang string) []string {
	var blocks []string
	var cur *strings.Builder
	for line := range strings.Lines(doc) {
		trimmed := strings.TrimRight(line, "\n")
		switch {
		case cur == nil && trimmed == "```"+lang:
			cur = &strings.Builder{}
		case cur != nil && trimmed == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line)
		}
	}
	return blocks
}

// TestMetricsDocQueries checks every PromQL example in docs/metrics.md
// like the rules and the dashboard: an expression starts on an unindented
// line and continues on indented ones.
func TestMetricsDocQueries(t *testing.T) {
	ex, _ := exportedSeries(t)
	doc, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, block := range codeBlocks(string(doc), "promql") {
		for line := range strings.Lines(block) {
			switch {
			case strings.TrimSpace(line) == "":
			case line[0] == ' ' && len(exprs) > 0:
				exprs[len(exprs)-1] += line
			default:
				exprs = append(exprs, line)
			}
		}
	}
	if len(exprs) < 10 {
		t.Fatalf("found %d PromQL examples, want the doc's (at least 10)", len(exprs))
	}
	for _, e := range exprs {
		for _, p := range checkExpr(ex, e) {
			t.Errorf("%s: %q: %s", metricsDoc, strings.TrimSpace(e), p)
		}
	}
}

// TestMetricsDocEmbedsAlertRules: the rule file shown in docs/metrics.md is
// docs/prometheus-alerts.yml, byte for byte, so the two cannot drift.
func TestMetricsDocEmbedsAlertRules(t *testing.T) {
	doc, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range codeBlocks(string(doc), "yaml") {
		if strings.Contains(block, "groups:") {
			if block != string(rules) {
				t.Errorf("the rule file in %s differs from %s; paste the file into the doc again", metricsDoc, alertsPath)
			}
			return
		}
	}
	t.Errorf("%s shows no rule file", metricsDoc)
}
