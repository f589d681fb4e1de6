package check

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestContainerStarts runs the real bucketd with the container's command
// line and environment as each manifest gives them (Secret references
// resolved from the shape's Secret), changing only what points outside
// this machine: the listen addresses become free loopback ports, a mounted
// path becomes a temporary directory, and the store's Redis a local
// redis-server. bucketd must answer /healthz and /readyz, ask for the
// Secret's password, grant a TB.ACQUIRE, and exit 0 on SIGTERM within the
// grace period, leaving its snapshot on the volume.
func TestContainerStarts(t *testing.T) {
	for _, s := range loadShapes(t) {
		t.Run(filepath.Base(s.dir), func(t *testing.T) {
			c := s.container(t)
			if len(c.Command) != 1 || filepath.Base(c.Command[0]) != "bucketd" {
				t.Fatalf("command %q, want the image's bucketd", c.Command)
			}
			mounts := map[string]string{}
			for _, m := range c.VolumeMounts {
				mounts[m.MountPath] = t.TempDir()
			}
			args := make([]string, len(c.Args))
			for i, a := range c.Args {
				args[i] = rehome(a, mounts)
			}
			env, ep := containerEnv(t, s, c)
			p := startBucketd(t, args, env)
			p.serving(t, ep.addr, ep.metrics, ep.pass)
			if ep.redis != "" {
				checkInRedis(t, ep.redis, ep.redisPass, "tb:deploy-check")
			}
			took := p.stop(t, time.Duration(*s.template.Spec.TerminationGracePeriodSeconds)*time.Second)
			t.Logf("%s: exit %v after SIGTERM", s.dir, took.Round(time.Millisecond))
			for path, dir := range mounts {
				if files, _ := filepath.Glob(filepath.Join(dir, "*.snapshot")); len(files) != 1 {
					t.Errorf("%s: no snapshot on the volume at %s after the shutdown", s.dir, path)
				}
			}
		})
	}
}

// rehome rewrites a path under a mount path into the directory standing in
// for it: --data-dir=/data becomes --data-dir=<temp>.
func rehome(arg string, mounts map[string]string) string {
	for path, dir := range mounts {
		if i := strings.Index(arg, "="+path); i >= 0 {
			rest := arg[i+1+len(path):]
			if rest == "" || rest[0] == '/' {
				return arg[:i+1] + dir + rest
			}
		}
	}
	return arg
}

// endpoints are where the started bucketd and its Redis are.
type endpoints struct {
	addr, metrics, pass string
	redis, redisPass    string
}

// containerEnv resolves the container's environment as the kubelet would
// and rewrites the addresses (see TestContainerStarts).
func containerEnv(t *testing.T, s *shape, c *corev1.Container) ([]string, endpoints) {
	t.Helper()
	var env []string
	var ep endpoints
	for _, e := range c.Env {
		v := e.Value
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
			var err error
			if v, err = s.secretValue(ref.SecretKeyRef.Name, ref.SecretKeyRef.Key); err != nil {
				t.Fatal(err)
			}
		}
		switch e.Name {
		case "BUCKETD_ADDR":
			v = freeAddr(t)
			ep.addr = v
		case "BUCKETD_METRICS_ADDR":
			v = freeAddr(t)
			ep.metrics = v
		case "BUCKETD_REQUIREPASS":
			ep.pass = v
		case "BUCKETD_STORE", "BUCKETD_REPLICATE":
			v, ep.redis, ep.redisPass = localRedis(t, v)
		}
		env = append(env, e.Name+"="+v)
	}
	if ep.addr == "" || ep.metrics == "" || ep.pass == "" {
		t.Fatalf("%s: the container does not set BUCKETD_ADDR, BUCKETD_METRICS_ADDR and BUCKETD_REQUIREPASS", s.dir)
	}
	return env, ep
}

// localRedis starts a redis-server with the password of the Redis URL u
// and returns u pointing at it, with its address and password.
func localRedis(t *testing.T, u string) (string, string, string) {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil || (parsed.Scheme != "redis" && parsed.Scheme != "rediss") {
		t.Fatalf("Redis URL %q: want redis:// or rediss:// (%v)", u, err)
	}
	pass, _ := parsed.User.Password()
	addr := startRedis(t, pass)
	parsed.Scheme, parsed.Host = "redis", addr // no TLS on the local one
	return parsed.String(), addr, pass
}

// checkInRedis asks the Redis at addr whether key exists: store mode kept
// the bucket there.
func checkInRedis(t *testing.T, addr, pass, key string) {
	t.Helper()
	c, err := dialRESP(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if pass != "" {
		c.do("AUTH", pass) //nolint:errcheck // EXISTS says whether it worked
	}
	if got, err := c.do("EXISTS", key); err != nil || got != ":1" {
		t.Errorf("EXISTS %s in the store's Redis: %q, %v; want :1", key, got, err)
	}
}
