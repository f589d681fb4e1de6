package metrics

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/redisstore"
	"github.com/bucketd/bucketd/internal/replica"
	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/resp/command"
	"github.com/bucketd/bucketd/internal/snapshot"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
)

var update = flag.Bool("update", false, "rewrite testdata/*.prom from the current output")

// fakeSources returns Sources that report fixed numbers, distinct enough
// that a value sent under the wrong name or label shows in a diff. With
// replication, the optional sources of replicate mode with --data-dir are
// set too (replication and snapshots).
func fakeSources(replication bool) Sources {
	src := Sources{
		Buckets: func() decide.Stats {
			return decide.Stats{Buckets: 42, Allowed: 1000, Denied: 250, Peeks: 7, Resets: 3, Expired: 99, QueueDepth: 5}
		},
		QueueDepths: func(dst []int) []int { return append(dst, 0, 3, 2, 0) },
		Connections: fakeConnStats,
		Commands:    fakeCommandStats,
	}
	if replication {
		src.Replication = func() replica.Stats {
			return replica.Stats{QueueDepth: 12, QueueCapacity: 4096, LagSeconds: 0.25, Applied: 900, Dropped: 1, RedisErrors: 2, OOMRefusals: 3, OOMWaiting: 3}
		}
		src.Snapshot = func() snapshot.Stats {
			return snapshot.Stats{LastSuccess: time.Unix(1_796_000_000, 500_000_000), Failures: 3}
		}
	}
	return src
}

// fakeStoreSources are the sources of store mode: no shards, no
// replication, no snapshots, and the store's Redis counters.
func fakeStoreSources() Sources {
	src := fakeSources(false)
	src.QueueDepths = nil
	src.Store = fakeStoreStats
	return src
}

func fakeStoreStats() redisstore.RedisStats {
	return redisstore.RedisStats{ErrorReplies: 4, Timeouts: 31, TransportErrors: 570, PolicyAcquires: 590, PolicyPeeks: 11, ScriptLoads: 2}
}

func fakeConnStats() resp.Stats {
	return resp.Stats{ConnectedClients: 4, TotalConnections: 17, RejectedConnections: 2, TLSHandshakeFailures: 3,
		OutputLimitDisconnections: [resp.NumOutputClasses]int64{5, 1}}
}

// fakeCommandStats gives command i the count 100+i and error kind i the
// count 10+i, so the expected text can be generated from the command
// layer's tables (which other changes extend) while every value stays
// distinct.
func fakeCommandStats() command.Stats {
	st := command.Stats{
		TotalCommands: 12345,
		Commands:      make([]int64, len(command.CommandNames())),
		Decisions: []command.PolicyStats{
			{Allowed: 1000, Denied: 250},
			{Name: "api", Limits: 1, Allowed: 400, Denied: 60},
			{Name: "llm", Limits: 2, Shadow: true, Allowed: 70, ShadowDenied: 8},
		},
	}
	for i := range st.Commands {
		st.Commands[i] = int64(100 + i)
	}
	for i := range st.Errors {
		st.Errors[i] = int64(10 + i)
	}
	return st
}

// labelledFromTables is the expected exposition of the two families whose
// label values come from resp's tables.
func labelledFromTables() string {
	var b strings.Builder
	b.WriteString("# HELP bucketd_commands_total Commands executed, by lower-case command name; unknown commands count as \"other\".\n")
	b.WriteString("# TYPE bucketd_commands_total counter\n")
	for i, name := range command.CommandNames() {
		fmt.Fprintf(&b, "bucketd_commands_total{command=%q} %d\n", name, 100+i)
	}
	b.WriteString("# HELP bucketd_errors_total Error replies sent, by kind.\n")
	b.WriteString("# TYPE bucketd_errors_total counter\n")
	for i, kind := range command.ErrorKinds {
		fmt.Fprintf(&b, "bucketd_errors_total{kind=%q} %d\n", kind, 10+i)
	}
	return b.String()
}

// observeFixed feeds the histogram durations that are binary fractions, so
// the _sum in the golden files is exact.
func observeFixed(m *Metrics) {
	m.ObservePipeline(1.0/32768, 1)   // 30.5 µs: le="5e-05"
	m.ObservePipeline(1.0/2048, 16)   // 488 µs: le="0.0005"
	m.ObservePipeline(2, 1)           // beyond the last bound: +Inf only
	m.ObservePipeline(1.0/16384, 1)   // 61 µs: le="0.0001"
	m.ObservePipeline(1.0/1048576, 4) // 0.95 µs: below the first bound
}

func newRegistry(t *testing.T, src Sources) (*prometheus.Registry, *Metrics) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := New(reg, src)
	if err != nil {
		t.Fatal(err)
	}
	return reg, m
}

// fixedNames are the metric families with fixed label values, compared
// with the golden files.
var fixedNames = []string{
	"bucketd_decisions_total", "bucketd_peeks_total", "bucketd_resets_total",
	"bucketd_expired_buckets_total", "bucketd_evicted_buckets_total", "bucketd_buckets", "bucketd_shard_queue_depth",
	"bucketd_connected_clients", "bucketd_connections_total", "bucketd_rejected_connections_total",
	"bucketd_tls_handshake_failures_total", "bucketd_client_output_buffer_limit_disconnections_total",
	"bucketd_command_duration_seconds",
	"bucketd_replication_queue_depth", "bucketd_replication_queue_capacity", "bucketd_replication_lag_seconds",
	"bucketd_replication_applied_total", "bucketd_replication_dropped_total", "bucketd_replication_errors_total",
	"bucketd_replication_oom_refusals_total",
	"bucketd_snapshot_last_success_timestamp_seconds", "bucketd_snapshot_failures_total",
	"bucketd_store_redis_errors_total", "bucketd_store_policy_answers_total", "bucketd_store_script_loads_total",
}

// TestScrapeGolden scrapes a fresh registry fed by fixed numbers and
// compares with testdata/<case>.prom. Run with -update to rewrite the files
// after an intended change, and review the diff.
func TestScrapeGolden(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src      Sources
		families int // the families exported, all of them named in fixedNames or tables
	}{
		{"standalone", fakeSources(false), 15}, // 14 from the collector, plus the histogram
		{"replicating", fakeSources(true), 24}, // and 7 of replication, 2 of snapshots
		{"store", fakeStoreSources(), 14 + 3},  // no shard queues; 3 of the store
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg, m := newRegistry(t, tc.src)
			observeFixed(m)

			path := filepath.Join("testdata", tc.name+".prom")
			if *update {
				got, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, fixedNames...)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if err := testutil.GatherAndCompare(reg, bytes.NewReader(want), fixedNames...); err != nil {
				t.Errorf("scrape differs from %s (go test -update rewrites it):\n%v", path, err)
			}
			if err := testutil.GatherAndCompare(reg, strings.NewReader(labelledFromTables()),
				"bucketd_commands_total", "bucketd_errors_total"); err != nil {
				t.Error(err)
			}

			// Only the families above are exported: nothing unnamed slips in,
			// and the optional families exist exactly when their source is set.
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			if len(families) != tc.families {
				var names []string
				for _, f := range families {
					names = append(names, f.GetName())
				}
				t.Errorf("%d families %v, want %d", len(families), names, tc.families)
			}
		})
	}
}

// TestLabelValuesSpotCheck pins a few label values that dashboards and
// alerts rely on, independently of the tables the collector reads.
func TestLabelValuesSpotCheck(t *testing.T) {
	reg, _ := newRegistry(t, fakeSources(false))
	got, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, "bucketd_commands_total", "bucketd_errors_total")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`bucketd_commands_total{command="tb.acquire"}`,
		`bucketd_commands_total{command="tb.peek"}`,
		`bucketd_commands_total{command="tb.reset"}`,
		`bucketd_commands_total{command="ping"}`,
		`bucketd_commands_total{command="other"}`,
		`bucketd_errors_total{kind="protocol"}`,
		`bucketd_errors_total{kind="arity"}`,
		`bucketd_errors_total{kind="unavailable"}`,
	} {
		if !bytes.Contains(got, []byte(want+" ")) {
			t.Errorf("scrape lacks %s\n%s", want, got)
		}
	}
}

// TestLint runs the Prometheus metric linter (what promtool check metrics
// does) over everything bucketd registers, the runtime collectors included.
func TestLint(t *testing.T) {
	src := fakeSources(true)
	src.Store = fakeStoreStats // never with replication in bucketd, but linted all the same
	reg, m := newRegistry(t, src)
	if err := RegisterRuntime(reg); err != nil {
		t.Fatal(err)
	}
	m.ObservePipeline(0.001, 1)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestNewRejectsMissingSources(t *testing.T) {
	full := fakeSources(false)
	for name, src := range map[string]Sources{
		"Buckets":     {QueueDepths: full.QueueDepths, Connections: full.Connections, Commands: full.Commands},
		"Connections": {Buckets: full.Buckets, QueueDepths: full.QueueDepths, Commands: full.Commands},
		"Commands":    {Buckets: full.Buckets, QueueDepths: full.QueueDepths, Connections: full.Connections},
	} {
		if _, err := New(prometheus.NewRegistry(), src); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("without %s: err = %v, want one naming it", name, err)
		}
	}
	if _, err := New(nil, full); err == nil {
		t.Error("nil registry: no error")
	}
}

func TestNewTwiceOnOneRegistryFails(t *testing.T) {
	reg, _ := newRegistry(t, fakeSources(false))
	if _, err := New(reg, fakeSources(false)); err == nil {
		t.Fatal("second New on the same registry: no error")
	}
	// The failed attempt left the first registration intact.
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

// TestObservePipelineFeedsHistogram checks the func handed to
// resp.Config.ObservePipeline lands in bucketd_command_duration_seconds and
// nowhere else, and costs no allocation.
func TestObservePipelineFeedsHistogram(t *testing.T) {
	reg, m := newRegistry(t, fakeSources(false))
	var cfg resp.Config
	cfg.ObservePipeline = m.ObservePipeline // the type must match resp's hook
	cfg.ObservePipeline(0.0025, 8)          // on a bound: bounds are inclusive
	cfg.ObservePipeline(0.0025, 1)

	const want = `
# HELP bucketd_command_duration_seconds Seconds from reading a client's pipeline to having all its replies ready, observed once per pipeline (not per command); at pipeline depth 1 this is the command latency.
# TYPE bucketd_command_duration_seconds histogram
bucketd_command_duration_seconds_bucket{le="1e-05"} 0
bucketd_command_duration_seconds_bucket{le="2.5e-05"} 0
bucketd_command_duration_seconds_bucket{le="5e-05"} 0
bucketd_command_duration_seconds_bucket{le="0.0001"} 0
bucketd_command_duration_seconds_bucket{le="0.00025"} 0
bucketd_command_duration_seconds_bucket{le="0.0005"} 0
bucketd_command_duration_seconds_bucket{le="0.001"} 0
bucketd_command_duration_seconds_bucket{le="0.0025"} 2
bucketd_command_duration_seconds_bucket{le="0.005"} 2
bucketd_command_duration_seconds_bucket{le="0.01"} 2
bucketd_command_duration_seconds_bucket{le="0.025"} 2
bucketd_command_duration_seconds_bucket{le="0.05"} 2
bucketd_command_duration_seconds_bucket{le="0.1"} 2
bucketd_command_duration_seconds_bucket{le="0.25"} 2
bucketd_command_duration_seconds_bucket{le="0.5"} 2
bucketd_command_duration_seconds_bucket{le="1"} 2
bucketd_command_duration_seconds_bucket{le="+Inf"} 2
bucketd_command_duration_seconds_sum 0.005
bucketd_command_duration_seconds_count 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "bucketd_command_duration_seconds"); err != nil {
		t.Error(err)
	}
	if allocs := testing.AllocsPerRun(1000, func() { cfg.ObservePipeline(0.0001, 1) }); allocs != 0 {
		t.Errorf("ObservePipeline allocates %v times per call, want 0", allocs)
	}
}

// TestCollectCallsEachSourceOnce: one scrape reads each source once, so a
// scrape is a consistent snapshot per source and costs a bounded amount.
func TestCollectCallsEachSourceOnce(t *testing.T) {
	var shards, depths, conns, cmds, repl, store int
	full := fakeSources(true)
	src := Sources{
		Buckets:     func() decide.Stats { shards++; return full.Buckets() },
		QueueDepths: func(dst []int) []int { depths++; return full.QueueDepths(dst) },
		Connections: func() resp.Stats { conns++; return full.Connections() },
		Commands:    func() command.Stats { cmds++; return full.Commands() },
		Replication: func() replica.Stats { repl++; return full.Replication() },
		Store:       func() redisstore.RedisStats { store++; return fakeStoreStats() },
	}
	reg, _ := newRegistry(t, src)
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	if shards != 1 || depths != 1 || conns != 1 || cmds != 1 || repl != 1 || store != 1 {
		t.Errorf("calls per scrape: shards %d, depths %d, connections %d, commands %d, replication %d, store %d; want 1 each", shards, depths, conns, cmds, repl, store)
	}
}
