// Package redistest starts real redis-server processes for tests: one
// standalone server (Start), a Redis Cluster of several masters
// (StartCluster), or a master with a replica watched by Redis Sentinels
// (StartSentinel), each on free loopback ports, in a temporary directory,
// with persistence off, and killed when the test ends.
//
// When redis-server is not installed the calling test is skipped with a
// message saying how to install it, unless the environment variable
// BUCKETD_REQUIRE_REDIS is set (scripts/test.sh sets it), in which case the
// test fails: a CI run must not pass by skipping.
//
// Every function and method that takes or holds a testing.TB reports
// problems with t.Fatal, so call them from the test's own goroutine.
// StartCluster needs Redis 7.0 or later (it sets cluster-port and uses
// CLUSTER ADDSLOTSRANGE).
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
)

// RequireEnv names the environment variable that turns a missing
// redis-server or redis-cli from a skipped test into a failed one.
const RequireEnv = "BUCKETD_REQUIRE_REDIS"

const (
	startTimeout = 10 * time.Second // for a process to answer
	stopTimeout  = 10 * time.Second // for SIGTERM before SIGKILL
	pollEvery    = 10 * time.Millisecond
	startTries   = 10 // free ports tried when another process takes ours
)

// ServerBinary returns the path of redis-server (from PATH, else
// /usr/bin/redis-server). When there is none it skips t, or fails it if
// BUCKETD_REQUIRE_REDIS is set.
func ServerBinary(t testing.TB) string {
	t.Helper()
	return binary(t, "redis-server", "redis-server")
}

// CLIBinary returns the path of redis-cli, skipping or failing t like
// ServerBinary when it is missing.
func CLIBinary(t testing.TB) string {
	t.Helper()
	return binary(t, "redis-cli", "redis-tools (or redis-server)")
}

func binary(t testing.TB, name, pkg string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := "/usr/bin/" + name; isExecutable(p) {
		return p
	}
	msg := fmt.Sprintf("redistest: %s not found in PATH or /usr/bin; install it "+
		"(Debian/Ubuntu: apt-get install -y %s; macOS: brew install redis)", name, pkg)
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("%s (%s is set, so this fails instead of skipping)", msg, RequireEnv)
	}
	t.Skip(msg)
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// Server is one redis-server process started by Start. Its address stays
// the same across Restart.
type Server struct {
	// Addr is "127.0.0.1:<Port>".
	Addr string
	// Port is the TCP port the server listens on.
	Port int
	// Dir is the server's working directory, a temporary directory of the
	// test; redis.log there holds its log.
	Dir string

	t       testing.TB
	bin     string
	busPort int      // a cluster node's --cluster-port; 0 outside a cluster
	conf    string   // a Sentinel's config file, which redis-server rewrites; "" for a server
	extra   []string // arguments after the common ones
	logFrom int64    // where the log of the latest run starts

	mu   sync.Mutex // guards proc, which the cleanup reads too
	proc *process
}

// process is one run of redis-server.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once Wait has returned
}

func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// errPortTaken is what a start attempt returns when the port (or the
// cluster bus port) turned out to be in use, so another pair is tried.
var errPortTaken = errors.New("redistest: port already in use")

// Start starts redis-server on 127.0.0.1 and a free port, with
// --save "" and --appendonly no and a temporary directory, waits until it
// answers, and makes the test's cleanup kill it. extraArgs are appended to
// the command line (for example "--maxmemory", "1mb").
func Start(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	return start(t, extraArgs, false)
}

// start starts a server with extra arguments. With bus set, a second free
// port is passed as --cluster-port.
func start(t testing.TB, extraArgs []string, bus bool) *Server {
	t.Helper()
	s := &Server{t: t, bin: ServerBinary(t), Dir: t.TempDir()}
	s.run(extraArgs, bus)
	return s
}

// run starts the prepared s on a free port, trying another when the port
// turns out to be taken, and makes the test's cleanup kill it.
func (s *Server) run(extraArgs []string, bus bool) {
	t := s.t
	t.Helper()
	t.Cleanup(s.cleanup)
	var err error
	for range startTries {
		s.Port = freePort(t)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		s.extra = extraArgs
		if bus {
			s.busPort = freePort(t)
			s.extra = append([]string{"--cluster-port", strconv.Itoa(s.busPort)}, extraArgs...)
		}
		if err = s.launch(); !errors.Is(err, errPortTaken) {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: starting redis-server: %v", err)
	}
}

// freePort asks the kernel for a free TCP port on 127.0.0.1. redis-server
// 7.0 has no --port 0, so the port is released before redis-server binds it;
// if someone else takes it meanwhile, start tries another.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: finding a free port: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatalf("redistest: finding a free port: %v", err)
	}
	return port
}

func (s *Server) logPath() string { return filepath.Join(s.Dir, "redis.log") }

// launch runs redis-server on s.Port and waits until that very process
// answers.
func (s *Server) launch() error {
	args := []string{
		"--port", strconv.Itoa(s.Port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.Dir,
		"--daemonize", "no",
		"--logfile", "", // log to stdout, which goes to redis.log
	}
	if s.conf != "" {
		// The file comes first; Sentinel saves its state into it.
		args = append([]string{s.conf, "--sentinel"}, args...)
	}
	args = append(args, s.extra...)
	log, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own descriptor
	if fi, err := log.Stat(); err == nil {
		s.logFrom = fi.Size()
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		// The exit status is of no interest: the tests kill these
		// processes on purpose; exited is what the waiters watch.
		_ = cmd.Wait()
		close(p.exited)
	}()
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return s.waitReady(p)
}

// waitReady polls until the server on s.Addr answers INFO with p's own
// process id, so another program that grabbed the port is not mistaken for
// ours. A process that exits first is reported with the end of its log.
func (s *Server) waitReady(p *process) error {
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	want := p.cmd.Process.Pid
	for {
		if pid, err := infoPID(s.Addr); err == nil && pid == want {
			return nil
		}
		select {
		case <-p.exited:
			if strings.Contains(s.logSince(s.logFrom), "already in use") {
				return fmt.Errorf("%w: %d", errPortTaken, s.Port)
			}
			return fmt.Errorf("redis-server exited at start: %s", s.logTail())
		case <-deadline.C:
			return fmt.Errorf("redis-server (pid %d) did not answer on %s within %v; log: %s",
				want, s.Addr, startTimeout, s.logTail())
		case <-tick.C:
		}
	}
}

// infoPID asks the server at addr for its process_id with a raw RESP
// INFO server, so it needs no client pool.
func infoPID(addr string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return 0, err
	}
	if _, err := c.Write([]byte("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if !strings.HasPrefix(head, "$") {
		return 0, fmt.Errorf("INFO answered %q", strings.TrimSpace(head))
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("INFO answered %q", strings.TrimSpace(head))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server has no process_id")
}

// logSince returns the log from byte offset from on.
func (s *Server) logSince(from int64) string {
	b, err := os.ReadFile(s.logPath())
	if err != nil || from > int64(len(b)) {
		return ""
	}
	return string(b[from:])
}

// logTail returns the last lines of the server's log, for error messages.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logPath())
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	b = bytes.TrimSpace(b)
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// current returns the process of the latest start, or fails the test.
func (s *Server) current() *process {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		s.t.Fatalf("redistest: server on %s was never started", s.Addr)
	}
	return s.proc
}

// PID returns the process id of the redis-server run now (or last).
func (s *Server) PID() int {
	s.t.Helper()
	return s.current().cmd.Process.Pid
}

// Running reports whether the redis-server process is still alive (a
// paused one is).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && s.proc.running()
}

func (s *Server) signal(sig syscall.Signal) error {
	p := s.current()
	if !p.running() {
		return nil
	}
	// Only this one PID, never a process group or a name.
	err := syscall.Kill(p.cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil // exited meanwhile
	}
	return err
}

// Stop sends SIGTERM (and SIGCONT, in case the server is paused) and waits
// for the process to exit, killing it if it takes longer than 10 s.
func (s *Server) Stop() {
	s.t.Helper()
	p := s.current()
	if err := s.signal(syscall.SIGTERM); err != nil {
		s.t.Fatalf("redistest: SIGTERM to redis-server: %v", err)
	}
	if err := s.signal(syscall.SIGCONT); err != nil {
		s.t.Fatalf("redistest: SIGCONT to redis-server: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		s.t.Logf("redistest: redis-server on %s ignored SIGTERM for %v; killing it", s.Addr, stopTimeout)
		s.Kill()
	}
}

// Kill sends SIGKILL and waits for the process to exit.
func (s *Server) Kill() {
	s.t.Helper()
	p := s.current()
	if err := s.signal(syscall.SIGKILL); err != nil {
		s.t.Fatalf("redistest: SIGKILL to redis-server: %v", err)
	}
	<-p.exited
}

// Pause stops the process with SIGSTOP: connections stay open but nothing
// is answered, like a server that hangs. Resume undoes it.
func (s *Server) Pause() {
	s.t.Helper()
	if err := s.signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("redistest: SIGSTOP to redis-server: %v", err)
	}
}

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() {
	s.t.Helper()
	if err := s.signal(syscall.SIGCONT); err != nil {
		s.t.Fatalf("redistest: SIGCONT to redis-server: %v", err)
	}
}

// Restart stops the server if it runs (SIGTERM) and starts a new process
// with the same arguments on the same port and directory. The data is gone
// (persistence is off) unless the test turned it on with extra arguments; a
// cluster node keeps its identity through nodes.conf.
func (s *Server) Restart() {
	s.t.Helper()
	if s.Running() {
		s.Stop()
	}
	// The port is ours again once the old process has exited; redis-server
	// sets SO_REUSEADDR, so connections in TIME_WAIT do not block it.
	if err := s.launch(); err != nil {
		s.t.Fatalf("redistest: restarting redis-server on %s: %v", s.Addr, err)
	}
}

// cleanup kills the process of the latest start, if it still runs, and
// shows the end of its log when the test failed.
func (s *Server) cleanup() {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return
	}
	if p.running() {
		if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			s.t.Errorf("redistest: killing redis-server pid %d: %v", p.cmd.Process.Pid, err)
		}
		<-p.exited
	}
	if s.t.Failed() {
		s.t.Logf("redistest: end of the log of redis-server on %s:\n%s", s.Addr, s.logTail())
	}
}

// Client returns a go-redis client for the server, closed when the test
// ends. opts, when given, are used as they are except for Addr.
func (s *Server) Client(opts ...*redis.Options) *redis.Client {
	s.t.Helper()
	o := &redis.Options{}
	if len(opts) > 0 && opts[0] != nil {
		c := *opts[0]
		o = &c
	}
	o.Addr = s.Addr
	c := redis.NewClient(o)
	s.t.Cleanup(func() {
		// Closing a client whose server was killed reports nothing useful.
		_ = c.Close()
	})
	return c
}

// Cluster is a Redis Cluster of masters without replicas, started by
// StartCluster.
type Cluster struct {
	Nodes []*Server
	t     testing.TB
}

// StartCluster starts masters (at least 3, as Redis Cluster requires)
// redis-server processes with cluster mode on, each with its nodes.conf in
// its own temporary directory, and joins them: the 16384 slots split in
// equal ranges in node order (as `redis-cli --cluster create` splits them),
// a distinct config epoch each, a CLUSTER MEET from the first node to the
// others. It waits until every node knows every other and says
// cluster_state:ok, which a fresh master does no sooner than 2 s after it
// started (Redis's CLUSTER_WRITABLE_DELAY). The test's cleanup kills them.
// extraArgs are appended to every node's command line, after the
// defaults, so they override them: "--cluster-node-timeout", "60000" keeps
// a killed master's slots assigned to it (and the cluster ok) for a minute
// instead of 5 s.
func StartCluster(t testing.TB, masters int, extraArgs ...string) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: a Redis Cluster needs at least 3 masters, not %d", masters)
	}
	c := &Cluster{t: t}
	for range masters {
		args := []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", // in --dir, the node's temp dir
			"--cluster-node-timeout", "5000",
		}
		n := start(t, append(args, extraArgs...), true)
		c.Nodes = append(c.Nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.join(ctx)
	c.waitOK(ctx)
	return c
}

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// join gives each node its share of the slots and its own config epoch,
// then makes every node meet every other: a node that only heard of
// another through gossip can take seconds longer to reach cluster_state:ok.
func (c *Cluster) join(ctx context.Context) {
	c.t.Helper()
	clients := make([]*redis.Client, len(c.Nodes))
	for i, n := range c.Nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		defer clients[i].Close() //nolint:errcheck // one-off clients; the test fails on what matters
		lo, hi := i*clusterSlots/len(c.Nodes), (i+1)*clusterSlots/len(c.Nodes)-1
		err := clients[i].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err()
		if err == nil {
			err = clients[i].Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err()
		}
		if err != nil {
			c.t.Fatalf("redistest: giving node %s the slots %d-%d: %v", n.Addr, lo, hi, err)
		}
	}
	for i := range c.Nodes {
		for _, n := range c.Nodes[i+1:] {
			if err := clients[i].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.Port, n.busPort).Err(); err != nil {
				c.t.Fatalf("redistest: CLUSTER MEET %s from %s: %v", n.Addr, c.Nodes[i].Addr, err)
			}
		}
	}
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// waitOK polls CLUSTER INFO on every node until all say cluster_state:ok
// and know every node.
func (c *Cluster) waitOK(ctx context.Context) {
	c.t.Helper()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	known := fmt.Sprintf("cluster_known_nodes:%d\r\n", len(c.Nodes))
	for _, n := range c.Nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		for {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok\r\n") && strings.Contains(info, known) {
				break
			}
			select {
			case <-ctx.Done():
				_ = rdb.Close() // the test fails anyway
				c.t.Fatalf("redistest: node %s never reached cluster_state:ok: %v\n%s", n.Addr, err, info)
			case <-tick.C:
			}
		}
		if err := rdb.Close(); err != nil {
			c.t.Fatalf("redistest: closing client of %s: %v", n.Addr, err)
		}
	}
}

// Client returns a go-redis cluster client for the cluster, closed when the
// test ends. opts, when given, are used as they are except for Addrs.
func (c *Cluster) Client(opts ...*redis.ClusterOptions) *redis.ClusterClient {
	c.t.Helper()
	o := &redis.ClusterOptions{}
	if len(opts) > 0 && opts[0] != nil {
		cp := *opts[0]
		o = &cp
	}
	o.Addrs = c.Addrs()
	cc := redis.NewClusterClient(o)
	c.t.Cleanup(func() {
		// As for Server.Client: nodes may have been killed on purpose.
		_ = cc.Close()
	})
	return cc
}

// ParseBucket reads a bucket HASH as the Lua script stores it (exactly the
// fields tokens and ts, as HGETALL returns them) into a bucket.State.
func ParseBucket(h map[string]string) (bucket.State, error) {
	if len(h) != 2 {
		return bucket.State{}, fmt.Errorf("want exactly the fields tokens and ts, got %v", h)
	}
	tokens, err := strconv.ParseFloat(h["tokens"], 64)
	if err != nil {
		return bucket.State{}, fmt.Errorf("tokens: %w", err)
	}
	ts, err := strconv.ParseInt(h["ts"], 10, 64)
	if err != nil {
		return bucket.State{}, fmt.Errorf("ts: %w", err)
	}
	return bucket.State{Tokens: tokens, Last: ts}, nil
}

// StoredBucket reads the bucket at key (HGETALL and ParseBucket); false
// when the key does not exist. Anything else than a bucket fails the test.
func StoredBucket(t testing.TB, rdb redis.Cmdable, key string) (bucket.State, bool) {
	t.Helper()
	h, err := rdb.HGetAll(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("HGETALL %s: %v", key, err)
	}
	if len(h) == 0 {
		return bucket.State{}, false
	}
	s, err := ParseBucket(h)
	if err != nil {
		t.Fatalf("HGETALL %s: %v", key, err)
	}
	return s, true
}
