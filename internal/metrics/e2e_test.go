package metrics

import (
	"github.com/bucketd/bucketd/internal/policy"
	"github.com/bucketd/bucketd/internal/resp/command"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/redisstore"
	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/bucketd/bucketd/internal/testkit/testserver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
)

// TestScrapeAfterCommands wires the real shards and protocol front to the
// metrics, sends a known sequence of commands from a go-redis client over
// 127.0.0.1:0, then scrapes /metrics over HTTP and checks the exact counts.
func TestScrapeAfterCommands(t *testing.T) {
	group := testserver.NewGroup(t, testkit.NewClock(), nil)
	reg := prometheus.NewPedanticRegistry()
	// The wiring docs/metrics.md shows: the metrics before the server, so
	// that the server gets the histogram's func; the server's stats through
	// a closure, read only once something scrapes.
	var front *testserver.Server
	m, err := New(reg, Sources{
		Buckets:     group.Limiter().Stats,
		QueueDepths: group.QueueDepths,
		Connections: func() resp.Stats { return front.Server.Stats() },
		Commands:    func() command.Stats { return front.Commands.Stats() },
	})
	if err != nil {
		t.Fatal(err)
	}
	front = testserver.Serve(t, command.Config{Limiter: group.Limiter()}, resp.Config{ObservePipeline: m.ObservePipeline})

	rc := front.Client(t, func(o *redis.Options) { o.PoolSize, o.Protocol, o.DisableIdentity = 1, 2, true })
	ctx := context.Background()
	send := func(args ...any) {
		t.Helper()
		// Redis errors are expected for some commands; transport errors are not.
		if err := rc.Do(ctx, args...).Err(); err != nil && !isRedisError(err) {
			t.Fatalf("%v: %v", args, err)
		}
	}
	// Capacity 2, almost no refill: two allowed, then denied.
	send("TB.ACQUIRE", "k", 2, 0.001, 1)
	send("TB.ACQUIRE", "k", 2, 0.001, 1)
	send("TB.ACQUIRE", "k", 2, 0.001, 1)
	send("TB.PEEK", "k", 2, 0.001)
	send("TB.ACQUIRE", "other", 5, 0.001, 1) // a second live bucket
	send("TB.RESET", "k")
	send("PING")
	send("NOSUCHCOMMAND")
	send("TB.ACQUIRE", "k") // wrong number of arguments
	// Per policy: api denies its second call; trial, a shadow policy,
	// would deny its second, and says allowed; a TB.MACQUIRE of explicit
	// numbers counts under policy "", and once under each policy it names.
	front.Commands.SetPolicies(map[string]policy.Policy{
		"api":   {Limits: []policy.Limit{{Name: "second", Capacity: 1, Rate: 0.001}}},
		"trial": {Limits: []policy.Limit{{Name: "second", Capacity: 1, Rate: 0.001}}, Shadow: true},
	})
	send("TB.ACQUIRE", "u", "POLICY", "api")
	send("TB.ACQUIRE", "u", "POLICY", "api")
	send("TB.ACQUIRE", "v", "POLICY", "trial")
	send("TB.ACQUIRE", "v", "POLICY", "trial")
	send("TB.MACQUIRE", 2, "m", 1, 0.001, "w", "POLICY", "api")

	ts := httptest.NewServer(Handler(reg, nil))
	defer ts.Close()
	res, err := ts.Client().Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatal(err)
	}

	value := func(name string, labels ...string) float64 {
		t.Helper()
		f, ok := families[name]
		if !ok {
			t.Fatalf("no family %s", name)
		}
		for _, mt := range f.GetMetric() {
			if hasLabels(mt, labels...) {
				switch {
				case mt.Counter != nil:
					return mt.GetCounter().GetValue()
				case mt.Gauge != nil:
					return mt.GetGauge().GetValue()
				case mt.Histogram != nil:
					return float64(mt.GetHistogram().GetSampleCount())
				}
			}
		}
		t.Fatalf("no series %s%v", name, labels)
		return 0
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"bucketd_decisions_total", []string{"policy", "", "result", "allowed"}, 4},
		{"bucketd_decisions_total", []string{"policy", "", "result", "denied"}, 1},
		{"bucketd_decisions_total", []string{"policy", "api", "result", "allowed"}, 2},
		{"bucketd_decisions_total", []string{"policy", "api", "result", "denied"}, 1},
		{"bucketd_decisions_total", []string{"policy", "api", "result", "shadow_denied"}, 0},
		{"bucketd_decisions_total", []string{"policy", "trial", "result", "allowed"}, 1},
		{"bucketd_decisions_total", []string{"policy", "trial", "result", "denied"}, 0},
		{"bucketd_decisions_total", []string{"policy", "trial", "result", "shadow_denied"}, 1},
		{"bucketd_peeks_total", nil, 1},
		{"bucketd_resets_total", nil, 1},
		{"bucketd_buckets", nil, 5},
		{"bucketd_commands_total", []string{"command", "tb.acquire"}, 9},
		{"bucketd_commands_total", []string{"command", "tb.macquire"}, 1},
		{"bucketd_commands_total", []string{"command", "tb.peek"}, 1},
		{"bucketd_commands_total", []string{"command", "tb.reset"}, 1},
		{"bucketd_commands_total", []string{"command", "ping"}, 1},
		{"bucketd_commands_total", []string{"command", "other"}, 1},
		{"bucketd_errors_total", []string{"kind", "unknown_command"}, 1},
		{"bucketd_errors_total", []string{"kind", "arity"}, 1},
		{"bucketd_errors_total", []string{"kind", "protocol"}, 0},
		{"bucketd_connected_clients", nil, 1},
		{"bucketd_connections_total", nil, 1},
		{"bucketd_rejected_connections_total", nil, 0},
	} {
		if got := value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	var queued float64
	for _, mt := range families["bucketd_shard_queue_depth"].GetMetric() {
		queued += mt.GetGauge().GetValue()
	}
	if n := len(families["bucketd_shard_queue_depth"].GetMetric()); n != group.Len() || queued != 0 {
		t.Errorf("shard queue depth: %d series summing to %v, want %d series summing to 0", n, queued, group.Len())
	}
	// Every pipeline held one command, so the histogram saw as many
	// pipelines as the server counted commands (the HELLO go-redis sends
	// on connecting included).
	var commands float64
	for _, mt := range families["bucketd_commands_total"].GetMetric() {
		commands += mt.GetCounter().GetValue()
	}
	if got := value("bucketd_command_duration_seconds"); got != commands || got < 9 {
		t.Errorf("histogram count %v, want %v pipelines (at least 9)", got, commands)
	}
}

func hasLabels(m *dto.Metric, pairs ...string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == pairs[i] && lp.GetValue() == pairs[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func isRedisError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// TestScrapeStoreModeWithRedisDown wires a real Redis store (on an address
// that refuses every connection) behind the real protocol front, sends
// acquires, peeks and a reset from a go-redis client, and compares the
// store's series on a fresh registry with the exact counts. Buckets is a
// fixed source here: the store's own Stats would ask Redis for DBSIZE in
// the background, one more transport error at a time of its choosing.
func TestScrapeStoreModeWithRedisDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	opts, err := redisstore.ClientOptions("redis://" + down)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	// A timeout no loaded machine reaches: a refused connection fails at
	// once, so every error is a transport error.
	store, err := redisstore.New(redisstore.Config{Client: rdb, Timeout: 5 * time.Second, FailOpen: true,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)

	reg := prometheus.NewPedanticRegistry()
	var front *testserver.Server
	m, err := New(reg, Sources{
		Buckets:     fakeSources(false).Buckets,
		Connections: func() resp.Stats { return front.Server.Stats() },
		Commands:    func() command.Stats { return front.Commands.Stats() },
		Store:       store.RedisStats,
	})
	if err != nil {
		t.Fatal(err)
	}
	front = testserver.Serve(t, command.Config{Limiter: store}, resp.Config{ObservePipeline: m.ObservePipeline})
	rc := front.Client(t, func(o *redis.Options) { o.PoolSize, o.Protocol, o.DisableIdentity = 1, 2, true })
	ctx := context.Background()
	for _, args := range [][]any{
		{"TB.ACQUIRE", "a", 10, 1}, {"TB.ACQUIRE", "b", 10, 1}, {"TB.ACQUIRE", "a", 10, 1, 1, "WITHINFO"},
		{"TB.PEEK", "a", 10, 1}, {"TB.RESET", "a"},
	} {
		if err := rc.Do(ctx, args...).Err(); err != nil && !isRedisError(err) {
			t.Fatalf("%v: %v", args, err)
		}
	}

	const want = `
# HELP bucketd_store_policy_answers_total Store mode: TB.ACQUIRE and TB.PEEK calls answered by --on-redis-error (policy allow or deny) because Redis did not answer.
# TYPE bucketd_store_policy_answers_total counter
bucketd_store_policy_answers_total{command="tb.acquire",policy="allow"} 3
bucketd_store_policy_answers_total{command="tb.peek",policy="allow"} 1
# HELP bucketd_store_redis_errors_total Store mode: operations and commands Redis failed, by kind: reply (an error reply), timeout (no answer within --redis-timeout), transport (the connection failed).
# TYPE bucketd_store_redis_errors_total counter
bucketd_store_redis_errors_total{kind="reply"} 0
bucketd_store_redis_errors_total{kind="timeout"} 0
bucketd_store_redis_errors_total{kind="transport"} 5
# HELP bucketd_store_script_loads_total Store mode: times the script was sent again (EVAL) after Redis answered NOSCRIPT, as after a restart or failover.
# TYPE bucketd_store_script_loads_total counter
bucketd_store_script_loads_total 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"bucketd_store_policy_answers_total", "bucketd_store_redis_errors_total", "bucketd_store_script_loads_total"); err != nil {
		t.Error(err)
	}
	// The reset got an error reply (kind unavailable), not the policy's answer.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP bucketd_errors_total Error replies sent, by kind.
# TYPE bucketd_errors_total counter
`+errorLines(map[string]int{"unavailable": 1})), "bucketd_errors_total"); err != nil {
		t.Error(err)
	}
}

// errorLines are the bucketd_errors_total series with the counts in n, 0
// for the kinds n lacks.
func errorLines(n map[string]int) string {
	var b strings.Builder
	for _, kind := range command.ErrorKinds {
		fmt.Fprintf(&b, "bucketd_errors_total{kind=%q} %d\n", kind, n[kind])
	}
	return b.String()
}
