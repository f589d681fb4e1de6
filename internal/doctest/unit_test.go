package doctest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The tests below check the doc test's own parts without a server.

func TestParseMarkdownDirectives(t *testing.T) {
	md := strings.Join([]string{
		"Text.",
		"",
		"<!-- doctest: server --requirepass 's3 cret'",
		"about 3996 2999773±5000",
		"any 22362 -->",
		"",
		"<!-- doctest: setup redis-cli -p 6380 FOO -->",
		"```",
		"127.0.0.1:6380> PING",
		"PONG",
		"```",
		"",
		"<!-- doctest: file policies.yaml -->",
		"```yaml",
		"policies: {}",
		"```",
		"<!-- doctest: continue",
		"file bad.yaml",
		"max_clients: 5",
		"-->",
		"```console",
		"$ cat bad.yaml",
		"max_clients: 5",
		"```",
	}, "\n")
	blocks, err := parseMarkdown("x.md", md)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 3 {
		t.Fatalf("%d blocks, want 3", len(blocks))
	}
	b := blocks[0]
	if b.kind != transcript || b.line != 8 || strings.Join(b.d.server, "|") != "--requirepass|s3 cret" {
		t.Errorf("block 1: kind %v line %d server %q", b.kind, b.line, b.d.server)
	}
	if len(b.d.about) != 2 || b.d.about[0].tol != defaultTolerance || b.d.about[1].word != "2999773" || b.d.about[1].tol != 5000 {
		t.Errorf("about = %+v", b.d.about)
	}
	if len(b.d.any) != 1 || len(b.d.setup) != 1 || b.d.setup[0] != "redis-cli -p 6380 FOO" {
		t.Errorf("any %q setup %q", b.d.any, b.d.setup)
	}
	if blocks[1].d.file != "policies.yaml" || blocks[1].kind != otherBlock {
		t.Errorf("block 2: file %q kind %v", blocks[1].d.file, blocks[1].kind)
	}
	c := blocks[2]
	if !c.d.cont || c.kind != shellBlock || len(c.d.files) != 1 || c.d.files[0].body != "max_clients: 5\n" {
		t.Errorf("block 3: %+v", c.d)
	}
	ss, skips, err := sessions(blocks)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 1 || len(ss[0].blocks) != 2 || len(skips) != 0 {
		t.Fatalf("sessions %v, skips %v", ss, skips)
	}
	if len(ss[0].files) != 0 {
		t.Errorf("the session got files declared after its start: %+v", ss[0].files)
	}
}

func TestParseMarkdownRejects(t *testing.T) {
	for name, md := range map[string]string{
		"misplaced comment":   "<!-- doctest: run -->\nText in between.\n```sh\nls\n```\n",
		"unknown directive":   "<!-- doctest: runn -->\n```sh\nls\n```\n",
		"skip without reason": "<!-- doctest: skip -->\n```sh\nls\n```\n",
		"unclosed comment":    "<!-- doctest: run\n```sh\nls\n```\n",
		"about not a number":  "<!-- doctest: about abc -->\n```\n127.0.0.1:6380> PING\nPONG\n```\n",
	} {
		if _, err := parseMarkdown("x.md", md); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestSessionsRules(t *testing.T) {
	parse := func(md string) ([]*session, []skipped, error) {
		blocks, err := parseMarkdown("x.md", md)
		if err != nil {
			t.Fatal(err)
		}
		return sessions(blocks)
	}
	if _, _, err := parse("```console\n$ redis-cli -p 6380 PING\nPONG\n```\n"); err == nil {
		t.Error("an unmarked console session was accepted")
	}
	if ss, _, err := parse("```sh\ngo run ./cmd/bucketd\n```\n"); err != nil || len(ss) != 0 {
		t.Errorf("an unmarked sh block without output: %v, %d sessions", err, len(ss))
	}
	if _, _, err := parse("<!-- doctest: continue -->\n```\n127.0.0.1:6380> PING\nPONG\n```\n"); err == nil {
		t.Error("continue with no session before it was accepted")
	}
	ss, skips, err := parse("<!-- doctest: skip needs Docker -->\n```console\n$ docker ps\nX\n```\n```\n127.0.0.1:6380> PING\nPONG\n```\n")
	if err != nil || len(ss) != 1 || len(skips) != 1 || skips[0].reason != "needs Docker" {
		t.Errorf("skip: %v, %d sessions, skips %+v", err, len(ss), skips)
	}
	// A block marked makes is a session of its own, and every later
	// session of the page runs its commands first; earlier ones do not.
	ss, _, err = parse("```\n127.0.0.1:6380> PING\nPONG\n```\n" +
		"<!-- doctest: run\nmakes a.txt b.txt -->\n```console\n$ touch a.txt b.txt\n```\n" +
		"<!-- doctest: run -->\n```console\n$ cat a.txt\n```\n")
	if err != nil || len(ss) != 3 || len(ss[0].makers) != 0 || len(ss[1].makers) != 0 || len(ss[2].makers) != 1 ||
		!slices.Equal(ss[2].makers[0].d.makes, []string{"a.txt", "b.txt"}) {
		t.Errorf("makes: %v, sessions %+v", err, ss)
	}
	if _, _, err := parse("<!-- doctest: makes a.txt -->\n```console\n$ touch a.txt\n```\n"); err == nil {
		t.Error("makes on a block that does not run was accepted")
	}
}

// TestMakeFiles: a maker's commands run in the directory and must make
// the files it names; a failing command or a missing file is an error.
func TestMakeFiles(t *testing.T) {
	dir := t.TempDir()
	ok := &block{file: "x.md", line: 1, kind: shellBlock, body: []string{"$ echo hi > a.txt", "$ cp a.txt b.txt"}, d: directives{makes: []string{"a.txt", "b.txt"}}}
	if err := makeFiles(dir, ok); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "b.txt")); err != nil || string(b) != "hi\n" {
		t.Errorf("b.txt: %q, %v", b, err)
	}
	failing := &block{file: "x.md", line: 1, kind: shellBlock, body: []string{"$ false", "$ touch c.txt"}, d: directives{makes: []string{"c.txt"}}}
	if err := makeFiles(t.TempDir(), failing); err == nil {
		t.Error("a failing command passed")
	}
	missing := &block{file: "x.md", line: 1, kind: shellBlock, body: []string{"$ true"}, d: directives{makes: []string{"d.txt"}}}
	if err := makeFiles(t.TempDir(), missing); err == nil {
		t.Error("a file the commands did not make passed")
	}
}

func TestTranscriptSteps(t *testing.T) {
	b := &block{file: "x.md", line: 1, body: []string{
		"127.0.0.1:6380> TB.ACQUIRE slow 1 0.5",
		"(integer) 1",
		"          (exactly 1.5 s later: the bucket holds 0.75 tokens)",
		"127.0.0.1:6380> COMMAND INFO tb.acquire",
		"1)  1) \"tb.acquire\"",
		"    2) (integer) -4",
		"          (250 ms after that)",
		"127.0.0.1:6380> PING",
		"PONG",
	}}
	steps, err := transcriptSteps(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 3 || steps[1].pause != 1500*time.Millisecond || steps[2].pause != 250*time.Millisecond {
		t.Fatalf("steps %+v", steps)
	}
	if len(steps[1].want) != 2 || steps[1].want[1] != "    2) (integer) -4" {
		t.Errorf("nested reply lines were taken for narration: %q", steps[1].want)
	}
	b.body = []string{"127.0.0.1:6380> INFO", "...", "          (1 s later)", "127.0.0.1:6380> PING", "PONG"}
	if _, err := transcriptSteps(b); err == nil {
		t.Error("a … line before a pause was accepted")
	}
}

// TestSessionPauses: a session's pauses add its transcripts' narrated
// waits and its shell blocks' sleep commands, which is what -short goes by.
func TestSessionPauses(t *testing.T) {
	blocks, err := parseMarkdown("x.md", "<!-- doctest: run -->\n```console\n$ bucketd &\n$ sleep 1.5   # a write\n$ redis-cli PING\nPONG\n```\n"+
		"<!-- doctest: continue -->\n```\n127.0.0.1:6380> PING\nPONG\n          (2 s later)\n127.0.0.1:6380> PING\nPONG\n          (250 ms after that)\n127.0.0.1:6380> PING\nPONG\n```\n")
	if err != nil {
		t.Fatal(err)
	}
	ss, _, err := sessions(blocks)
	if err != nil || len(ss) != 1 {
		t.Fatalf("%d sessions, %v; want 1", len(ss), err)
	}
	if got, want := ss[0].pauses(), 3750*time.Millisecond; got != want {
		t.Fatalf("pauses %v, want %v", got, want)
	}
}

func TestCompare(t *testing.T) {
	m := marks{about: []approx{{"3996", 100}, {"1000000", 100}}, any: []string{"3", "22362"}}
	want := []string{
		"1) (integer) 1",
		"4) (integer) 3996",
		" 3) \"version\"",
		" 8) (integer) 3",
		"process_id:22362",
		"Date: …",
		"…",
		"4) (integer) 1000",
		"4) (integer) 1000000",
	}
	pats := make([]linePattern, len(want))
	used := map[string]int{}
	for i, w := range want {
		pats[i] = compile(w, m, used)
	}
	if used["3996"] != 1 || used["3"] != 1 || used["22362"] != 1 || used["1000000"] != 1 {
		t.Errorf("marks used %v: `any 3` must not match the index 3) nor about 1000000 the 1000", used)
	}
	good := []string{
		"1) (integer) 1",
		"4) (integer) 3921",
		" 3) \"version\"",
		" 8) (integer) 1",
		"process_id:4242",
		"Date: Tue, 01 Dec 2026 11:13:39 GMT",
		"a line",
		"4) (integer) 1000",
		"4) (integer) 999990",
	}
	bs, ok := matchLines(pats, good, 0)
	if !ok {
		t.Fatalf("no match: %s", firstDifference(pats, good, 0))
	}
	if len(bs) != 2 || bs[0] != (binding{"3", "1"}) || bs[1] != (binding{"22362", "4242"}) {
		t.Errorf("bindings %+v", bs)
	}
	for i, bad := range []string{
		"1) (integer) 0",       // allowed became denied
		"4) (integer) 3895",    // beyond ±100
		" 3) \"versions\"",     // plain text must be equal
		" 8) (integer) 1 2",    // any is one word
		"process_id:",          // and not empty
		"Datum: x",             // the text around … must be equal
		"a line",               // (the … line takes anything)
		"4) (integer) 1001",    // 1000 is not marked
		"4) (integer) 1000101", // beyond ±100
	} {
		if i == 6 {
			continue
		}
		got := append([]string{}, good...)
		got[i] = bad
		if _, ok := matchLines(pats, got, 0); ok {
			t.Errorf("line %d %q matched %q", i, bad, want[i])
		}
	}
	slow := append([]string{}, good...)
	slow[1] = "4) (integer) 3846"
	if _, ok := matchLines(pats, slow, 50); !ok {
		t.Error("150 ms off did not match about 3996 with 50 ms of slack")
	}
	if _, ok := matchLines(pats, good[:len(good)-1], 0); ok {
		t.Error("a missing last line matched")
	}
	if _, ok := matchLines(pats, append(good, "extra"), 0); ok {
		t.Error("an extra line matched")
	}
}

func TestSplitWordsAndServerStart(t *testing.T) {
	words, ok := splitWords(`--requirepass 's3 cret' "a\"b" c\ d`)
	if !ok || strings.Join(words, "|") != `--requirepass|s3 cret|a"b|c d` {
		t.Errorf("splitWords = %q, %v", words, ok)
	}
	for _, s := range []string{"a; b", "a | b", "$(x)", `"$HOME"`, "a > f"} {
		if _, ok := splitWords(s); ok {
			t.Errorf("splitWords(%q) called it simple", s)
		}
	}
	for cmd, want := range map[string]string{
		"bucketd --config bucketd.yaml &":      "|--config bucketd.yaml",
		"go run ./cmd/bucketd --requirepass x": "|--requirepass x",
		"GOMAXPROCS=1 bucketd --metrics-addr=": "GOMAXPROCS=1|--metrics-addr=",
		"bucketd":                              "|",
	} {
		env, args, ok := serverStart(cmd)
		if got := strings.Join(env, " ") + "|" + strings.Join(args, " "); !ok || got != want {
			t.Errorf("serverStart(%q) = %q, %v; want %q", cmd, got, ok, want)
		}
	}
	for _, cmd := range []string{"bucketd healthcheck", `bucketd healthcheck; echo "exit=$?"`, "redis-cli -p 6380 PING", "bucketd --x | head"} {
		if _, _, ok := serverStart(cmd); ok {
			t.Errorf("serverStart(%q) took it for a server", cmd)
		}
	}
}

func TestAddresses(t *testing.T) {
	var a addrMap
	a.set("6380", "43053")
	a.set("9380", "37213")
	got, err := a.forward("redis-cli -p 6380 PING && curl http://127.0.0.1:9380/healthz && nc 127.0.0.1 6380")
	if err != nil || got != "redis-cli -p 43053 PING && curl http://127.0.0.1:37213/healthz && nc 127.0.0.1 43053" {
		t.Errorf("forward = %q, %v", got, err)
	}
	if _, err := a.forward("redis-cli -p 6379 PING"); err == nil {
		t.Error("a command for a Redis the session does not have was let through")
	}
	if got := a.back("addr=127.0.0.1:43053 metrics=127.0.0.1:37213 x=127.0.0.1:430531 (integer) 43053"); got != "addr=127.0.0.1:6380 metrics=127.0.0.1:9380 x=127.0.0.1:430531 (integer) 43053" {
		t.Errorf("back = %q", got)
	}
	for cmd, want := range map[string]string{
		"redis-cli EVALSHA $SHA 1 k":                       "redis-cli -p 6379 EVALSHA $SHA 1 k",
		"SHA=$(redis-cli -x SCRIPT LOAD < f.lua)":          "SHA=$(redis-cli -p 6379 -x SCRIPT LOAD < f.lua)",
		"redis-cli -p 6380 PING":                           "redis-cli -p 6380 PING",
		"REDISCLI_AUTH=x redis-cli -h 127.0.0.1 -p 1 PING": "REDISCLI_AUTH=x redis-cli -h 127.0.0.1 -p 1 PING",
	} {
		if got := defaultRedisPort(cmd); got != want {
			t.Errorf("defaultRedisPort(%q) = %q, want %q", cmd, got, want)
		}
	}
}
