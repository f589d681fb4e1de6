// Package metrics exposes bucketd's counters to Prometheus and serves the
// operator's HTTP endpoints: /metrics, /healthz and /readyz.
//
// Ownership: this package owns no counters of its own except the pipeline
// latency histogram. The shards and the protocol front keep their counters
// in atomics; a Collector built from Sources reads them when Prometheus
// scrapes, and turns them into constant metrics. The request path therefore
// pays nothing for metrics: no label lookups, no locks, no allocations. The
// one observation made on the request path, ObservePipeline, goes to a
// histogram resolved at construction.
//
// Everything is registered on the *prometheus.Registry the caller passes in,
// never on the global default registry, so tests build a fresh registry per
// case and compare a scrape with expected text.
//
// Names follow the Prometheus conventions: the bucketd namespace, base units
// (seconds), _total on counters, and only bounded labels (result, shard,
// command, kind). No metric is ever labelled by key. docs/metrics.md lists
// every metric.
package metrics
