package doctest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// prompt starts every command line of a redis-cli transcript.
const prompt = "127.0.0.1:6380> "

// blockKind says how a code block is run.
type blockKind int

const (
	otherBlock blockKind = iota // never run (YAML, Go, log samples …)
	transcript                  // redis-cli at the 127.0.0.1:6380> prompt; runs by default
	shellBlock                  // ```sh, ```console or $-prompted; runs when marked
)

// block is one fenced code block with the directives of the doctest
// comments right before it.
type block struct {
	file string   // path relative to the repository root
	line int      // the opening fence's line, 1-based
	lang string   // the fence's info string
	body []string // the lines between the fences
	kind blockKind
	d    directives
}

func (b *block) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// prompted reports whether a shell block writes its commands after "$ ",
// with their output on the lines in between.
func (b *block) prompted() bool {
	for _, l := range b.body {
		if strings.HasPrefix(l, "$ ") {
			return true
		}
	}
	return false
}

// hasOutput reports whether a prompted shell block shows any output, which
// makes it an example session that must be run or skipped explicitly.
func (b *block) hasOutput() bool {
	for _, l := range b.body {
		if !strings.HasPrefix(l, "$ ") && strings.TrimSpace(l) != "" {
			return true
		}
	}
	return false
}

// approx is one time-dependent number of an `about` directive.
type approx struct {
	word string  // as written in the doc
	tol  float64 // the largest difference accepted
}

// docFile is a file a session finds in its working directory.
type docFile struct {
	name string
	body string
	line int // where it was declared
}

// directives are what a block's doctest comments say.
type directives struct {
	skip   string   // why the block is not run; "" runs it
	run    bool     // a shell block that runs
	cont   bool     // continues the page's previous session
	server []string // flags for the session's bucketd (set, possibly empty, by `server`)
	redis  bool     // the session needs a redis-server
	about  []approx
	any    []string
	setup  []string  // shell commands run before the block, output not compared
	file   string    // this block's body is the session file of that name
	files  []docFile // files given inline in a comment
	makes  []string  // files this shell block's commands make, for the page's later sessions too
}

// defaultTolerance is how far an `about` number may stray unless it says
// otherwise: the doc's figures are hand-typed sessions, a few to tens of
// milliseconds apart, and the test's are a millisecond or two apart.
const defaultTolerance = 100

var (
	fence        = regexp.MustCompile("^```+")
	commentStart = "<!-- doctest:"
	commentEnd   = "-->"
	approxWord   = regexp.MustCompile(`^(.+?)(?:±([0-9.]+))?$`)
)

// parseFile reads one Markdown file into its code blocks.
func parseFile(root, rel string) ([]*block, error) {
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	return parseMarkdown(rel, string(data))
}

// parseMarkdown splits Markdown text into fenced code blocks and attaches
// to each the doctest comments that stand right before it (blank lines
// between them allowed, nothing else).
func parseMarkdown(name, text string) ([]*block, error) {
	lines := strings.Split(text, "\n")
	var blocks []*block
	var pending directives
	pendingAt := 0 // line of the first pending comment, 0 if none
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, commentStart):
			end := i
			for end < len(lines) && !strings.Contains(lines[end], commentEnd) {
				end++
			}
			if end == len(lines) {
				return nil, fmt.Errorf("%s:%d: doctest comment without -->", name, i+1)
			}
			if err := pending.parse(commentLines(lines[i:end+1]), i+1); err != nil {
				return nil, fmt.Errorf("%s:%d: %v", name, i+1, err)
			}
			if pendingAt == 0 {
				pendingAt = i + 1
			}
			i = end
		case fence.MatchString(l):
			marker := fence.FindString(l)
			b := &block{file: name, line: i + 1, lang: strings.TrimSpace(l[len(marker):]), d: pending}
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], marker); i++ {
				b.body = append(b.body, lines[i])
			}
			b.kind = kindOf(b)
			blocks = append(blocks, b)
			pending, pendingAt = directives{}, 0
		case strings.TrimSpace(l) != "" && pendingAt != 0:
			return nil, fmt.Errorf("%s:%d: a doctest comment must stand right before a code block (only blank lines between)", name, pendingAt)
		}
	}
	if pendingAt != 0 {
		return nil, fmt.Errorf("%s:%d: a doctest comment must stand right before a code block", name, pendingAt)
	}
	return blocks, nil
}

// commentLines returns the text of a doctest comment without its
// delimiters, one entry per line.
func commentLines(lines []string) []string {
	text := strings.Join(lines, "\n")
	text = strings.TrimPrefix(text, commentStart)
	text = text[:strings.LastIndex(text, commentEnd)]
	return strings.Split(text, "\n")
}

func kindOf(b *block) blockKind {
	for _, l := range b.body {
		if strings.HasPrefix(l, prompt) {
			return transcript
		}
	}
	switch b.lang {
	case "sh", "console", "bash", "shell":
		return shellBlock
	case "":
		if b.prompted() {
			return shellBlock
		}
	}
	return otherBlock
}

// parse adds the directives of one comment, one per line. `file NAME`
// takes the rest of the comment as the file's content.
func (d *directives) parse(lines []string, at int) error {
	for i, raw := range lines {
		l := strings.TrimSpace(raw)
		if l == "" {
			continue
		}
		word, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch word {
		case "skip":
			if rest == "" {
				return fmt.Errorf("skip needs a reason: say why the block cannot run here")
			}
			d.skip = rest
		case "run":
			d.run = true
		case "continue":
			d.cont = true
		case "server":
			flags, ok := splitWords(rest)
			if !ok {
				return fmt.Errorf("server %s: give plain flags (quotes allowed, no other shell syntax)", rest)
			}
			d.server = append([]string{}, flags...)
		case "redis":
			d.redis = true
		case "about":
			for _, w := range strings.Fields(rest) {
				a, err := parseApprox(w)
				if err != nil {
					return err
				}
				d.about = append(d.about, a)
			}
		case "any":
			d.any = append(d.any, strings.Fields(rest)...)
		case "setup":
			d.setup = append(d.setup, rest)
		case "makes":
			if rest == "" {
				return fmt.Errorf("makes needs the names of the files the block's commands make")
			}
			d.makes = append(d.makes, strings.Fields(rest)...)
		case "file":
			if rest == "" {
				return fmt.Errorf("file needs a name")
			}
			body := strings.Join(lines[i+1:], "\n")
			if strings.TrimSpace(body) == "" {
				d.file = rest // the block below is the file
			} else {
				body = strings.TrimRight(strings.TrimLeft(body, "\n"), " \t\n") + "\n"
				d.files = append(d.files, docFile{name: rest, body: body, line: at + i})
			}
			return nil
		default:
			return fmt.Errorf("unknown doctest directive %q (see docs/README.md, How the docs are tested)", word)
		}
	}
	return nil
}

func parseApprox(w string) (approx, error) {
	m := approxWord.FindStringSubmatch(w)
	a := approx{word: m[1], tol: defaultTolerance}
	if _, err := strconv.ParseFloat(a.word, 64); err != nil {
		return a, fmt.Errorf("about %s: not a number", w)
	}
	if m[2] != "" {
		tol, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return a, fmt.Errorf("about %s: the tolerance after ± is not a number", w)
		}
		a.tol = tol
	}
	return a, nil
}

// session is what runs against one fresh server: a block, and the blocks
// marked `continue` after it.
type session struct {
	blocks []*block
	files  []docFile // the page's files declared before the session
	makers []*block  // the page's earlier blocks marked `makes`, whose commands run first
}

func (s *session) String() string { return s.blocks[0].String() }

// skipped is a block that looks like an example session but is not run.
type skipped struct {
	b      *block
	reason string
}

// sessions groups a page's blocks into sessions. It returns the sessions
// to run and the example sessions skipped with their reasons; a prompted
// shell block with output that is neither run nor skipped is an error, so
// that no new example goes untested unnoticed.
func sessions(blocks []*block) ([]*session, []skipped, error) {
	var out []*session
	var skips []skipped
	var files []docFile
	var makers []*block
	for _, b := range blocks {
		files = append(files, b.d.files...)
		if b.d.file != "" {
			files = append(files, docFile{name: b.d.file, body: strings.Join(b.body, "\n") + "\n", line: b.line})
		}
		runs, err := wantsRun(b)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case b.d.skip != "":
			skips = append(skips, skipped{b, b.d.skip})
		case !runs:
		case b.d.cont:
			if len(out) == 0 {
				return nil, nil, fmt.Errorf("%s: continue, but no session before it on this page", b)
			}
			if b.d.server != nil {
				return nil, nil, fmt.Errorf("%s: a continued session keeps its server; put server on the session's first block", b)
			}
			last := out[len(out)-1]
			last.blocks = append(last.blocks, b)
		default:
			out = append(out, &session{blocks: []*block{b}, files: append([]docFile{}, files...), makers: append([]*block{}, makers...)})
		}
		if len(b.d.makes) > 0 {
			if !runs || b.d.skip != "" || b.kind != shellBlock {
				return nil, nil, fmt.Errorf("%s: makes, on a block that does not run: mark a shell block <!-- doctest: run --> too", b)
			}
			makers = append(makers, b)
		}
	}
	return out, skips, nil
}

// wantsRun says whether a block runs, and rejects markup that makes no
// sense for it.
func wantsRun(b *block) (bool, error) {
	marked := b.d.run || b.d.cont
	switch b.kind {
	case transcript:
		return true, nil
	case shellBlock:
		if !marked && b.d.skip == "" && b.prompted() && b.hasOutput() {
			return false, fmt.Errorf("%s: an example session in a shell block: mark it <!-- doctest: run --> (or continue), or <!-- doctest: skip REASON -->", b)
		}
		return marked, nil
	default:
		if marked || b.d.server != nil || b.d.redis || len(b.d.about)+len(b.d.any)+len(b.d.setup) > 0 {
			return false, fmt.Errorf("%s: doctest directives for running on a block that is neither a redis-cli transcript nor a shell block", b)
		}
		return false, nil
	}
}
