package check

import (
	"net"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Measured figures the manifests are sized from (docs/load.md and docs/reliability.md, runs in docs/history.md): a
// live bucket's memory at 10 million buckets, a client connection's with
// 10,000 open, and an allowance for the process itself (12.6 MiB idle) and
// its Go heap (the 16 MiB GC floor and what it holds).
const (
	bytesPerBucket = 79
	bytesPerClient = 50 << 10
	processBytes   = 40 << 20
	// snapshotPerBucket is twice the measured cost of the final snapshot
	// (4 million buckets in 655 ms: 164 ns each), for slower disks.
	snapshotPerBucket = 330 * time.Nanosecond
)

// settingsOf returns the bucketd settings the container sets, by flag
// name: its environment (Secret references resolved) overridden by its
// arguments, as bucketd reads them. Unknown variables and flags, and
// references to Secret keys that do not exist, fail the test.
func settingsOf(t *testing.T, s *shape, c *corev1.Container) map[string]string {
	t.Helper()
	set := map[string]string{}
	for _, e := range c.Env {
		flag, ok := envSetting(e.Name)
		if !ok {
			t.Errorf("%s: env %s is no bucketd setting (bucketd --help lists them)", s.dir, e.Name)
			continue
		}
		v := e.Value
		if ref := e.ValueFrom; ref != nil {
			if ref.SecretKeyRef == nil {
				t.Errorf("%s: env %s: only secretKeyRef is checked", s.dir, e.Name)
				continue
			}
			var err error
			if v, err = s.secretValue(ref.SecretKeyRef.Name, ref.SecretKeyRef.Key); err != nil {
				t.Errorf("%s: env %s: %v", s.dir, e.Name, err)
			}
		}
		set[flag] = v
	}
	for _, a := range c.Args {
		flag, ok := flagSetting(a)
		_, v, hasValue := strings.Cut(a, "=")
		if !ok || !hasValue {
			t.Errorf("%s: argument %q is not --setting=value for a setting bucketd --help lists", s.dir, a)
			continue
		}
		set[flag] = v
	}
	return set
}

// TestManifestsAgree checks each shape's objects against each other and
// against bucketd: selectors select the pods, named ports exist and are
// the ones bucketd listens on, probes ask /healthz and /readyz, the data
// directory is on a volume, the grace period covers the shutdown, the
// memory request covers the buckets and clients it allows, and the
// container runs without privileges.
func TestManifestsAgree(t *testing.T) {
	for _, s := range loadShapes(t) {
		t.Run(filepath.Base(s.dir), func(t *testing.T) {
			c := s.container(t)
			set := settingsOf(t, s, c)
			checkSelectors(t, s)
			checkPorts(t, s, c, set)
			checkDataDir(t, s, c, set)
			checkConfigFile(t, s, c, set)
			checkShutdown(t, s, c, set)
			checkResources(t, s, c, set)
			checkSecurity(t, s, c)
		})
	}
}

func checkSelectors(t *testing.T, s *shape) {
	podLabels := labels.Set(s.template.Labels)
	matches := func(what string, sel *metav1.LabelSelector) {
		ls, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || sel == nil || ls.Empty() || !ls.Matches(podLabels) {
			t.Errorf("%s: %s selector %v does not select the pods %v (%v)", s.dir, what, sel, podLabels, err)
		}
	}
	matches(s.workload.GetName(), s.selector)
	for _, pdb := range s.pdbs {
		matches("PodDisruptionBudget "+pdb.Name, pdb.Spec.Selector)
	}
	for _, svc := range s.services {
		if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
			t.Errorf("%s: Service %s selects %v, not the pods %v", s.dir, svc.Name, svc.Spec.Selector, podLabels)
		}
	}
}

// checkPorts: the ports named redis and metrics are the ones BUCKETD_ADDR
// and BUCKETD_METRICS_ADDR give, on every interface; Services and probes
// use names that exist.
func checkPorts(t *testing.T, s *shape, c *corev1.Container, set map[string]string) {
	named := map[string]int32{}
	for _, p := range c.Ports {
		named[p.Name] = p.ContainerPort
	}
	for name, flag := range map[string]string{"redis": "addr", "metrics": "metrics-addr"} {
		host, port, err := net.SplitHostPort(set[flag])
		if err != nil || host != "0.0.0.0" || port != strconv.Itoa(int(named[name])) {
			t.Errorf("%s: --%s %q, want 0.0.0.0 and the port named %s (%d)", s.dir, flag, set[flag], name, named[name])
		}
	}
	for _, svc := range s.services {
		for _, p := range svc.Spec.Ports {
			if _, ok := named[p.TargetPort.StrVal]; !ok {
				t.Errorf("%s: Service %s port %s targets %q, not a named container port", s.dir, svc.Name, p.Name, p.TargetPort.String())
			}
		}
	}
	for what, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		if probe == nil {
			if what != "startup" {
				t.Errorf("%s: no %s probe", s.dir, what)
			}
			continue
		}
		want := map[string]string{"liveness": "/healthz", "readiness": "/readyz", "startup": "/healthz"}[what]
		g := probe.HTTPGet
		if g == nil || g.Path != want || g.Port.StrVal != "metrics" {
			t.Errorf("%s: %s probe %+v, want GET %s on the port named metrics", s.dir, what, g, want)
		}
	}
}

// checkDataDir: with --data-dir the snapshots are on a mounted volume
// (the root file system is read-only, and a snapshot must outlive the
// pod), and the volume is declared.
func checkDataDir(t *testing.T, s *shape, c *corev1.Container, set map[string]string) {
	dir := set["data-dir"]
	if dir == "" {
		return
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath == dir && !m.ReadOnly {
			if !s.declaresVolume(m.Name) {
				t.Errorf("%s: volume %s is mounted but neither a pod volume nor a volume claim template", s.dir, m.Name)
			}
			return
		}
	}
	t.Errorf("%s: --data-dir %s is no writable volume mount: snapshots would be lost with the pod", s.dir, dir)
}

// checkConfigFile: --config (the policies) names a file on a read-only
// mount of the shape's ConfigMap, mounted as a directory (a subPath mount
// never sees an update of the ConfigMap, so a reload would read the old
// file), and the ConfigMap has that file's key.
func checkConfigFile(t *testing.T, s *shape, c *corev1.Container, set map[string]string) {
	file := set["config"]
	if file == "" {
		t.Errorf("%s: no BUCKETD_CONFIG: the policies have no file to live in", s.dir)
		return
	}
	dir, name := path.Split(file)
	for _, m := range c.VolumeMounts {
		if strings.TrimSuffix(m.MountPath, "/")+"/" != dir {
			continue
		}
		if !m.ReadOnly || m.SubPath != "" {
			t.Errorf("%s: the config mount %s: readOnly %v, subPath %q; want read-only and no subPath (updates reach only a whole-directory mount)", s.dir, m.MountPath, m.ReadOnly, m.SubPath)
		}
		files, ok := s.configFiles(c)[m.MountPath]
		if !ok {
			t.Errorf("%s: %s is not a mount of a ConfigMap of the shape", s.dir, m.MountPath)
		} else if _, ok := files[name]; !ok {
			t.Errorf("%s: the ConfigMap mounted at %s has no key %s", s.dir, m.MountPath, name)
		}
		return
	}
	t.Errorf("%s: --config %s is on no volume mount", s.dir, file)
}

func (s *shape) declaresVolume(name string) bool {
	for _, v := range s.template.Spec.Volumes {
		if v.Name == name {
			return true
		}
	}
	if sts, ok := s.workload.(*appsv1.StatefulSet); ok {
		for _, claim := range sts.Spec.VolumeClaimTemplates {
			if claim.Name == name {
				return true
			}
		}
	}
	return false
}

// duration parses a setting's duration, or its default from --help.
func duration(t *testing.T, set map[string]string, flag string, def time.Duration) time.Duration {
	v, ok := set[flag]
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Errorf("--%s %q: %v", flag, v, err)
	}
	return d
}

// integer parses a whole-number setting; 0 when unset.
func integer(t *testing.T, set map[string]string, flag string) int64 {
	v, ok := set[flag]
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Errorf("--%s %q: %v", flag, v, err)
	}
	return n
}

// defaultShutdownTimeout is --shutdown-timeout's default (internal/config).
const defaultShutdownTimeout = 10 * time.Second

// shutdownBound is the longest bucketd may take from SIGTERM to exit as
// the container is set up: the preStop wait, --shutdown-timeout for the
// connections (and the replication's last flush), and the final snapshot
// of --max-buckets buckets.
func shutdownBound(t *testing.T, c *corev1.Container, set map[string]string) time.Duration {
	d := duration(t, set, "shutdown-timeout", defaultShutdownTimeout)
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		d += time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	if set["data-dir"] != "" {
		d += time.Second + time.Duration(integer(t, set, "max-buckets"))*snapshotPerBucket
	}
	return d
}

// checkShutdown: Kubernetes kills the container terminationGracePeriodSeconds
// after SIGTERM; that must be after bucketd is done, with 5 s to spare.
func checkShutdown(t *testing.T, s *shape, c *corev1.Container, set map[string]string) {
	grace := s.template.Spec.TerminationGracePeriodSeconds
	bound := shutdownBound(t, c, set)
	if grace == nil || time.Duration(*grace)*time.Second < bound+5*time.Second {
		t.Errorf("%s: terminationGracePeriodSeconds %v, want at least %v (the shutdown's bound %v, plus 5 s)", s.dir, grace, bound+5*time.Second, bound)
	}
	t.Logf("%s: shutdown bound %v, grace period %ds", s.dir, bound, *grace)
}

// checkResources: requests and limits are set; in memory mode
// --max-buckets bounds the buckets, and the memory request holds that many
// buckets and --max-clients connections at their measured sizes.
func checkResources(t *testing.T, s *shape, c *corev1.Container, set map[string]string) {
	req, lim := c.Resources.Requests, c.Resources.Limits
	mem, memLimit := req.Memory(), lim.Memory()
	if req.Cpu().IsZero() || mem.IsZero() || memLimit.IsZero() || memLimit.Cmp(*mem) < 0 {
		t.Fatalf("%s: resources %+v: want cpu and memory requests, and a memory limit no lower than the request", s.dir, c.Resources)
	}
	buckets, clients := integer(t, set, "max-buckets"), integer(t, set, "max-clients")
	storeMode := set["store"] != "" || set["store-cluster"] != ""
	if !storeMode && buckets == 0 {
		t.Errorf("%s: memory mode without --max-buckets: memory has no bound", s.dir)
	}
	if clients == 0 {
		t.Errorf("%s: no --max-clients: memory has no bound", s.dir)
	}
	if storeMode {
		buckets = 0 // Redis holds them
	}
	need := buckets*bytesPerBucket + clients*bytesPerClient + processBytes
	if mem.Value() < need {
		t.Errorf("%s: memory request %s < %d MiB for %d buckets and %d clients", s.dir, mem, need>>20, buckets, clients)
	}
	t.Logf("%s: memory request %s for %d buckets and %d clients (%d MiB needed), limit %s",
		s.dir, mem, buckets, clients, need>>20, memLimit)
}

// checkSecurity: bucketd needs no privilege at all.
func checkSecurity(t *testing.T, s *shape, c *corev1.Container) {
	pod, sc := s.template.Spec.SecurityContext, c.SecurityContext
	switch {
	case pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot:
		t.Errorf("%s: the pod does not set runAsNonRoot", s.dir)
	case sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("%s: the container allows privilege escalation", s.dir)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("%s: the root file system is writable", s.dir)
	case sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL":
		t.Errorf("%s: capabilities %+v, want drop ALL", s.dir, sc.Capabilities)
	}
	if strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image, ":") {
		t.Errorf("%s: image %q: name a version", s.dir, c.Image)
	}
}
