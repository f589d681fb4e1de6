package clients

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scriptReport is what clients/node/run.mjs and clients/python/run.py print.
type scriptReport struct {
	Client  string `json:"client"`
	Version string `json:"version"`
	Results []any  `json:"results"`
}

// runScript runs a runner script (argv) with the steps on its stdin against
// addr, and returns its results. A script that fails or prints no report
// fails the test with its output.
func runScript(t *testing.T, argv []string, addr, password string, steps []step) scriptReport {
	t.Helper()
	in, err := json.Marshal(steps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(withoutBucketdEnv(os.Environ()), "BUCKETD_ADDR="+addr, "BUCKETD_PASSWORD="+password)
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(argv, " "), err, &stdout, &stderr)
	}
	// The report is the line that starts with {"client"; a client may log
	// lines of its own to stdout (glide does).
	var rep scriptReport
	err = errors.New("no line starting with {\"client\"")
	for line := range strings.Lines(stdout.String()) {
		if strings.HasPrefix(line, `{"client"`) {
			dec := json.NewDecoder(strings.NewReader(line))
			dec.UseNumber()
			err = dec.Decode(&rep)
		}
	}
	if err != nil {
		t.Fatalf("%s printed no report: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(argv, " "), err, &stdout, &stderr)
	}
	for i := range rep.Results {
		rep.Results[i] = fromJSON(rep.Results[i])
	}
	t.Logf("%s %s: %d steps in %v", rep.Client, rep.Version, len(rep.Results), time.Since(start).Round(time.Millisecond))
	return rep
}

// nodeDir is clients/node, where package-lock.json pins the Node clients.
var nodeDir = filepath.Join("..", "node")

// requireNode finds node, version 20 or later (node-redis 6 and ioredis 6
// need it), with clients/node's packages installed.
func requireNode(t *testing.T) string {
	t.Helper()
	node := require(t, "node", "install Node.js 20 or later (Debian: apt-get install -y nodejs npm)")
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	major := 0
	if m := regexp.MustCompile(`^v(\d+)\.`).FindSubmatch(out); m != nil {
		major, _ = strconv.Atoi(string(m[1]))
	}
	if major < 20 {
		need(t, "node "+strings.TrimSpace(string(out))+" is too old: node-redis 6 and ioredis 6 need Node.js 20 or later")
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules")); err != nil {
		need(t, "clients/node/node_modules is missing: run `npm ci` in clients/node (scripts/test.sh does)")
	}
	return node
}

// The Node clients, each created with only the host and port (and the
// password): node-redis createClient({socket: {host, port}}), ioredis
// new Redis({host, port}), valkey-glide GlideClient.createClient({addresses}).
// Transactions are node-redis multi().exec(), ioredis multi().exec() and
// glide's atomic Batch.
var nodeClients = []string{"node-redis", "ioredis", "glide"}

func TestNodeClients(t *testing.T) {
	node := requireNode(t)
	s := startBucketd(t)
	for _, client := range nodeClients {
		t.Run(client, func(t *testing.T) {
			sc := newScenario(client, 3)
			rep := runScript(t, []string{node, filepath.Join(nodeDir, "run.mjs"), client}, s.addr, "", sc.steps())
			sc.check(t, client, rep.Results)
		})
	}
}

// With --requirepass the clients send HELLO 3 AUTH default <password>;
// without it, the same HELLO succeeds whatever the password, as with Redis.
func TestNodeClientsPassword(t *testing.T) {
	node := requireNode(t)
	for _, mode := range []struct {
		name string
		args []string
	}{{"requirepass", []string{"--requirepass", "s3cret"}}, {"no requirepass", nil}} {
		s := startBucketd(t, mode.args...)
		for _, client := range nodeClients {
			t.Run(mode.name+"/"+client, func(t *testing.T) {
				sc := newScenario(client, 3)
				rep := runScript(t, []string{node, filepath.Join(nodeDir, "run.mjs"), client}, s.addr, "s3cret", sc.steps())
				sc.check(t, client, rep.Results)
			})
		}
	}
}

// python finds a python3 that can import redis: $PYTHON, the Debian python
// (which sees python3-redis even when a pyenv or virtualenv python3 comes
// first in PATH), or python3 from PATH.
func python(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("PYTHON"), "/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	for _, py := range candidates {
		if py != "" && exec.Command(py, "-c", "import redis").Run() == nil {
			return py
		}
	}
	need(t, "no python3 that can import redis: apt-get install -y python3-redis (or run scripts/test.sh as root, which does)")
	return ""
}

// redis-py as its README creates it: redis.Redis(host, port), RESP2 by
// default in 4.x; its default pipeline() is a MULTI/EXEC transaction.
func TestRedisPy(t *testing.T) {
	py := python(t)
	for _, mode := range []struct {
		name, password string
		args           []string
	}{{"no password", "", nil}, {"requirepass", "s3cret", []string{"--requirepass", "s3cret"}}} {
		t.Run(mode.name, func(t *testing.T) {
			s := startBucketd(t, mode.args...)
			sc := newScenario("redis-py", 2)
			rep := runScript(t, []string{py, filepath.Join("..", "python", "run.py")}, s.addr, mode.password, sc.steps())
			sc.check(t, "redis-py", rep.Results)
		})
	}
}
