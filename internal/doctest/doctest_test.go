// Package doctest runs every example session in README.md and docs/*.md
// against a fresh bucketd and fails when a reply differs from the doc, so
// that the docs keep describing the server as it is. It has only tests;
// `go test ./...` (and so scripts/test.sh) runs it.
//
// What runs: every redis-cli transcript (lines that start with the
// `127.0.0.1:6380> ` prompt, the reply on the lines below), and every shell
// block (```sh, ```console, or lines that start with `$ `) marked `run` or
// `continue`. Each session gets its own bucketd, built once by TestMain and
// started on free loopback ports with GOMAXPROCS=2 (the docs show a 2-CPU
// machine); the doc's 127.0.0.1:6380, 9380 and 6379 become the session's
// real ports in commands, and the real ports are written back as the
// doc's in the output. Transcripts are typed into one redis-cli --no-raw
// (one connection, as at the prompt); shell commands run one after another
// in one bash per session, in a temporary directory where the repository's
// files are visible (scripts/, internal/ …) and the files the page's
// earlier `makes` blocks make exist (the TLS files quickstart.md makes
// with openssl: nothing is handed to a page that it does not make itself).
// A prompted shell block with output must be marked run, continue or skip,
// so no new example goes untested unnoticed.
//
// The markup, HTML comments right before a block (invisible when rendered),
// one directive per line, several comments allowed:
//
//	<!-- doctest: skip needs Docker -->          not run; the reason is required
//	<!-- doctest: run -->                        run this shell block
//	<!-- doctest: continue -->                   same server (and bash) as the page's previous session
//	<!-- doctest: server --requirepass s3cret --> the session's bucketd flags
//	<!-- doctest: redis -->                      start a redis-server; 6379 is its port
//	<!-- doctest: about 3996 970 2999773±5000 --> time-dependent milliseconds: ±100 unless ±N says
//	<!-- doctest: any 22362 go1.26.8 -->         words that differ from run to run
//	<!-- doctest: setup redis-cli -p 6380 FOO --> a shell command run first, output not shown
//	<!-- doctest: makes ca.crt server.crt -->    this run block makes these files; the page's later sessions run it first
//	<!-- doctest: file bucketd.yaml -->          the block below is a file of the page's sessions
//	<!-- doctest: file bad.yaml
//	max_clients: 5
//	-->                                          the same, with the content in the comment
//
// In the doc's output, "…" (or "...") alone on a line stands for any number
// of lines and "…" inside a line for any text. `about` and `any` words
// match as whole words; a later shell command that uses an `any` word gets
// what this run printed for it (a process id for kill -HUP). In a
// transcript, an indented narration line in parentheses is not output; if
// it says "N s later" (or "N ms after"), the test waits that long after the
// replies before it arrived. A session whose first command runs bucketd
// (`bucketd … &`, `go run ./cmd/bucketd …`) starts its own server with
// those flags; its output, if the doc shows any, is the log up to the
// `listening` line, or what bucketd printed when it exited.
//
// Time: bucketd refills continuously, so the milliseconds in replies
// depend on when commands arrive; mark them `about`. Such a figure moves
// one for one with the time that passes, so each `about` tolerance grows by
// the milliseconds the run has spent beyond the doc's pauses so far (a
// busy machine). A session that fails
// after its steps (bucketd's start, setup and shell commands, transcripts)
// took more than 50 ms together beyond the doc's pauses is run again (three
// runs at most), since its figures may legitimately differ; a wrong doc
// fails all three. docs/README.md ("How the docs
// are tested") explains the same for doc writers.
//
// TestDocsComplete (complete_test.go) checks the reference tables, marked
// <!-- table: settings|metrics|info SECTION|log -->, against bucketd
// --help, what running bucketds export and print in INFO, and the log
// calls of the source (logscan_test.go), and fails on an unmarked copy of
// one of them (tables_test.go parses the tables); docs/README.md ("The
// reference tables") explains the markers.
package doctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/testkit"
)

// repoRoot is the repository; bucketdBin the binary TestMain built;
// redisCLI the redis-cli TestDocs found.
var repoRoot, bucketdBin, redisCLI string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	repoRoot = filepath.Join(wd, "..", "..")
	dir, err := os.MkdirTemp("", "bucketd-doctest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bucketdBin = filepath.Join(dir, "bucketd")
	build := exec.Command("go", "build", "-o", bucketdBin, "./cmd/bucketd")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "doctest: building bucketd: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// docFiles are the Markdown files whose sessions are tested.
func docFiles(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	rel := []string{"README.md"}
	for _, f := range files {
		rel = append(rel, filepath.Join("docs", filepath.Base(f)))
	}
	return rel
}

// allSessions parses every doc into its sessions and skipped examples.
func allSessions(t *testing.T) ([]*session, []skipped) {
	var all []*session
	var skips []skipped
	for _, f := range docFiles(t) {
		blocks, err := parseFile(repoRoot, f)
		if err != nil {
			t.Fatal(err)
		}
		ss, sk, err := sessions(blocks)
		if err != nil {
			t.Fatal(err)
		}
		all, skips = append(all, ss...), append(skips, sk...)
	}
	return all, skips
}

// TestDocMarkup checks the markup without running anything: directives
// are known, `about` and `any` words occur in the block they mark, and
// transcripts parse.
func TestDocMarkup(t *testing.T) {
	all, _ := allSessions(t)
	for _, s := range all {
		for _, b := range s.blocks {
			if err := checkMarks(b); err != nil {
				t.Error(err)
			}
		}
	}
}

// checkMarks reports `about` and `any` words that mark nothing in their
// block's output, and transcripts that do not parse.
func checkMarks(b *block) error {
	var steps []step
	if b.kind == transcript {
		var err error
		if steps, err = transcriptSteps(b); err != nil {
			return err
		}
	} else {
		steps = shellSteps(b)
	}
	used := map[string]int{}
	m := marks{about: b.d.about, any: b.d.any}
	for _, st := range steps {
		for _, w := range st.want {
			compile(w, m, used)
		}
	}
	for _, a := range b.d.about {
		if used[a.word] == 0 {
			return fmt.Errorf("%s: about %s: no such number in the block's output", b, a.word)
		}
	}
	for _, w := range b.d.any {
		if used[w] == 0 {
			return fmt.Errorf("%s: any %s: no such word in the block's output", b, w)
		}
	}
	return nil
}

// TestDocs runs every session, in parallel; under -short, only those that
// pause less than a second in all.
func TestDocs(t *testing.T) {
	redisCLI = redistest.CLIBinary(t)
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatalf("bash not found: the shell sessions run in bash")
	}
	all, skips := allSessions(t)
	var mu sync.Mutex
	retried := map[string]int{}
	var leftOut []string // under -short
	t.Run("session", func(t *testing.T) {
		for _, s := range all {
			t.Run(strings.ReplaceAll(s.String(), "/", "_"), func(t *testing.T) {
				if p := s.pauses(); p >= time.Second {
					if testing.Short() {
						leftOut = append(leftOut, s.String()) // sequential: before t.Parallel
					}
					testkit.SkipShort(t, fmt.Sprintf("the session pauses %v in real time", p))
				}
				t.Parallel()
				if n := runSession(t, s); n > 1 {
					mu.Lock()
					retried[s.String()] = n
					mu.Unlock()
				}
			})
		}
	})
	logSummary(t, all, skips, retried, leftOut)
}

// maxRuns bounds the runs of a session that keeps failing slowly.
const maxRuns = 3

// runSession runs a session until it matches, again only when it was slow,
// and returns how many runs it took.
func runSession(t *testing.T, s *session) int {
	for n := 1; ; n++ {
		e := &env{t: t, s: s}
		err := runOnce(e)
		if err == nil {
			return n
		}
		if !e.slow() || n == maxRuns {
			t.Fatalf("%v\n(run %d of the session; its steps took %v beyond the pauses)", err, n, e.busy)
		}
		t.Logf("run %d failed after its steps took %v beyond the pauses, too slow for the doc's timing; running it again:\n%v", n, e.busy, err)
	}
}

func runOnce(e *env) error {
	defer e.tearDown()
	if err := e.setUp(); err != nil {
		return fmt.Errorf("%s: %v", e.s, err)
	}
	for i, b := range e.s.blocks {
		if err := e.runBlock(b, i == 0); err != nil {
			return err
		}
	}
	return nil
}

// logSummary reports what ran and what was skipped, and why.
func logSummary(t *testing.T, all []*session, skips []skipped, retried map[string]int, leftOut []string) {
	blocks := 0
	for _, s := range all {
		if !slices.Contains(leftOut, s.String()) {
			blocks += len(s.blocks)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d example sessions found: %d run (%d blocks), %d skipped\n", len(all)+len(skips), len(all)-len(leftOut), blocks, len(skips))
	if len(leftOut) > 0 {
		fmt.Fprintf(&b, "  left out under -short (they pause a second or more): %s\n", strings.Join(leftOut, ", "))
	}
	sort.Slice(skips, func(i, j int) bool { return skips[i].b.String() < skips[j].b.String() })
	for _, s := range skips {
		fmt.Fprintf(&b, "  skipped %s: %s\n", s.b, s.reason)
	}
	for name, n := range retried {
		fmt.Fprintf(&b, "  %s needed %d runs (slow machine)\n", name, n)
	}
	t.Log(b.String())
}
