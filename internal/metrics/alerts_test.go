package metrics

import (
	"bytes"
	"os"
	"os/exec"
	"testing"

	"go.yaml.in/yaml/v3"
)

// alertTestsPath holds the unit tests of the alerting rules, in promtool's
// format (`promtool test rules`).
const alertTestsPath = "testdata/alerts.test.yml"

// alertTests is the part of promtool's rule test format this file reads,
// strictly, so that a misspelt key fails here rather than being ignored.
type alertTests struct {
	RuleFiles          []string `yaml:"rule_files"`
	EvaluationInterval string   `yaml:"evaluation_interval"`
	Tests              []struct {
		Name        string `yaml:"name"`
		Interval    string `yaml:"interval"`
		InputSeries []struct {
			Series string `yaml:"series"`
			Values string `yaml:"values"`
		} `yaml:"input_series"`
		AlertRuleTest []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `yaml:"exp_labels"`
				ExpAnnotations map[string]string `yaml:"exp_annotations"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestAlertTestsUseExportedSeries: the series the rule tests feed
// Prometheus are series bucketd exports (names, labels, label values), so
// an alert that passes its test fires on a real bucketd's metrics; every
// alert a test names exists, and the store alerts are tested.
func TestAlertTestsUseExportedSeries(t *testing.T) {
	ex, _ := exportedSeries(t)
	data, err := os.ReadFile(alertTestsPath)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var at alertTests
	if err := dec.Decode(&at); err != nil {
		t.Fatalf("%s: %v", alertTestsPath, err)
	}
	alerts := alertNames(t)
	tested := map[string]bool{}
	for _, tc := range at.Tests {
		for _, s := range tc.InputSeries {
			for _, p := range checkExpr(ex, s.Series) {
				t.Errorf("%s: test %q: input series %s: %s", alertTestsPath, tc.Name, s.Series, p)
			}
		}
		for _, a := range tc.AlertRuleTest {
			if !alerts[a.Alertname] {
				t.Errorf("%s: test %q checks %s, which %s does not define", alertTestsPath, tc.Name, a.Alertname, alertsPath)
			}
			tested[a.Alertname] = true
		}
	}
	for _, want := range []string{"BucketdStoreUnavailable", "BucketdStoreRedisErrors", "BucketdUnavailableReplies"} {
		if !tested[want] {
			t.Errorf("%s does not test %s", alertTestsPath, want)
		}
	}
}

// alertNames returns the alerts docs/prometheus-alerts.yml defines.
func alertNames(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(data, &rf); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				names[r.Alert] = true
			}
		}
	}
	return names
}

// TestAlertRulesEvaluate has Prometheus's own rule engine, through
// promtool, check docs/prometheus-alerts.yml and evaluate it over the
// series of testdata/alerts.test.yml: each alert fires (with its labels and
// rendered annotations) exactly when and where the tests expect. promtool
// comes from $BUCKETD_PROMTOOL or PATH; scripts/test.sh fetches it from
// Debian's prometheus package.
func TestAlertRulesEvaluate(t *testing.T) {
	promtool := findPromtool(t)
	for _, args := range [][]string{
		{"check", "rules", alertsPath},
		{"test", "rules", alertTestsPath},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// findPromtool returns the promtool to run. Under the README's test
// command (BUCKETD_REQUIRE_REDIS=1, which requires every outside tool) a
// missing promtool fails the test; under a plain `go test` it skips,
// saying how to get one.
func findPromtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("BUCKETD_PROMTOOL"); p != "" {
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	const msg = "promtool not found: run scripts/test.sh (it fetches promtool from Debian's prometheus package), " +
		"or put promtool on PATH or in BUCKETD_PROMTOOL"
	if os.Getenv("BUCKETD_REQUIRE_REDIS") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
