package doctest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The tests below check TestDocsComplete's own parts (the table parser and
// the log scanner) without a server.

func TestParseTables(t *testing.T) {
	md := strings.Join([]string{
		"<!-- table: log -->",
		"",
		"| level | message | attributes |",
		"|---|---|---|",
		"| INFO | `a\\|b` | `mode` (`memory` or `store`), `tls` |",
		"",
		"```",
		"| not | a table |",
		"|---|---|",
		"```",
		"",
		"| plain | table |",
		"|---|---|",
		"| `x` | y |",
	}, "\n")
	marked, other, err := parseTables("x.md", md)
	if err != nil {
		t.Fatal(err)
	}
	if len(marked) != 1 || len(other) != 1 {
		t.Fatalf("got %d marked and %d other tables, want 1 and 1", len(marked), len(other))
	}
	log := marked[0]
	if log.kind != "log" || log.line != 1 || len(log.rows) != 1 || log.rows[0].line != 5 {
		t.Errorf("marked table: kind %q, line %d, rows %+v", log.kind, log.line, log.rows)
	}
	r := log.rows[0]
	if got := codeSpans(r.cell(log.column("message"))); !reflect.DeepEqual(got, []string{"a|b"}) {
		t.Errorf("message %q, want [a|b] (an escaped pipe stays in its cell)", got)
	}
	if got := outerSpans(r.cell(log.column("attributes"))); !reflect.DeepEqual(got, []string{"mode", "tls"}) {
		t.Errorf("attributes %q, want [mode tls] (spans in parentheses are remarks)", got)
	}
	if other[0].rows[0].name() != "x" {
		t.Errorf("plain table's row names %q", other[0].rows[0].name())
	}

	for _, bad := range []string{
		"<!-- table: log -->\nSome text.\n\n| a |\n|---|\n",
		"<!-- table: log -->\n",
		"<!-- table: log -->\n<!-- table: info Server -->\n| a |\n|---|\n",
	} {
		if _, _, err := parseTables("bad.md", bad); err == nil {
			t.Errorf("no error for a marker without its table:\n%s", bad)
		}
	}
}

// TestScanLogs: the scanner follows a message through a constant, a local
// variable, a concatenation and a parameter, reads attribute keys from
// pairs, slog.Attr calls and a spread slice, and refuses a message it
// cannot read rather than miss it.
func TestScanLogs(t *testing.T) {
	root := t.TempDir()
	write := func(dir, src string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dir, "x.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cmd/c", `package main

func main() {}
`)
	write("internal/p", `package p

import "log/slog"

const gone = "gone"

func run(l *slog.Logger, fail bool) {
	l.Info("started", "addr", 1, slog.Int("n", 2))
	msg := "a"
	if fail {
		msg = "b"
	}
	l.Warn("x: "+msg, "err", nil)
	l.Error(gone)
	attrs := []any{"k1", 1}
	attrs = append(attrs, "k2", 2)
	l.Debug("spread", attrs...)
	warn(l, "from a caller")
}

func warn(l *slog.Logger, text string) { l.WarnContext(nil, text, "w", 1) }
`)
	got, err := scanLogs(root)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range got {
		lines = append(lines, l.level+" "+l.msg+" "+strings.Join(l.attrs, ","))
	}
	want := []string{
		"WARN from a caller w",
		"ERROR gone ",
		"DEBUG spread k1,k2",
		"INFO started addr,n",
		"WARN x: a err",
		"WARN x: b err",
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("scanLogs found\n\t%s\nwant\n\t%s", strings.Join(lines, "\n\t"), strings.Join(want, "\n\t"))
	}

	write("internal/q", `package q

import "log/slog"

func f(l *slog.Logger, m string) { l.Info(m) }
`)
	if _, err := scanLogs(root); err == nil || !strings.Contains(err.Error(), "internal/q/x.go:5") {
		t.Errorf("a message the scanner cannot read: error %v, want one naming internal/q/x.go:5", err)
	}

	write("internal/q", `package q

import (
	"context"
	"log/slog"
)

func f(l *slog.Logger) { l.Log(context.Background(), slog.LevelWarn, "hidden") }
`)
	if _, err := scanLogs(root); err == nil || !strings.Contains(err.Error(), "internal/q/x.go:8") {
		t.Errorf("a Log call: error %v, want one naming internal/q/x.go:8", err)
	}
}
