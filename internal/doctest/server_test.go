package doctest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	startTimeout = 20 * time.Second // for bucketd to listen or exit
	stopTimeout  = 5 * time.Second  // for SIGTERM before SIGKILL
)

// listenLine is bucketd's "ready" log line (text format), with the
// addresses it got for 127.0.0.1:0.
var (
	listenLine  = regexp.MustCompile(`msg=listening addr=127\.0\.0\.1:(\d+)`)
	metricsAttr = regexp.MustCompile(` metrics=127\.0\.0\.1:(\d+)`)
)

// bucketd is one running server of a session.
type bucketd struct {
	cmd     *exec.Cmd
	port    string
	metrics string // "" when --metrics-addr= turned the HTTP server off
	log     *logBuffer
	exited  chan struct{}
}

// logBuffer collects a process's output while the test reads it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// baseEnv is the test's environment without anything that would change
// what bucketd or redis-cli do (BUCKETD_*, REDISCLI_*), with GOMAXPROCS=2:
// the docs show a 2-CPU machine (4 shards, gomaxprocs=2).
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "BUCKETD_") || strings.HasPrefix(kv, "REDISCLI_") || strings.HasPrefix(kv, "GOMAXPROCS=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "GOMAXPROCS=2")
}

// startBucketd runs the built bucketd in dir with loopback addresses on
// free ports, then args (which win), and waits until it listens or exits.
// A server that listens is returned; one that exits returns its output
// (stdout and stderr, as a shell's 2>&1 shows them) and no server.
func startBucketd(dir string, extraEnv, args []string) (*bucketd, string, error) {
	all := append([]string{"--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"}, args...)
	cmd := exec.Command(bucketdBin, all...)
	cmd.Dir = dir
	cmd.Env = append(baseEnv(), extraEnv...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	s := &bucketd{cmd: cmd, log: &logBuffer{}, exited: make(chan struct{})}
	listening := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			s.log.Write([]byte(line + "\n"))
			if m := listenLine.FindStringSubmatch(line); m != nil {
				port, metrics := m[1], ""
				if mm := metricsAttr.FindStringSubmatch(line); mm != nil {
					metrics = mm[1]
				}
				listening <- []string{port, metrics}
			}
		}
		io.Copy(io.Discard, pr)
	}()
	go func() {
		cmd.Wait()
		pw.Close()
		close(s.exited)
	}()
	select {
	case m := <-listening:
		s.port, s.metrics = m[0], m[1]
		return s, "", nil
	case <-s.exited:
		time.Sleep(10 * time.Millisecond) // let the scanner take the last lines
		return nil, s.log.String(), nil
	case <-time.After(startTimeout):
		s.stop()
		return nil, "", fmt.Errorf("bucketd %s neither listened nor exited within %v:\n%s", strings.Join(args, " "), startTimeout, s.log)
	}
}

// stop ends the server: SIGTERM, then SIGKILL if it lingers.
func (s *bucketd) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// addrMap maps the doc's fixed ports (6380 for bucketd, 9380 for its
// metrics, 6379 for Redis) to the session's real ones: forward in
// commands, back in output.
type addrMap struct {
	pairs []portPair
}

type portPair struct {
	doc, real string
	fwd, back *regexp.Regexp
}

func (a *addrMap) set(doc, real string) {
	for i := range a.pairs {
		if a.pairs[i].doc == doc {
			a.pairs = append(a.pairs[:i], a.pairs[i+1:]...)
			break
		}
	}
	if real == "" {
		return
	}
	a.pairs = append(a.pairs, portPair{
		doc:  doc,
		real: real,
		fwd:  regexp.MustCompile(`\b` + doc + `\b`),
		back: regexp.MustCompile(`127\.0\.0\.1:` + real + `\b`),
	})
}

// forward rewrites the doc's ports in a command. A port the session does
// not have is an error, so no command ever reaches a real 6379 or 6380.
func (a *addrMap) forward(cmd string) (string, error) {
	for _, doc := range []string{"6380", "9380", "6379"} {
		if !regexp.MustCompile(`\b` + doc + `\b`).MatchString(cmd) {
			continue
		}
		p := a.find(doc)
		if p == nil {
			return "", fmt.Errorf("the command uses port %s, which this session does not have (%s)", doc, hint[doc])
		}
		cmd = p.fwd.ReplaceAllString(cmd, p.real)
	}
	return cmd, nil
}

var hint = map[string]string{
	"6380": "no bucketd is running",
	"9380": "no bucketd with metrics is running",
	"6379": "add the redis directive",
}

func (a *addrMap) find(doc string) *portPair {
	for i := range a.pairs {
		if a.pairs[i].doc == doc {
			return &a.pairs[i]
		}
	}
	return nil
}

// back rewrites the session's real addresses in an output line as the
// doc's.
func (a *addrMap) back(line string) string {
	for _, p := range a.pairs {
		line = p.back.ReplaceAllString(line, "127.0.0.1:"+p.doc)
	}
	return line
}

// bareRedisCLI finds redis-cli calls that name no server; like redis-cli
// itself, the test sends them to port 6379.
var bareRedisCLI = regexp.MustCompile(`(^|[\s;|&(])redis-cli\b([^;|&)]*)`)

func defaultRedisPort(cmd string) string {
	return bareRedisCLI.ReplaceAllStringFunc(cmd, func(m string) string {
		sub := bareRedisCLI.FindStringSubmatch(m)
		if regexp.MustCompile(`(^|\s)(-p|-h|-u|--cluster)\s`).MatchString(sub[2] + " ") {
			return m
		}
		return sub[1] + "redis-cli -p 6379" + sub[2]
	})
}

// linkRepo makes the repository's top-level entries visible in a session's
// directory (scripts/, internal/ …), so commands that read files by their
// repository path work while everything a session writes stays in its own
// directory.
func linkRepo(dir string) error {
	entries, err := os.ReadDir(repoRoot)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := os.Symlink(filepath.Join(repoRoot, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
