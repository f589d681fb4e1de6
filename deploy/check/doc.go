// Package check tests the deployment files under deploy/ without a
// cluster: the Kubernetes manifests decode strictly into the Kubernetes API
// types (k8s.io/api, so an unknown or misspelt field fails), agree with
// each other (selectors, named ports, Secret keys, volumes, the ConfigMap
// of the policies on a read-only directory mount) and with bucketd's own
// settings (every BUCKETD_ variable exists, the grace period covers the
// shutdown, the memory request covers --max-buckets), and the container's
// command line and environment, as the manifest gives them, start the real
// bucketd with the ConfigMap's policies, which CONFIG RELOAD reloads after
// they change; the systemd unit passes systemd-analyze verify and starts
// bucketd with the example environment file and policies, which its
// ExecReload (SIGHUP) reloads.
//
// It is a module of its own so that bucketd itself does not depend on the
// Kubernetes API packages. scripts/test.sh runs it; alone:
//
//	go -C deploy/check test ./...
//
// Tests that need redis-server or systemd-analyze skip without them,
// unless BUCKETD_REQUIRE_REDIS is set (as scripts/test.sh does), when they
// fail instead.
package check
