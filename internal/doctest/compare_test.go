package doctest

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// ellipsis in a reply line stands for any text; alone on a line (or
// "..."), for any number of lines.
const ellipsis = "…"

// capture is what one group of a line's pattern stands for.
type capture struct {
	word   string  // the doc's text at that place
	any    bool    // an `any` word: anything, remembered as a binding
	approx bool    // an `about` number: within tol of word
	tol    float64 //
}

// linePattern matches one expected output line.
type linePattern struct {
	text     string
	anyLines bool           // "…" or "..." alone: any number of lines
	re       *regexp.Regexp // nil: the line must be equal to text
	caps     []capture
}

// marks are a block's `about` and `any` words.
type marks struct {
	about []approx
	any   []string
}

const numberRE = `(-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)`

// isWordByte reports whether c continues a word, so that `about 1000`
// does not match inside 1000000 and `any 3` not in the index "3)".
func isWordByte(c byte) bool {
	return c == '.' || c == '_' || c == '-' || c == '+' || c == ')' ||
		c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// wordAt reports whether w occurs in s at i as a whole word.
func wordAt(s string, i int, w string) bool {
	if !strings.HasPrefix(s[i:], w) {
		return false
	}
	if i > 0 && isWordByte(s[i-1]) && isWordByte(w[0]) {
		return false
	}
	end := i + len(w)
	return end == len(s) || !isWordByte(s[end]) || !isWordByte(w[len(w)-1])
}

// compile turns an expected line into its pattern, and counts how often
// each mark was used (a mark used nowhere is stale markup).
func compile(line string, m marks, used map[string]int) linePattern {
	t := strings.TrimSpace(line)
	if t == ellipsis || t == "..." {
		return linePattern{text: line, anyLines: true}
	}
	var re strings.Builder
	var caps []capture
	lit := 0 // start of the literal text not yet written
	for i := 0; i < len(line); {
		c, n := markAt(line, i, m)
		if n == 0 {
			i++
			continue
		}
		re.WriteString(regexp.QuoteMeta(line[lit:i]))
		switch {
		case c.any:
			re.WriteString(`(\S+?)`)
		case c.approx:
			re.WriteString(numberRE)
		default:
			re.WriteString(`(.*?)`)
		}
		used[c.word]++
		caps = append(caps, c)
		i += n
		lit = i
	}
	if caps == nil {
		return linePattern{text: line}
	}
	re.WriteString(regexp.QuoteMeta(line[lit:]))
	return linePattern{text: line, re: regexp.MustCompile("^" + re.String() + "$"), caps: caps}
}

// markAt finds the mark that starts at line[i], if any, and its length.
func markAt(line string, i int, m marks) (capture, int) {
	if strings.HasPrefix(line[i:], ellipsis) {
		return capture{word: ellipsis}, len(ellipsis)
	}
	for _, a := range m.about {
		if wordAt(line, i, a.word) {
			return capture{word: a.word, approx: true, tol: a.tol}, len(a.word)
		}
	}
	for _, w := range m.any {
		if wordAt(line, i, w) {
			return capture{word: w, any: true}, len(w)
		}
	}
	return capture{}, 0
}

// binding is what an `any` word turned out to be in this run.
type binding struct{ doc, got string }

// matchLine checks one actual line against one pattern. slack widens
// every `about` tolerance: the milliseconds the run spent beyond the doc's
// pauses, by which a millisecond figure (retry_after_ms, reset_after_ms,
// PTTL) moves one for one.
func (p linePattern) matchLine(got string, slack float64) ([]binding, bool) {
	if p.re == nil {
		return nil, got == p.text
	}
	sub := p.re.FindStringSubmatch(got)
	if sub == nil {
		return nil, false
	}
	var bs []binding
	for k, c := range p.caps {
		v := sub[k+1]
		switch {
		case c.approx:
			want, _ := strconv.ParseFloat(c.word, 64)
			have, err := strconv.ParseFloat(v, 64)
			if err != nil || math.Abs(have-want) > c.tol+slack {
				return nil, false
			}
		case c.any:
			bs = append(bs, binding{c.word, v})
		}
	}
	return bs, true
}

// matchLines matches actual lines against patterns; "any lines" patterns
// match as few lines as they can that still let the rest match.
func matchLines(want []linePattern, got []string, slack float64) ([]binding, bool) {
	if len(want) == 0 {
		return nil, len(got) == 0
	}
	p := want[0]
	if p.anyLines {
		for skip := 0; skip <= len(got); skip++ {
			if bs, ok := matchLines(want[1:], got[skip:], slack); ok {
				return bs, true
			}
		}
		return nil, false
	}
	if len(got) == 0 {
		return nil, false
	}
	first, ok := p.matchLine(got[0], slack)
	if !ok {
		return nil, false
	}
	rest, ok := matchLines(want[1:], got[1:], slack)
	if !ok {
		return nil, false
	}
	return append(first, rest...), true
}

// firstDifference describes where got first departs from want, for the
// failure message (wildcard lines are skipped over greedily).
func firstDifference(want []linePattern, got []string, slack float64) string {
	j := 0
	for i, p := range want {
		if p.anyLines {
			return fmt.Sprintf("after line %d of the expected output (a … line)", i+1)
		}
		if j >= len(got) {
			return fmt.Sprintf("expected line %d %q: the output ended", i+1, p.text)
		}
		if _, ok := p.matchLine(got[j], slack); !ok {
			return fmt.Sprintf("expected line %d:\n\twant %q\n\tgot  %q", i+1, p.text, got[j])
		}
		j++
	}
	return fmt.Sprintf("unexpected output after the expected lines: %q", got[j])
}

// ansiStyle is a terminal escape that sets text style (curl prints header
// names in bold on a terminal); the docs show the text without it.
var ansiStyle = regexp.MustCompile("\x1b\\[[0-9;]*m")

// normalize turns raw output into lines: CR and terminal styles dropped,
// trailing blank lines dropped, and the session's real addresses written
// back as the doc's.
func normalize(out string, addrs *addrMap) []string {
	out = strings.ReplaceAll(out, "\r", "")
	out = ansiStyle.ReplaceAllString(out, "")
	out = strings.TrimRight(out, "\n")
	if strings.TrimSpace(out) == "" {
		return nil
	}
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(addrs.back(l), " \t")
	}
	return lines
}

// trimBlank drops trailing blank expected lines (as normalize does for
// the actual ones) and the spaces at line ends Markdown editors strip.
func trimBlank(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimRight(l, " \t")
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}
