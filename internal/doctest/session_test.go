package doctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/redistest"
)

// env is one run of a session: its directory, servers and shell.
type env struct {
	t        *testing.T
	s        *session
	dir      string
	addrs    addrMap
	server   *bucketd
	redis    *redistest.Server
	sh       *shell
	bindings []binding     // `any` words and what this run printed for them
	busy     time.Duration // the time the steps took beyond the doc's pauses
}

// slowAfter is how long a session's steps (bucketd's start, setup and shell
// commands, transcripts) may take together, beyond the pauses the doc asks
// for, before its time-dependent figures may differ from the doc's for
// reasons that are not the doc's fault: the doc's own figures may be up to
// 50 ms off the ideal, and `about` accepts 100. A session that fails after
// running this slowly is run again, three runs at most; a wrong doc fails
// every run, so the retry can only cost time.
const slowAfter = 50 * time.Millisecond

func (e *env) slow() bool { return e.busy > slowAfter }

// took records how long a step took beyond its planned pause.
func (e *env) took(began time.Time, planned time.Duration) {
	e.busy += max(time.Since(began)-planned, 0)
}

// setUp prepares the directory, Redis and (unless the session's first
// command starts it) bucketd.
func (e *env) setUp() error {
	e.dir = e.t.TempDir()
	if err := linkRepo(e.dir); err != nil {
		return err
	}
	for _, f := range e.s.files {
		if err := os.WriteFile(filepath.Join(e.dir, f.name), []byte(f.body), 0o644); err != nil {
			return err
		}
	}
	for _, m := range e.s.makers {
		if err := makeFiles(e.dir, m); err != nil {
			return err
		}
	}
	for _, b := range e.s.blocks {
		if b.d.redis && e.redis == nil {
			e.redis = redistest.Start(e.t)
			e.addrs.set("6379", fmt.Sprint(e.redis.Port))
		}
	}
	if e.startsOwnServer() {
		return nil
	}
	flags, err := e.forwardAll(e.s.blocks[0].d.server)
	if err != nil {
		return err
	}
	began := time.Now()
	srv, out, err := startBucketd(e.dir, nil, flags)
	e.took(began, 0)
	if err != nil {
		return err
	}
	if srv == nil {
		return fmt.Errorf("bucketd %s exited at start:\n%s", strings.Join(flags, " "), out)
	}
	e.useServer(srv)
	return nil
}

// startsOwnServer reports whether the session's first command runs
// bucketd itself, as `bucketd … &` or `go run ./cmd/bucketd …`.
func (e *env) startsOwnServer() bool {
	b := e.s.blocks[0]
	if b.kind != shellBlock || b.d.server != nil {
		return false
	}
	steps := shellSteps(b)
	if len(steps) == 0 {
		return false
	}
	_, _, ok := serverStart(steps[0].cmd)
	return ok
}

func (e *env) useServer(srv *bucketd) {
	e.server = srv
	e.addrs.set("6380", srv.port)
	e.addrs.set("9380", srv.metrics)
}

// tearDown stops what the run started (Redis stops with the test).
func (e *env) tearDown() {
	if e.sh != nil {
		e.sh.close()
	}
	if e.server != nil {
		e.server.stop()
	}
}

// makeFiles runs the commands of a block marked `makes` (the TLS files
// a page makes with openssl, say) in dir, in a bash of their own that
// stops at the first failure, before the session's server starts, and
// checks that the files it names are there. Their time is not the
// session's: nothing the session measures has started yet.
func makeFiles(dir string, b *block) error {
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, st := range shellSteps(b) {
		script.WriteString(st.cmd + "\n")
	}
	cmd := exec.Command("bash", "--noprofile", "--norc", "-c", script.String())
	cmd.Dir = dir
	cmd.Env = baseEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s (makes %s): %v\n%s", b, strings.Join(b.d.makes, " "), err, out)
	}
	for _, f := range b.d.makes {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return fmt.Errorf("%s: makes %s, but its commands did not: %v", b, f, err)
		}
	}
	return nil
}

// forwardAll rewrites the doc's ports in server flags.
func (e *env) forwardAll(words []string) ([]string, error) {
	out := make([]string, len(words))
	for i, w := range words {
		f, err := e.addrs.forward(w)
		if err != nil {
			return nil, err
		}
		out[i] = f
	}
	return out, nil
}

// shell returns the session's bash, starting it on first use. bucketd is
// first on its PATH, and BUCKETD_ADDR and BUCKETD_METRICS_ADDR point at
// the session's server, so `bucketd healthcheck` and a second `bucketd`
// find it where the docs' defaults would.
func (e *env) shell() (*shell, error) {
	if e.sh != nil {
		return e.sh, nil
	}
	env := append(baseEnv(), "PATH="+filepath.Dir(bucketdBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	env = append(env, e.addrEnv()...)
	sh, err := startShell(e.dir, env)
	if err != nil {
		return nil, err
	}
	e.sh = sh
	return sh, nil
}

// addrEnv is BUCKETD_ADDR and BUCKETD_METRICS_ADDR for the session's
// server; without one, free ports, so a stray bucketd never takes 6380.
func (e *env) addrEnv() []string {
	addr, metrics := "127.0.0.1:0", "127.0.0.1:0"
	if e.server != nil {
		addr = "127.0.0.1:" + e.server.port
		if e.server.metrics != "" {
			metrics = "127.0.0.1:" + e.server.metrics
		}
	}
	return []string{"BUCKETD_ADDR=" + addr, "BUCKETD_METRICS_ADDR=" + metrics}
}

// runBlock runs one block of the session.
func (e *env) runBlock(b *block, first bool) error {
	for _, c := range b.d.setup {
		cmd, err := e.prepare(c)
		if err != nil {
			return fmt.Errorf("%s: setup %s: %v", b, c, err)
		}
		sh, err := e.shell()
		if err != nil {
			return err
		}
		began := time.Now()
		out, status, err := sh.run(cmd)
		e.took(began, 0)
		if err != nil || status != 0 {
			return fmt.Errorf("%s: setup %s: exit status %d %v\n%s", b, c, status, err, out)
		}
	}
	if b.kind == transcript {
		return e.runTranscript(b)
	}
	return e.runShell(b, first)
}

// prepare turns a doc command into the one to run: redis-cli without a
// server goes to 6379 as it would, the doc's ports become the session's,
// and `any` words get what this run printed for them. A command that names
// an `any` word no output has given a value yet is not run: the doc's
// example value (a process id for kill) must never reach a real process.
func (e *env) prepare(cmd string) (string, error) {
	cmd, err := e.addrs.forward(defaultRedisPort(cmd))
	if err != nil {
		return "", err
	}
	for _, bd := range e.bindings {
		cmd = replaceWord(cmd, bd.doc, bd.got)
	}
	for _, b := range e.s.blocks {
		for _, w := range b.d.any {
			if replaceWord(cmd, w, "") != cmd {
				return "", fmt.Errorf("the command uses %s, an `any` word that no output before it has given a value", w)
			}
		}
	}
	return cmd, nil
}

func replaceWord(s, old, new string) string {
	var out strings.Builder
	for i := 0; i < len(s); {
		if wordAt(s, i, old) {
			out.WriteString(new)
			i += len(old)
			continue
		}
		out.WriteByte(s[i])
		i++
	}
	return out.String()
}

// sleepCmd is a doc's own pause in a shell session.
var sleepCmd = regexp.MustCompile(`^sleep ([0-9.]+)\s*(?:#.*)?$`)

// runShell runs a shell block's commands in the session's bash and
// compares each command's output with the doc's.
func (e *env) runShell(b *block, first bool) error {
	m := marks{about: b.d.about, any: b.d.any}
	for i, st := range shellSteps(b) {
		var out string
		var err error
		began := time.Now()
		if first && i == 0 && e.server == nil {
			out, err = e.startFromDoc(st.cmd)
			if e.server != nil && len(st.want) == 0 {
				st.compare = false // the doc does not show the server's log
			}
		} else {
			out, err = e.runCommand(st.cmd)
		}
		var pause time.Duration
		if s := sleepCmd.FindStringSubmatch(st.cmd); s != nil {
			pause, _ = time.ParseDuration(s[1] + "s")
		}
		e.took(began, pause)
		if err != nil {
			return fmt.Errorf("%s:%d: $ %s: %v", b.file, st.line, st.cmd, err)
		}
		if !st.compare {
			continue
		}
		if err := e.compare(m, st.want, normalize(out, &e.addrs)); err != nil {
			return fmt.Errorf("%s:%d: $ %s\n%v", b.file, st.line, st.cmd, err)
		}
	}
	return nil
}

// runCommand runs one command in bash and returns its output.
func (e *env) runCommand(c string) (string, error) {
	cmd, err := e.prepare(c)
	if err != nil {
		return "", err
	}
	sh, err := e.shell()
	if err != nil {
		return "", err
	}
	out, _, err := sh.run(cmd)
	return out, err
}

// startFromDoc runs a session's first command that runs bucketd. When
// bucketd listens, it is the session's server and the output is its log
// up to the `listening` line; when it exits (a start-up error), the output
// is what it printed.
func (e *env) startFromDoc(cmd string) (string, error) {
	vars, args, _ := serverStart(cmd)
	flags, err := e.forwardAll(args)
	if err != nil {
		return "", err
	}
	if vars, err = e.forwardAll(vars); err != nil {
		return "", err
	}
	srv, out, err := startBucketd(e.dir, vars, flags)
	if err != nil || srv == nil {
		return out, err
	}
	e.useServer(srv)
	if e.sh != nil { // a setup started bash before the server was there
		if _, _, err := e.sh.run("export " + strings.Join(e.addrEnv(), " ")); err != nil {
			return "", err
		}
	}
	return srv.log.String(), nil
}

// compare matches a command's output against the doc's lines and
// remembers what the `any` words stood for.
func (e *env) compare(m marks, want, got []string) error {
	pats := make([]linePattern, len(want))
	used := map[string]int{}
	for i, w := range want {
		pats[i] = compile(w, m, used)
	}
	slack := float64(e.busy.Milliseconds())
	bs, ok := matchLines(pats, got, slack)
	if !ok {
		return fmt.Errorf("%s\n--- the doc shows:\n%s\n--- the run printed:\n%s\n(`about` numbers: their tolerance + %v of slack)",
			firstDifference(pats, got, slack), indent(want), indent(got), e.busy)
	}
	e.bindings = append(e.bindings, bs...)
	return nil
}

func indent(lines []string) string {
	if len(lines) == 0 {
		return "\t(nothing)"
	}
	return "\t" + strings.Join(lines, "\n\t")
}

// runTranscript types a redis-cli transcript into one redis-cli (one
// connection, as at the prompt), waiting where the narration says so.
func (e *env) runTranscript(b *block) error {
	steps, err := transcriptSteps(b)
	if err != nil {
		return err
	}
	if e.server == nil {
		return fmt.Errorf("%s: a transcript needs a running bucketd", b)
	}
	cli := exec.Command(redisCLI, "-p", e.server.port, "--no-raw")
	cli.Dir = e.dir
	cli.Env = baseEnv()
	r, err := startLines(cli)
	if err != nil {
		return err
	}
	defer r.stop()
	var want []string
	var paused time.Duration
	began := time.Now()
	for _, st := range steps {
		if st.pause > 0 {
			if err := r.waitFor(len(want)); err != nil {
				return fmt.Errorf("%s:%d: %v\n--- the run printed so far:\n%s", b.file, st.line, err, indent(normalize(r.text(), &e.addrs)))
			}
			time.Sleep(st.pause)
			paused += st.pause
		}
		if err := r.send(st.cmd); err != nil {
			return err
		}
		want = append(want, st.want...)
	}
	out, err := r.finish()
	e.took(began, paused)
	if err != nil {
		return fmt.Errorf("%s: %v", b, err)
	}
	if err := e.compare(marks{about: b.d.about, any: b.d.any}, want, normalize(out, &e.addrs)); err != nil {
		return fmt.Errorf("%s: redis-cli transcript\n%v", b, err)
	}
	return nil
}
