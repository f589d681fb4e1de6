package doctest

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/redistest"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
)

// TestDocsComplete checks the reference tables against the binary and
// its source (docs/README.md, "The reference tables"): every flag of
// `bucketd --help`, every metric a running bucketd exports (memory mode
// with --data-dir, replicate and store modes, with policies), every INFO
// field (INFO everything in the same modes) and every log message the
// code can emit (its slog calls, read from the source) has exactly one row
// in its table; every row names something the binary or the code has; and
// no other table copies one of them.
func TestDocsComplete(t *testing.T) {
	marked, other, err := allTables(docFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string][]*docTable{}
	for _, tb := range marked {
		byKind[tb.kind] = append(byKind[tb.kind], tb)
	}
	for kind := range byKind {
		if !knownKinds[kind] {
			t.Errorf("%s:%d: unknown table kind %q", byKind[kind][0].file, byKind[kind][0].line, kind)
		}
	}
	help := helpFlags(t)
	logs, err := scanLogs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("settings", func(t *testing.T) { checkSettings(t, byKind["settings"], help) })
	t.Run("log", func(t *testing.T) { checkLogs(t, byKind["log"], logs) })
	t.Run("copies", func(t *testing.T) { checkCopies(t, other, byKind, help, logs) })
	t.Run("running", func(t *testing.T) {
		runs := runModes(t)
		t.Run("metrics", func(t *testing.T) { checkMetrics(t, byKind["metrics"], runs) })
		t.Run("info", func(t *testing.T) { checkInfo(t, byKind["info"], runs) })
	})
}

var knownKinds = map[string]bool{"settings": true, "metrics": true, "info": true, "log": true}

// --- settings ---

// helpFlag is one flag as `bucketd --help` lists it; env and def are
// empty for a flag that is no setting (--version).
type helpFlag struct {
	name, env, def string
}

var (
	helpFlagLine = regexp.MustCompile(`^  --([a-z-]+)(?: \S*)?\s*$`)
	helpEnvLine  = regexp.MustCompile(`^\s+env (BUCKETD_[A-Z_]+), default (.*)$`)
)

func helpFlags(t *testing.T) []helpFlag {
	out, err := exec.Command(bucketdBin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("bucketd --help: %v\n%s", err, out)
	}
	var flags []helpFlag
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if m := helpFlagLine.FindStringSubmatch(sc.Text()); m != nil {
			flags = append(flags, helpFlag{name: "--" + m[1]})
		} else if m := helpEnvLine.FindStringSubmatch(sc.Text()); m != nil && len(flags) > 0 {
			flags[len(flags)-1].env, flags[len(flags)-1].def = m[1], m[2]
		}
	}
	if len(flags) < 20 {
		t.Fatalf("found %d flags in bucketd --help; has its layout changed?\n%s", len(flags), out)
	}
	return flags
}

// sameDefault compares --help's default with the table's: the same text,
// or the same start ("67108864" and "67108864 (64 MiB)"), or the rule
// --help gives in parentheses ("4 (2 x GOMAXPROCS)" and "2 × GOMAXPROCS").
func sameDefault(help, doc string) bool {
	doc = strings.ReplaceAll(strings.ReplaceAll(doc, "`", ""), "×", "x")
	return doc == help || strings.HasPrefix(doc, help+" ") || strings.Contains(help, "("+doc+")")
}

func checkSettings(t *testing.T, tables []*docTable, help []helpFlag) {
	if len(tables) == 0 {
		t.Fatal("no settings table (<!-- table: settings -->)")
	}
	rows := map[string][]string{} // flag → where documented
	for _, tb := range tables {
		env, key, def := tb.column("environment variable"), tb.column("file key"), tb.column("default")
		if env < 0 || key < 0 || def < 0 {
			t.Fatalf("%s:%d: the settings table needs the columns Environment variable, File key and Default", tb.file, tb.line)
		}
		for _, r := range tb.rows {
			name := r.name()
			if !strings.HasPrefix(name, "--") {
				continue // a file-only or environment-only setting
			}
			rows[name] = append(rows[name], tb.where(r))
			f, ok := findFlag(help, name)
			if !ok {
				t.Errorf("%s: %s is not a flag of bucketd --help: remove the row, or fix its name", tb.where(r), name)
				continue
			}
			if f.env == "" { // not a setting: only a flag
				for _, c := range []int{env, key, def} {
					if r.cell(c) != "(none)" {
						t.Errorf("%s: %s is only a flag (bucketd --help gives it no environment variable or default): write (none) in the columns %s, %s and %s",
							tb.where(r), name, tb.header[env], tb.header[key], tb.header[def])
						break
					}
				}
				continue
			}
			if got := strings.Trim(r.cell(env), "`"); got != f.env {
				t.Errorf("%s: %s: environment variable %q, bucketd --help says %s", tb.where(r), name, got, f.env)
			}
			wantKey := "`" + strings.TrimPrefix(name, "--") + "`"
			if name == "--config" {
				wantKey = "(none)"
			}
			if got := r.cell(key); got != wantKey {
				t.Errorf("%s: %s: file key %s, want %s", tb.where(r), name, got, wantKey)
			}
			if !sameDefault(f.def, r.cell(def)) {
				t.Errorf("%s: %s: default %s, bucketd --help says %s", tb.where(r), name, r.cell(def), f.def)
			}
		}
	}
	t.Logf("%d flags in bucketd --help, %d rows", len(help), len(rows))
	for _, f := range help {
		switch w := rows[f.name]; len(w) {
		case 0:
			t.Errorf("%s (bucketd --help) has no row in the settings table (%s): add one", f.name, tables[0].file)
		case 1:
		default:
			t.Errorf("%s is documented %d times: %s", f.name, len(w), strings.Join(w, ", "))
		}
	}
}

func findFlag(help []helpFlag, name string) (helpFlag, bool) {
	for _, f := range help {
		if f.name == name {
			return f, true
		}
	}
	return helpFlag{}, false
}

// --- log messages ---

func checkLogs(t *testing.T, tables []*docTable, code []logLine) {
	type docLog struct {
		level, msg, where string
		attrs             []string
		goRedis           bool
	}
	var docs []docLog
	for _, tb := range tables {
		lvl, msg, attrs := tb.column("level"), tb.column("message"), tb.column("attributes")
		if lvl < 0 || msg < 0 {
			t.Fatalf("%s:%d: a log table needs the columns level and message", tb.file, tb.line)
		}
		if tb.arg != "" && tb.arg != "go-redis" {
			t.Errorf("%s:%d: unknown log table %q", tb.file, tb.line, tb.arg)
		}
		for _, r := range tb.rows {
			spans := codeSpans(r.cell(msg))
			if len(spans) == 0 {
				t.Errorf("%s: the message must be a code span", tb.where(r))
				continue
			}
			d := docLog{level: r.cell(lvl), msg: spans[0], where: tb.where(r), goRedis: tb.arg == "go-redis"}
			if attrs >= 0 {
				d.attrs = outerSpans(r.cell(attrs))
				sort.Strings(d.attrs)
			}
			docs = append(docs, d)
		}
	}
	// Each (level, message) of the code: one row, with the attributes of
	// every call that logs it.
	type key struct{ level, msg string }
	codeAttrs := map[key]map[string]bool{}
	codeAt := map[key]string{}
	for _, l := range code {
		k := key{l.level, l.msg}
		if codeAttrs[k] == nil {
			codeAttrs[k] = map[string]bool{}
			codeAt[k] = l.pos
		}
		for _, a := range l.attrs {
			codeAttrs[k][a] = true
		}
	}
	seen := map[key][]string{}
	for _, d := range docs {
		if d.goRedis {
			checkGoRedisLine(t, d.level, d.msg, d.where)
			continue
		}
		k := key{d.level, d.msg}
		seen[k] = append(seen[k], d.where)
		want, ok := codeAttrs[k]
		if !ok {
			t.Errorf("%s: %s %q: no such log call in the code (a message changed, or its level?)", d.where, d.level, d.msg)
			continue
		}
		if got, w := strings.Join(d.attrs, ","), strings.Join(sortedKeys(want), ","); got != w {
			t.Errorf("%s: %q: attributes %s, the code logs %s (%s)", d.where, d.msg, got, w, codeAt[k])
		}
	}
	t.Logf("%d log calls in the code, %d distinct messages; %d rows", len(code), len(codeAt), len(docs))
	for k, at := range codeAt {
		switch w := seen[k]; len(w) {
		case 0:
			t.Errorf("%s %q (%s) has no row in the log table (%s): add one", k.level, k.msg, at, where0(tables))
		case 1:
		default:
			t.Errorf("%s %q is documented %d times: %s", k.level, k.msg, len(w), strings.Join(w, ", "))
		}
	}
}

// goRedisFormats caches the format strings go-redis logs with.
var goRedisFormats map[string]bool

// checkGoRedisLine checks a documented go-redis line: bucketd logs them at
// WARN, and the format must be one go-redis (at the version go.mod pins)
// logs with.
func checkGoRedisLine(t *testing.T, level, msg, where string) {
	if level != "WARN" {
		t.Errorf("%s: go-redis's lines are logged at WARN, not %s", where, level)
	}
	if goRedisFormats == nil {
		goRedisFormats = map[string]bool{}
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/redis/go-redis/v9").Output()
		if err != nil {
			t.Fatalf("finding go-redis's source: %v", err)
		}
		dir := strings.TrimSpace(string(out))
		printf := regexp.MustCompile(`Logger\.Printf\(\s*[^,]+,\s*"((?:[^"\\]|\\.)*)"`)
		err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			src, err := os.ReadFile(p)
			for _, m := range printf.FindAllStringSubmatch(string(src), -1) {
				goRedisFormats[m[1]] = true
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !goRedisFormats[msg] {
		t.Errorf("%s: go-redis logs no line with the format %q", where, msg)
	}
}

// --- copies ---

// copyRows is how many rows of an unmarked table may name things of one
// marked table before it counts as a copy: a troubleshooting table may
// mention a flag or two.
const copyRows = 3

// checkCopies fails for an unmarked table that lists the names of a
// marked one (copyRows rows or more): a second copy, which drifts. A row
// names a flag or an INFO field with a code span of its first cell, a
// metric or a log message with a whole cell (a message cut short with "…"
// counts).
func checkCopies(t *testing.T, tables []*docTable, byKind map[string][]*docTable, help []helpFlag, logs []logLine) {
	home := map[string]string{} // kind → where its table is
	for kind, tbs := range byKind {
		home[kind] = tbs[0].file
	}
	flags := map[string]bool{}
	for _, f := range help {
		flags[f.name] = true
	}
	infoFields := map[string]bool{}
	for _, tb := range byKind["info"] {
		for _, r := range tb.rows {
			if n := r.name(); n != "" && !strings.Contains(n, "<") {
				infoFields[n] = true
			}
		}
	}
	for _, tb := range tables {
		count := map[string]int{}
		for _, r := range tb.rows {
			kinds := map[string]bool{}
			for _, span := range codeSpans(r.cell(0)) {
				kinds["settings"] = kinds["settings"] || flags[span]
				kinds["info"] = kinds["info"] || infoFields[span]
			}
			for _, c := range r.cells {
				c = strings.Trim(c, "`")
				kinds["metrics"] = kinds["metrics"] || metricName.MatchString(c)
				kinds["log"] = kinds["log"] || isLogMessage(c, logs)
			}
			for k, yes := range kinds {
				if yes {
					count[k]++
				}
			}
		}
		for kind, n := range count {
			if n >= copyRows {
				t.Errorf("%s:%d: this table repeats %d rows of the %s table in %s, a copy that will drift: "+
					"delete it and link to that table, keeping here only what the table does not say (or, if this is to be that table, mark it <!-- table: %s --> and remove the other)",
					tb.file, tb.line, n, kind, home[kind], markerOf[kind])
			}
		}
	}
}

// where0 names the file of the first of tables, for a message that asks
// for a row.
func where0(tables []*docTable) string {
	if len(tables) == 0 {
		return "none yet"
	}
	return tables[0].file
}

// markerOf is the marker a table of each kind starts with.
var markerOf = map[string]string{"settings": "settings", "metrics": "metrics", "info": "info SECTION", "log": "log"}

// metricName matches a metric's name: bucketd's, or the Go runtime and
// process collectors'.
var metricName = regexp.MustCompile(`^(bucketd|go|process)_[a-z_]+$`)

// isLogMessage reports whether a cell is a log message of the code, whole
// or cut short with "…" (or "...").
func isLogMessage(cell string, logs []logLine) bool {
	prefix, cut := strings.CutSuffix(cell, "…")
	if !cut {
		prefix, cut = strings.CutSuffix(cell, "...")
	}
	prefix = strings.TrimSpace(prefix)
	for _, l := range logs {
		if l.msg == cell || cut && len(prefix) >= 10 && strings.HasPrefix(l.msg, prefix) {
			return true
		}
	}
	return false
}

// --- running binaries: metrics and INFO ---

// modeRun is what one running bucketd exported.
type modeRun struct {
	mode     string
	families map[string]*dto.MetricFamily
	info     map[string][]string // section title → field names, in order
}

// policiesYAML gives the runs policies of every shape (one limit, several,
// shadow), so the per-policy series and INFO lines exist.
const policiesYAML = `policies:
  api:
    capacity: 10
    rate: 1
  search:
    limits:
      - {capacity: 10, rate: 10/minute}
      - {capacity: 100, rate: 100/day}
  trial:
    shadow: true
    capacity: 1
    rate: 1/minute
`

// runModes starts bucketd in memory mode (with --data-dir), replicate
// mode, store mode and lease mode, all with policies, sends each a few commands, and
// reads its /metrics and INFO everything.
func runModes(t *testing.T) []modeRun {
	rs := redistest.Start(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bucketd.yaml"), []byte(policiesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	modes := []struct {
		name string
		args []string
	}{
		{"memory", []string{"--data-dir", filepath.Join(dir, "data")}},
		{"replicate", []string{"--replicate", "redis://" + rs.Addr + "/0"}},
		{"store", []string{"--store", "redis://" + rs.Addr + "/1"}},
		{"leases", []string{"--store", "redis://" + rs.Addr + "/2", "--leases"}},
	}
	var runs []modeRun
	for _, m := range modes {
		args := append([]string{"--config", "bucketd.yaml"}, m.args...)
		srv, out, err := startBucketd(dir, nil, args)
		if err != nil {
			t.Fatal(err)
		}
		if srv == nil {
			t.Fatalf("bucketd %s exited:\n%s", strings.Join(args, " "), out)
		}
		run, err := readRun(m.name, srv)
		srv.stop()
		if err != nil {
			t.Fatalf("%s mode: %v\n%s", m.name, err, srv.log)
		}
		runs = append(runs, run)
	}
	return runs
}

func readRun(mode string, srv *bucketd) (modeRun, error) {
	run := modeRun{mode: mode, families: map[string]*dto.MetricFamily{}, info: map[string][]string{}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + srv.port, Protocol: 2})
	defer rdb.Close()
	for _, cmd := range [][]any{
		{"TB.ACQUIRE", "a", 10, 1},
		{"TB.ACQUIRE", "a", "POLICY", "api"},
		{"TB.ACQUIRE", "a", "POLICY", "search"},
		{"TB.ACQUIRE", "a", "POLICY", "trial", 2},
		{"TB.PEEK", "a", 10, 1},
	} {
		if err := rdb.Do(ctx, cmd...).Err(); err != nil {
			return run, fmt.Errorf("%v: %v", cmd, err)
		}
	}
	text, err := rdb.Info(ctx, "everything").Result()
	if err != nil {
		return run, err
	}
	section := ""
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "# "):
			section = strings.TrimPrefix(l, "# ")
		case strings.Contains(l, ":"):
			name, _, _ := strings.Cut(l, ":")
			run.info[section] = append(run.info[section], name)
		}
	}
	resp, err := http.Get("http://127.0.0.1:" + srv.metrics + "/metrics")
	if err != nil {
		return run, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return run, err
	}
	run.families = fams
	return run, nil
}

// labelName finds `name` = … in a labels cell: the label and its values.
var labelName = regexp.MustCompile("`([a-z_]+)` = ([^;]*)")

func checkMetrics(t *testing.T, tables []*docTable, runs []modeRun) {
	if len(tables) == 0 {
		t.Fatal("no metrics table (<!-- table: metrics -->)")
	}
	type docMetric struct {
		where, typ string
		labels     map[string][]string // label → its values, nil when open-ended
		hasLabels  bool                // the table has a labels column
	}
	docs := map[string][]docMetric{}
	for _, tb := range tables {
		typ, lab := tb.column("type"), tb.column("labels")
		if typ < 0 {
			t.Fatalf("%s:%d: a metrics table needs a type column", tb.file, tb.line)
		}
		for _, r := range tb.rows {
			name := r.name()
			if name == "" {
				t.Errorf("%s: the first cell must be the metric's name, as a code span", tb.where(r))
				continue
			}
			d := docMetric{where: tb.where(r), typ: r.cell(typ), hasLabels: lab >= 0, labels: map[string][]string{}}
			if lab >= 0 {
				for _, m := range labelName.FindAllStringSubmatch(r.cell(lab), -1) {
					d.labels[m[1]] = closedValues(m[2])
				}
			}
			docs[name] = append(docs[name], d)
		}
	}
	exported := map[string]bool{}
	for _, run := range runs {
		for name, f := range run.families {
			exported[name] = true
			ds := docs[name]
			if len(ds) != 1 {
				continue // reported below
			}
			d := ds[0]
			if want := strings.ToLower(f.GetType().String()); d.typ != want {
				t.Errorf("%s: %s is a %s, not a %s", d.where, name, want, d.typ)
			}
			if !d.hasLabels {
				continue
			}
			for label, values := range exportedLabels(f) {
				docValues, ok := d.labels[label]
				if !ok {
					t.Errorf("%s: %s has the label %s (%s mode), which the row does not name", d.where, name, label, run.mode)
					continue
				}
				for v := range values {
					if docValues != nil && !contains(docValues, v) {
						t.Errorf("%s: %s{%s=%q} (%s mode) is not among the values the row lists", d.where, name, label, v, run.mode)
					}
				}
			}
		}
	}
	for name, ds := range docs {
		switch {
		case !exported[name]:
			t.Errorf("%s: %s is documented, but no run (memory with --data-dir, replicate, store) exports it: remove the row, or fix its name", ds[0].where, name)
		case len(ds) > 1:
			var w []string
			for _, d := range ds {
				w = append(w, d.where)
			}
			t.Errorf("%s is documented %d times: %s", name, len(ds), strings.Join(w, ", "))
		}
	}
	t.Logf("%d metric families exported, %d rows", len(exported), len(docs))
	for name := range exported {
		if len(docs[name]) == 0 {
			t.Errorf("%s is exported but has no row in a metrics table (%s): add one", name, where0(tables))
		}
	}
}

// closedValues returns the values a labels cell lists, or nil when the
// list is open-ended (a policy's name, `0` … `n-1`).
func closedValues(cell string) []string {
	spans := codeSpans(cell)
	rest := codeSpan.ReplaceAllString(cell, "")
	rest = strings.NewReplacer("|", " ", ",", " ", " or ", " ", " and ", " ").Replace(" " + rest + " ")
	if strings.TrimSpace(rest) != "" || len(spans) == 0 {
		return nil
	}
	for i, s := range spans {
		if s == `""` {
			spans[i] = ""
		}
	}
	return spans
}

// exportedLabels returns a family's labels and their values (le and
// quantile, the histogram's and summary's own, left out).
func exportedLabels(f *dto.MetricFamily) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, m := range f.GetMetric() {
		for _, lp := range m.GetLabel() {
			if out[lp.GetName()] == nil {
				out[lp.GetName()] = map[string]bool{}
			}
			out[lp.GetName()][lp.GetValue()] = true
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func checkInfo(t *testing.T, tables []*docTable, runs []modeRun) {
	if len(tables) == 0 {
		t.Fatal("no INFO tables (<!-- table: info Section -->)")
	}
	type docField struct {
		where, name string
		re          *regexp.Regexp
		used        bool
	}
	sections := map[string][]*docField{}
	for _, tb := range tables {
		if tb.arg == "" {
			t.Errorf("%s:%d: an INFO table names its section: <!-- table: info Server -->", tb.file, tb.line)
			continue
		}
		if sections[tb.arg] != nil {
			t.Errorf("%s:%d: a second table for INFO's # %s", tb.file, tb.line, tb.arg)
		}
		for _, r := range tb.rows {
			name := r.name()
			if name == "" {
				t.Errorf("%s: the first cell must be the field's name, as a code span", tb.where(r))
				continue
			}
			// policy_<name>: the part in angle brackets stands for any text.
			pat := regexp.QuoteMeta(name)
			pat = regexp.MustCompile(`<[a-z_]+>`).ReplaceAllString(pat, `.+`)
			sections[tb.arg] = append(sections[tb.arg], &docField{where: tb.where(r), name: name, re: regexp.MustCompile("^" + pat + "$")})
		}
	}
	home := tables[0].file
	seen := 0
	reported := map[string]bool{} // a field in several modes: one error
	errorf := func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !reported[msg] {
			reported[msg] = true
			t.Error(msg)
		}
	}
	for _, run := range runs {
		for section, fields := range run.info {
			docFields, ok := sections[section]
			if !ok {
				errorf("INFO's # %s has no table: add one to %s, marked <!-- table: info %s -->", section, home, section)
				continue
			}
			seen += len(fields)
			for _, f := range fields {
				var hits []string
				for _, d := range docFields {
					if d.re.MatchString(f) {
						d.used = true
						hits = append(hits, d.where)
					}
				}
				switch len(hits) {
				case 0:
					errorf("INFO # %s: %s has no row in %s: add one", section, f, home)
				case 1:
				default:
					errorf("INFO # %s: %s is documented %d times: %s", section, f, len(hits), strings.Join(hits, ", "))
				}
			}
		}
	}
	t.Logf("%d INFO fields printed in %d modes, %d sections documented", seen, len(runs), len(sections))
	for section, fields := range sections {
		for _, d := range fields {
			if !d.used {
				t.Errorf("%s: INFO # %s: no run (memory, replicate, store, leases) prints %s: remove the row, or fix its name", d.where, section, d.name)
			}
		}
	}
}
