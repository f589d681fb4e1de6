package doctest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// step is one command of a block and the output the doc shows for it.
type step struct {
	cmd     string
	line    int           // the command's line in the doc
	want    []string      // expected output lines
	compare bool          // false for ```sh lines, whose output the doc does not show
	pause   time.Duration // a transcript narration's wait before the command
}

// pauseRE finds the wait in a transcript narration line such as
// "(exactly 1.5 s later: …)" or "(500 ms after that)".
var pauseRE = regexp.MustCompile(`([0-9]+(?:\.[0-9]+)?) ?(ms|s) (?:later|after)`)

// isNarration reports whether a transcript line is the doc talking, not
// redis-cli printing: indented and in parentheses. redis-cli indents only
// the elements of nested arrays, which start with their index.
func isNarration(l string) bool {
	t := strings.TrimSpace(l)
	return len(t) < len(l) && strings.HasPrefix(t, "(") && strings.HasSuffix(t, ")")
}

// transcriptSteps splits a redis-cli transcript into its commands.
func transcriptSteps(b *block) ([]step, error) {
	var steps []step
	var pause time.Duration
	for i, l := range b.body {
		line := b.line + 1 + i
		switch {
		case strings.HasPrefix(l, prompt):
			steps = append(steps, step{cmd: strings.TrimPrefix(l, prompt), line: line, compare: true, pause: pause})
			pause = 0
		case isNarration(l):
			if m := pauseRE.FindStringSubmatch(l); m != nil {
				v, _ := strconv.ParseFloat(m[1], 64)
				unit := time.Second
				if m[2] == "ms" {
					unit = time.Millisecond
				}
				pause += time.Duration(v * float64(unit))
			}
		case len(steps) == 0:
			if strings.TrimSpace(l) != "" {
				return nil, fmt.Errorf("%s:%d: output before the first %q command", b.file, line, strings.TrimSpace(prompt))
			}
		default:
			last := &steps[len(steps)-1]
			last.want = append(last.want, l)
		}
	}
	if pause != 0 {
		return nil, fmt.Errorf("%s: a pause after the last command", b)
	}
	for i := range steps {
		steps[i].want = trimBlank(steps[i].want)
	}
	return steps, checkPauses(b, steps)
}

// checkPauses rejects a "…" line before a pause: the test waits for the
// output before it starts a pause, so it must know how many lines come.
func checkPauses(b *block, steps []step) error {
	last := -1
	for i, s := range steps {
		if s.pause > 0 {
			last = i
		}
	}
	for _, s := range steps[:max(last, 0)] {
		for _, w := range s.want {
			if t := strings.TrimSpace(w); t == ellipsis || t == "..." {
				return fmt.Errorf("%s:%d: a … line before a pause: the test cannot tell when the output ends", b.file, s.line)
			}
		}
	}
	return nil
}

// shellSteps splits a shell block into commands: "$ " lines with their
// output in a console block, or every line of a ```sh block (whose output
// the doc does not show).
func shellSteps(b *block) []step {
	var steps []step
	if !b.prompted() {
		for i, l := range b.body {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				steps = append(steps, step{cmd: t, line: b.line + 1 + i})
			}
		}
		return steps
	}
	for i, l := range b.body {
		if strings.HasPrefix(l, "$ ") {
			steps = append(steps, step{cmd: strings.TrimPrefix(l, "$ "), line: b.line + 1 + i, compare: true})
		} else if len(steps) > 0 {
			last := &steps[len(steps)-1]
			last.want = append(last.want, l)
		}
	}
	for i := range steps {
		steps[i].want = trimBlank(steps[i].want)
	}
	return steps
}

// splitWords splits a simple shell command into words: blanks separate,
// '…' and "…" quote (with \ escapes inside double quotes and outside
// quotes). It reports false for anything else a shell would interpret
// (;, |, &, <, >, $, `, parentheses), which makes a command not simple.
func splitWords(s string) ([]string, bool) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
			continue
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, false
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '$' || s[j] == '`' {
					return nil, false
				}
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				cur.WriteByte(s[j])
			}
			if j == len(s) {
				return nil, false
			}
			i = j
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case strings.IndexByte(";|&<>$`()", c) >= 0:
			return nil, false
		default:
			cur.WriteByte(c)
		}
		inWord = true
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, true
}

// envAssign matches a VAR=value word before a command.
var envAssign = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// serverStart recognises a command that runs the bucketd server itself:
// [VAR=value ...] bucketd|go run ./cmd/bucketd [flags] [&]. It returns the
// environment assignments and the flags. bucketd healthcheck is a client,
// not a server.
func serverStart(cmd string) (env, args []string, ok bool) {
	cmd = strings.TrimSpace(cmd)
	cmd = strings.TrimSpace(strings.TrimSuffix(cmd, "&"))
	words, simple := splitWords(cmd)
	if !simple {
		return nil, nil, false
	}
	for len(words) > 0 && envAssign.MatchString(words[0]) {
		env, words = append(env, words[0]), words[1:]
	}
	switch {
	case len(words) >= 1 && words[0] == "bucketd":
		args = words[1:]
	case len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/bucketd":
		args = words[3:]
	default:
		return nil, nil, false
	}
	if len(args) > 0 && args[0] == "healthcheck" {
		return nil, nil, false
	}
	return env, args, true
}

// pauses is the real time a session waits on purpose: the narrated pauses
// of its transcripts and the sleep commands of its shell blocks. Under
// -short TestDocs leaves out a session that pauses a second or more.
func (s *session) pauses() time.Duration {
	var d time.Duration
	for _, b := range s.blocks {
		if b.kind == transcript {
			steps, _ := transcriptSteps(b) // a transcript that does not parse fails when it runs
			for _, st := range steps {
				d += st.pause
			}
			continue
		}
		for _, st := range shellSteps(b) {
			if m := sleepCmd.FindStringSubmatch(st.cmd); m != nil {
				p, _ := time.ParseDuration(m[1] + "s") // the pattern admits only a number
				d += p
			}
		}
	}
	return d
}
