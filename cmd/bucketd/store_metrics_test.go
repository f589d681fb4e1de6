package main

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestStoreModeMetricsShowRedisFailures: with Redis unreachable, the
// answers --on-redis-error gave and the Redis errors behind them are
// series of /metrics (what the BucketdStoreUnavailable alert reads), for
// traffic that only acquires and peeks; store mode has no shard series.
func TestStoreModeMetricsShowRedisFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // nothing listens there now: every call is refused
	p := startBinary(t, "--store", "redis://"+down, "--redis-timeout", "50ms", "--on-redis-error", "deny")
	c := p.client(t)
	ctx := context.Background()
	for range 5 {
		if v, err := c.Do(ctx, "TB.ACQUIRE", "k", "10", "1").Int64(); err != nil || v != 0 {
			t.Fatalf("TB.ACQUIRE with Redis down: %v, %v; want the policy's 0", v, err)
		}
	}
	for range 2 {
		if err := c.Do(ctx, "TB.PEEK", "k", "10", "1").Err(); err != nil {
			t.Fatalf("TB.PEEK with Redis down: %v", err)
		}
	}

	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(scrape(t, p.metrics)))
	if err != nil {
		t.Fatal(err)
	}
	value := func(name string, labels ...string) float64 {
		t.Helper()
		for _, m := range families[name].GetMetric() {
			if matchLabels(m.GetLabel(), labels) {
				return m.GetCounter().GetValue()
			}
		}
		t.Fatalf("/metrics has no %s%v", name, labels)
		return 0
	}
	if got := value("bucketd_store_policy_answers_total", "command", "tb.acquire", "policy", "deny"); got != 5 {
		t.Errorf("policy answers to TB.ACQUIRE: %v, want 5", got)
	}
	if got := value("bucketd_store_policy_answers_total", "command", "tb.peek", "policy", "deny"); got != 2 {
		t.Errorf("policy answers to TB.PEEK: %v, want 2", got)
	}
	var failed float64
	for _, kind := range []string{"reply", "timeout", "transport"} {
		failed += value("bucketd_store_redis_errors_total", "kind", kind)
	}
	if reply := value("bucketd_store_redis_errors_total", "kind", "reply"); failed < 7 || reply != 0 {
		t.Errorf("Redis errors: %v in all, %v error replies; want at least the 7 operations, none a reply (nothing answered)", failed, reply)
	}
	if got := value("bucketd_store_script_loads_total"); got != 0 {
		t.Errorf("script loads %v, want 0", got)
	}
	for name := range families {
		if strings.HasPrefix(name, "bucketd_shard_") || strings.HasPrefix(name, "bucketd_replication_") {
			t.Errorf("store mode exports %s", name)
		}
	}
}

// matchLabels reports whether labels has every name/value pair of want.
func matchLabels(labels []*dto.LabelPair, want []string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		if !slices.ContainsFunc(labels, func(lp *dto.LabelPair) bool {
			return lp.GetName() == want[i] && lp.GetValue() == want[i+1]
		}) {
			return false
		}
	}
	return true
}
