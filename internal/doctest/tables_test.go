package doctest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// The reference tables (settings, metrics, INFO fields, log messages) are
// found by an HTML comment right before them, invisible when rendered:
//
//	<!-- table: settings -->
//	<!-- table: metrics -->
//	<!-- table: info Server -->     (one per INFO section, titled as INFO titles it)
//	<!-- table: log -->
//	<!-- table: log go-redis -->    (lines of the Redis client library)
//
// Blank lines may stand between the comment and the table. Each row's
// first cell names what it documents: a code span (`--addr`,
// `bucketd_buckets`, `used_memory`, `listening`), or text in parentheses
// for rows that are not one of the binary's names (`(file only)`).
var tableMarker = regexp.MustCompile(`^<!-- table: ([a-z-]+)(?: (.+?))? -->$`)

// docTable is one marked table.
type docTable struct {
	file   string // relative to the repository root
	line   int    // of the marker
	kind   string // settings, metrics, info, log
	arg    string // the INFO section, or "go-redis"
	header []string
	rows   []docRow
}

// docRow is one row of a marked table.
type docRow struct {
	line  int
	cells []string
}

func (r docRow) cell(i int) string {
	if i < len(r.cells) {
		return r.cells[i]
	}
	return ""
}

// where names a row for a failure message.
func (t *docTable) where(r docRow) string { return fmt.Sprintf("%s:%d", t.file, r.line) }

// column returns the index of the header cell named name, or -1.
func (t *docTable) column(name string) int {
	for i, h := range t.header {
		if strings.EqualFold(strings.TrimSpace(h), name) {
			return i
		}
	}
	return -1
}

// allTables parses README.md and docs/*.md into their marked tables and,
// apart, every other table (to find copies of a marked one).
func allTables(files []string) (marked, other []*docTable, err error) {
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			return nil, nil, err
		}
		m, o, err := parseTables(f, string(data))
		if err != nil {
			return nil, nil, err
		}
		marked, other = append(marked, m...), append(other, o...)
	}
	return marked, other, nil
}

// parseTables finds the Markdown tables of one file, outside code blocks.
func parseTables(file, text string) (marked, other []*docTable, err error) {
	lines := strings.Split(text, "\n")
	var pending *docTable // a marker waiting for its table
	inFence := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if inFence != "" {
			if strings.HasPrefix(l, inFence) {
				inFence = ""
			}
			continue
		}
		if m := fence.FindString(l); m != "" {
			inFence = m
			continue
		}
		if m := tableMarker.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			if pending != nil {
				return nil, nil, fmt.Errorf("%s:%d: a table marker without its table", file, pending.line)
			}
			pending = &docTable{file: file, line: i + 1, kind: m[1], arg: m[2]}
			continue
		}
		if !strings.HasPrefix(strings.TrimSpace(l), "|") {
			if strings.TrimSpace(l) != "" && pending != nil {
				return nil, nil, fmt.Errorf("%s:%d: a table marker must stand right before its table (only blank lines between)", file, pending.line)
			}
			continue
		}
		t := pending
		if t == nil {
			t = &docTable{file: file, line: i + 1}
		}
		pending = nil
		t.header = splitRow(l)
		i++ // the |---| line
		for i+1 < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i+1]), "|") {
			i++
			t.rows = append(t.rows, docRow{line: i + 1, cells: splitRow(lines[i])})
		}
		if t.kind != "" {
			marked = append(marked, t)
		} else {
			other = append(other, t)
		}
	}
	if pending != nil {
		return nil, nil, fmt.Errorf("%s:%d: a table marker without its table", file, pending.line)
	}
	return marked, other, nil
}

// splitRow splits a table row into its cells; `\|` is a | inside a cell.
func splitRow(l string) []string {
	l = strings.TrimSpace(l)
	l = strings.TrimPrefix(l, "|")
	l = strings.TrimSuffix(l, "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(l); i++ {
		switch {
		case l[i] == '\\' && i+1 < len(l) && l[i+1] == '|':
			cur.WriteByte('|')
			i++
		case l[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(l[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// codeSpans returns the code spans of a cell, in order.
func codeSpans(cell string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// outerSpans returns the code spans of a cell that are not inside
// parentheses: in "`mode` (`memory` or `store`), `tls`" the names are
// mode and tls; the rest are values or remarks.
func outerSpans(cell string) []string {
	var out []string
	depth := 0
	for i := 0; i < len(cell); i++ {
		switch cell[i] {
		case '(':
			depth++
		case ')':
			if depth > 0 {
				depth--
			}
		case '`':
			end := strings.IndexByte(cell[i+1:], '`')
			if end < 0 {
				return out
			}
			if depth == 0 {
				out = append(out, cell[i+1:i+1+end])
			}
			i += end + 1
		}
	}
	return out
}

// name is what a row documents: the first cell's first code span, or ""
// for a row that names no binary's name (its first cell is text).
func (r docRow) name() string {
	c := strings.TrimSpace(r.cell(0))
	if !strings.HasPrefix(c, "`") {
		return ""
	}
	if s := codeSpans(c); len(s) > 0 {
		return s[0]
	}
	return ""
}
