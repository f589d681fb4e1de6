package metrics

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/leasestore"
	"github.com/bucketd/bucketd/internal/redisstore"
	"github.com/bucketd/bucketd/internal/replica"
	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/resp/command"
	"github.com/bucketd/bucketd/internal/snapshot"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

const namespace = "bucketd"

// Sources are the functions the Collector calls at scrape time. Each is
// called once per scrape, possibly from several scrapes at once, so each
// must be safe for concurrent use; all of bucketd's are (they load atomics).
//
// Buckets, Connections and Commands are required. QueueDepths, Replication, Snapshot and
// Store are optional: when one is nil its metrics are not exported at all
// (store mode has no shards, memory mode no replication and no store).
type Sources struct {
	// Buckets returns the bucket store's counters, normally the Stats of
	// the decide.Limiter in use.
	Buckets func() decide.Stats
	// QueueDepths appends each shard's queue length to dst, normally
	// (*shard.Group).QueueDepths. The index is the shard label.
	QueueDepths func(dst []int) []int
	// Connections returns the connection server's counters, normally
	// (*resp.Server).Stats.
	Connections func() resp.Stats
	// Commands returns the command layer's counters, normally
	// (*command.Engine).Stats.
	Commands func() command.Stats
	// Replication returns the replication counters, normally
	// (*replica.Replicator).Stats; nil when bucketd does not replicate to
	// Redis. Counts are totals since start; depth and lag are values now.
	Replication func() replica.Stats
	// Snapshot returns the snapshot keeper's figures, normally
	// (*snapshot.Keeper).Stats; nil without --data-dir.
	Snapshot func() snapshot.Stats
	// Store returns the Redis store's failure counters, normally
	// (*redisstore.Store).RedisStats; nil outside store mode.
	Store func() redisstore.RedisStats
	// Leases returns lease mode's figures, normally
	// (*leasestore.Store).LeaseStats; nil outside lease mode.
	Leases func() leasestore.Stats
}

// durationBuckets are the upper bounds, in seconds, of the
// bucketd_command_duration_seconds buckets: 10 µs to 1 s, roughly 1-2.5-5
// per decade. An in-memory decision takes tens of microseconds; a deep
// pipeline or a stalled shard shows up in the upper buckets.
var durationBuckets = []float64{
	10e-6, 25e-6, 50e-6,
	100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3,
	10e-3, 25e-3, 50e-3,
	100e-3, 250e-3, 500e-3,
	1,
}

// Metrics is bucketd's set of metrics on one registry. Its methods are safe
// for concurrent use.
type Metrics struct {
	pipeline prometheus.Histogram
}

// New registers on reg a Collector that reads src at scrape time and the
// bucketd_command_duration_seconds histogram fed by ObservePipeline. It
// returns an error if a required source is nil or registration fails (for
// example because New was already called with the same registry). It does
// not register the Go and process collectors; see RegisterRuntime.
func New(reg *prometheus.Registry, src Sources) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: registry is nil")
	}
	c, err := newCollector(src)
	if err != nil {
		return nil, err
	}
	m := &Metrics{
		pipeline: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "command_duration_seconds",
			Help: "Seconds from reading a client's pipeline to having all its replies ready, " +
				"observed once per pipeline (not per command); at pipeline depth 1 this is the command latency.",
			Buckets: durationBuckets,
		}),
	}
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("metrics: register collector: %w", err)
	}
	if err := reg.Register(m.pipeline); err != nil {
		reg.Unregister(c)
		return nil, fmt.Errorf("metrics: register histogram: %w", err)
	}
	return m, nil
}

// ObservePipeline records one pipeline that took seconds from being read to
// having its replies ready. It matches resp.Config.ObservePipeline: pass
// m.ObservePipeline there. commands, the pipeline's length, is not recorded
// (bucketd_commands_total counts commands). It does not allocate.
func (m *Metrics) ObservePipeline(seconds float64, commands int) {
	m.pipeline.Observe(seconds)
}

// RegisterRuntime registers the standard Go runtime (go_*) and process
// (process_*) collectors on reg.
func RegisterRuntime(reg *prometheus.Registry) error {
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return fmt.Errorf("metrics: register go collector: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return fmt.Errorf("metrics: register process collector: %w", err)
	}
	return nil
}

// collector turns Sources into constant metrics at scrape time.
type collector struct {
	src      Sources
	commands []string // label values, indexed like command.Stats.Commands

	decisions, peeks, resets, expired, evicted, buckets, queueDepth *prometheus.Desc
	commandsTotal, errorsTotal                                      *prometheus.Desc
	connected, connections, rejected, tlsHandshakeFailures          *prometheus.Desc
	outputLimitDisconnections                                       *prometheus.Desc

	replQueueDepth, replQueueCapacity, replLag *prometheus.Desc
	replApplied, replDropped, replErrors       *prometheus.Desc
	replOOM                                    *prometheus.Desc

	snapLastSuccess, snapFailures *prometheus.Desc

	storeErrors, storePolicy, storeScriptLoads      *prometheus.Desc
	leaseDecisions, leaseCalls, leaseTokens, leases *prometheus.Desc
}

func newCollector(src Sources) (*collector, error) {
	switch {
	case src.Buckets == nil:
		return nil, errors.New("metrics: Sources.Buckets is nil")
	case src.Connections == nil:
		return nil, errors.New("metrics: Sources.Connections is nil")
	case src.Commands == nil:
		return nil, errors.New("metrics: Sources.Commands is nil")
	}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}
	return &collector{
		src:      src,
		commands: command.CommandNames(),

		decisions: desc("decisions_total", "Decisions of TB.ACQUIRE, TB.MACQUIRE and CL.THROTTLE, by policy (\"\" for explicit limits) and result: "+
			"allowed, denied, or shadow_denied (a shadow policy would have denied; the reply said allowed).", "policy", "result"),
		peeks:      desc("peeks_total", "TB.PEEK calls answered."),
		resets:     desc("resets_total", "Buckets removed by TB.RESET (keys that did not exist are not counted)."),
		expired:    desc("expired_buckets_total", "Buckets deleted by the expiry sweeper after refilling to capacity."),
		evicted:    desc("evicted_buckets_total", "Buckets evicted to stay within --max-buckets (they answer as full afterwards)."),
		buckets:    desc("buckets", "Live buckets: buckets not yet refilled to capacity, as DBSIZE reports."),
		queueDepth: desc("shard_queue_depth", "Batches waiting in each shard's queue.", "shard"),

		commandsTotal: desc("commands_total", `Commands executed, by lower-case command name; unknown commands count as "other".`, "command"),
		errorsTotal:   desc("errors_total", "Error replies sent, by kind.", "kind"),
		connected:     desc("connected_clients", "Client connections open now."),
		connections:   desc("connections_total", "Client connections accepted."),
		rejected:      desc("rejected_connections_total", "Client connections refused at accept (max clients, protected mode, shutting down)."),
		tlsHandshakeFailures: desc("tls_handshake_failures_total",
			"TLS handshakes on the client port that failed or timed out, of admitted and refused connections alike."),
		outputLimitDisconnections: desc("client_output_buffer_limit_disconnections_total",
			"Client connections closed because their pending replies passed --client-output-buffer-limit, by class: normal, or pubsub (CLIENT TRACKING on).", "class"),

		replQueueDepth:    desc("replication_queue_depth", "Bucket changes waiting to be written to Redis."),
		replQueueCapacity: desc("replication_queue_capacity", "Capacity of the replication queue; changes beyond it are dropped."),
		replLag:           desc("replication_lag_seconds", "Age of the oldest bucket change not yet written to Redis; 0 when none is waiting."),
		replApplied:       desc("replication_applied_total", "Bucket changes written to Redis."),
		replDropped:       desc("replication_dropped_total", "Bucket changes dropped because the replication queue was full."),
		replErrors:        desc("replication_errors_total", "Redis commands that failed while replicating, plus buckets Redis refused (their key holds another type, or Redis is out of memory)."),
		replOOM:           desc("replication_oom_refusals_total", "Bucket writes Redis refused because it was out of memory (OOM at maxmemory); the states wait in bucketd and are retried."),

		snapLastSuccess: desc("snapshot_last_success_timestamp_seconds", "Unix time the newest snapshot in --data-dir was taken (written since the start, or loaded at start; the start when there was none): a crash now loses the changes since."),
		snapFailures:    desc("snapshot_failures_total", "Snapshots that could not be written (periodic and final); the previous snapshot stays."),

		storeErrors: desc("store_redis_errors_total",
			"Store mode: operations and commands Redis failed, by kind: reply (an error reply), timeout (no answer within --redis-timeout), transport (the connection failed).", "kind"),
		storePolicy: desc("store_policy_answers_total",
			"Store mode: TB.ACQUIRE and TB.PEEK calls answered by --on-redis-error (policy allow or deny) because Redis did not answer.", "command", "policy"),
		storeScriptLoads: desc("store_script_loads_total", "Store mode: times the script was sent again (EVAL) after Redis answered NOSCRIPT, as after a restart or failover."),

		leaseDecisions: desc("lease_decisions_total", "Lease mode: client decisions by where they were made: lease (this instance, from a lease or a standing denial) or redis.", "source"),
		leaseCalls:     desc("lease_redis_calls_total", "Lease mode: calls sent to Redis for leases, by kind: lease (a miss, a renewal or a give-back), plain (an acquire that takes no lease), failed (lease calls that got no reply: their lease was dropped).", "kind"),
		leaseTokens:    desc("lease_tokens_total", "Lease mode: tokens moved by leases, by kind: leased (granted into a lease), returned (given back unspent), dropped (given up without a reply; Redis lets them lapse).", "kind"),
		leases:         desc("leases", "Lease mode: keys for which this instance holds a lease now."),
	}, nil
}

// Describe sends every Desc Collect may use, so the registry checks names
// and label sets at registration.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.decisions, c.peeks, c.resets, c.expired, c.evicted, c.buckets,
		c.commandsTotal, c.errorsTotal, c.connected, c.connections, c.rejected, c.tlsHandshakeFailures,
		c.outputLimitDisconnections,
	} {
		ch <- d
	}
	if c.src.QueueDepths != nil {
		ch <- c.queueDepth
	}
	if c.src.Replication != nil {
		for _, d := range []*prometheus.Desc{
			c.replQueueDepth, c.replQueueCapacity, c.replLag,
			c.replApplied, c.replDropped, c.replErrors, c.replOOM,
		} {
			ch <- d
		}
	}
	if c.src.Snapshot != nil {
		ch <- c.snapLastSuccess
		ch <- c.snapFailures
	}
	if c.src.Store != nil {
		ch <- c.storeErrors
		ch <- c.storePolicy
		ch <- c.storeScriptLoads
	}
	if c.src.Leases != nil {
		ch <- c.leaseDecisions
		ch <- c.leaseCalls
		ch <- c.leaseTokens
		ch <- c.leases
	}
}

// Collect reads the sources once each and sends their values. Label values
// come from fixed tables (results, shard indexes, command names, error
// kinds) and the configured policies, so the number of series is bounded.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}

	st := c.src.Buckets()
	counter(c.peeks, float64(st.Peeks))
	counter(c.resets, float64(st.Resets))
	counter(c.expired, float64(st.Expired))
	counter(c.evicted, float64(st.Evicted))
	gauge(c.buckets, float64(st.Buckets))

	if c.src.QueueDepths != nil {
		for i, n := range c.src.QueueDepths(nil) {
			gauge(c.queueDepth, float64(n), strconv.Itoa(i))
		}
	}

	cs := c.src.Commands()
	c.collectDecisions(cs.Decisions, counter)
	for i, n := range cs.Commands {
		if i < len(c.commands) {
			counter(c.commandsTotal, float64(n), c.commands[i])
		}
	}
	for i, n := range cs.Errors {
		counter(c.errorsTotal, float64(n), command.ErrorKinds[i])
	}
	ss := c.src.Connections()
	gauge(c.connected, float64(ss.ConnectedClients))
	counter(c.connections, float64(ss.TotalConnections))
	counter(c.rejected, float64(ss.RejectedConnections))
	counter(c.tlsHandshakeFailures, float64(ss.TLSHandshakeFailures))
	for class, n := range ss.OutputLimitDisconnections {
		counter(c.outputLimitDisconnections, float64(n), resp.OutputClassNames[class])
	}

	if c.src.Replication != nil {
		rs := c.src.Replication()
		gauge(c.replQueueDepth, float64(rs.QueueDepth))
		gauge(c.replQueueCapacity, float64(rs.QueueCapacity))
		gauge(c.replLag, rs.LagSeconds)
		counter(c.replApplied, float64(rs.Applied))
		counter(c.replDropped, float64(rs.Dropped))
		counter(c.replErrors, float64(rs.RedisErrors))
		counter(c.replOOM, float64(rs.OOMRefusals))
	}

	if c.src.Snapshot != nil {
		sn := c.src.Snapshot()
		var last float64
		if !sn.LastSuccess.IsZero() {
			last = float64(sn.LastSuccess.UnixMicro()) / 1e6
		}
		gauge(c.snapLastSuccess, last)
		counter(c.snapFailures, float64(sn.Failures))
	}

	if c.src.Store != nil {
		c.collectStore(c.src.Store(), counter)
	}
	if c.src.Leases != nil {
		c.collectLeases(c.src.Leases(), counter, gauge)
	}
}

// collectLeases sends lease mode's series, every label value from the
// start.
func (c *collector) collectLeases(st leasestore.Stats, counter, gauge func(*prometheus.Desc, float64, ...string)) {
	counter(c.leaseDecisions, float64(st.FromLease), "lease")
	counter(c.leaseDecisions, float64(st.FromRedis), "redis")
	counter(c.leaseCalls, float64(st.LeaseCalls), "lease")
	counter(c.leaseCalls, float64(st.PlainCalls), "plain")
	counter(c.leaseCalls, float64(st.FailedCalls), "failed")
	counter(c.leaseTokens, st.Leased, "leased")
	counter(c.leaseTokens, st.Returned, "returned")
	counter(c.leaseTokens, st.Dropped, "dropped")
	gauge(c.leases, float64(st.Leases))
}

// collectDecisions sends the decisions by policy: allowed and denied for
// explicit limits (policy ""), and shadow_denied too for each policy in
// force, shadow or not, so that a policy's series stay the same when its
// shadow setting changes. The policies are those of the configuration, so
// the series are bounded by it.
func (c *collector) collectDecisions(ds []command.PolicyStats, counter func(*prometheus.Desc, float64, ...string)) {
	for _, d := range ds {
		counter(c.decisions, float64(d.Allowed), d.Name, "allowed")
		counter(c.decisions, float64(d.Denied), d.Name, "denied")
		if d.Name != "" {
			counter(c.decisions, float64(d.ShadowDenied), d.Name, "shadow_denied")
		}
	}
}

// collectStore sends the store's series. Every kind and both commands are
// sent from the start, under the one policy the process runs with.
func (c *collector) collectStore(st redisstore.RedisStats, counter func(*prometheus.Desc, float64, ...string)) {
	counter(c.storeErrors, float64(st.ErrorReplies), "reply")
	counter(c.storeErrors, float64(st.Timeouts), "timeout")
	counter(c.storeErrors, float64(st.TransportErrors), "transport")
	policy := "deny"
	if st.FailOpen {
		policy = "allow"
	}
	counter(c.storePolicy, float64(st.PolicyAcquires), "tb.acquire", policy)
	counter(c.storePolicy, float64(st.PolicyPeeks), "tb.peek", policy)
	counter(c.storeScriptLoads, float64(st.ScriptLoads))
}
