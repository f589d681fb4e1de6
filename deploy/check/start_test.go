package check

import (
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestContainerStarts runs the real bucketd with the container's command
// line and environment as each manifest gives them (Secret references
// resolved from the shape's Secret), changing only what points outside
// this machine: the listen addresses become free loopback ports, a mounted
// path becomes a temporary directory (holding the ConfigMap's files, for
// a ConfigMap's mount), and the store's Redis a local redis-server.
// bucketd must answer /healthz and /readyz, ask for the Secret's password,
// grant a TB.ACQUIRE, apply the ConfigMap's policy and, after the file
// changes as the kubelet changes it, the new one on CONFIG RELOAD, and exit
// 0 on SIGTERM within the grace period, leaving its snapshot on the
// volume.
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
			for path, files := range s.configFiles(c) {
				for name, body := range files {
					writeFile(t, filepath.Join(mounts[path], name), body)
				}
			}
			args := make([]string, len(c.Args))
			for i, a := range c.Args {
				args[i] = rehome(a, mounts)
			}
			env, ep := containerEnv(t, s, c, mounts)
			p := startBucketd(t, args, env)
			p.serving(t, ep.addr, ep.metrics, ep.pass)
			if ep.redis != "" {
				checkInRedis(t, ep.redis, ep.redisPass, "tb:deploy-check")
			}
			checkPolicyReload(t, ep, ep.config, func(c *respConn) {
				if got, err := c.do("CONFIG", "RELOAD"); err != nil || got != "+OK" {
					t.Fatalf("CONFIG RELOAD: %q, %v", got, err)
				}
			})
			took := p.stop(t, time.Duration(*s.template.Spec.TerminationGracePeriodSeconds)*time.Second)
			t.Logf("%s: exit %v after SIGTERM", s.dir, took.Round(time.Millisecond))
			for _, m := range c.VolumeMounts {
				if !m.ReadOnly {
					if files, _ := filepath.Glob(filepath.Join(mounts[m.MountPath], "*.snapshot")); len(files) != 1 {
						t.Errorf("%s: no snapshot on the volume at %s after the shutdown", s.dir, m.MountPath)
					}
				}
			}
		})
	}
}

func writeFile(t *testing.T, name, body string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkPolicyReload: the config file's policy api is in force (a cost
// above its capacity is denied); after the file's capacity doubles,
// reload (CONFIG RELOAD, as an operator sends it after the ConfigMap
// changed, or the unit's SIGHUP) applies it without a restart: the same
// cost is then allowed, within 10 s.
func checkPolicyReload(t *testing.T, ep endpoints, file string, reload func(*respConn)) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	old, ok := policyCapacity(string(data))
	if !ok {
		t.Fatalf("%s: no policy api with a whole-number capacity:\n%s", file, data)
	}
	c, err := dialRESP(ep.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	do := func(want string, args ...string) {
		t.Helper()
		if got, err := c.do(args...); err != nil || got != want {
			t.Fatalf("%q: %q, %v; want %q", args, got, err, want)
		}
	}
	do("+OK", "AUTH", ep.pass)
	over := strconv.Itoa(old + 1)
	do(":0", "TB.ACQUIRE", "deploy-check-policy", "POLICY", "api", over)
	writeFile(t, file, strings.Replace(string(data), "capacity: "+strconv.Itoa(old), "capacity: "+strconv.Itoa(2*old), 1))
	reload(c)
	eventually(t, 10*time.Second, "the reloaded policy allows a cost of "+over, func() bool {
		got, err := c.do("TB.ACQUIRE", "deploy-check-policy", "POLICY", "api", over)
		return err == nil && got == ":1"
	})
}

// policyCapacity finds the capacity of the policy api in a config file.
func policyCapacity(yaml string) (int, bool) {
	_, rest, ok := strings.Cut(yaml, "api:")
	if !ok {
		return 0, false
	}
	_, rest, ok = strings.Cut(rest, "capacity: ")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(strings.Fields(rest)[0])
	return n, err == nil
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

// endpoints are where the started bucketd, its config file and its Redis
// are.
type endpoints struct {
	addr, metrics, pass string
	config              string
	redis, redisPass    string
}

// containerEnv resolves the container's environment as the kubelet would
// and rewrites the addresses and the paths under mounts (see
// TestContainerStarts).
func containerEnv(t *testing.T, s *shape, c *corev1.Container, mounts map[string]string) ([]string, endpoints) {
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
		case "BUCKETD_CONFIG":
			_, v, _ = strings.Cut(rehome("="+v, mounts), "=")
			ep.config = v
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
