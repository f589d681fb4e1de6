package doctest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// logLine is one log message the code can emit, found in the source.
type logLine struct {
	level string   // DEBUG, INFO, WARN, ERROR
	msg   string   // the message, as logged
	attrs []string // the attribute keys the call can add, sorted
	pos   string   // file:line of the call
}

// logLevels maps slog's methods to the level they log at.
var logLevels = map[string]string{
	"Debug": "DEBUG", "DebugContext": "DEBUG",
	"Info": "INFO", "InfoContext": "INFO",
	"Warn": "WARN", "WarnContext": "WARN",
	"Error": "ERROR", "ErrorContext": "ERROR",
}

// dynamicLogs are the log calls whose message is not bucketd's: the line
// go-redis formats, passed through (documented in the go-redis table).
var dynamicLogs = map[string]bool{
	"cmd/bucketd redisLogger.Printf": true,
}

// notProduct are the directories under cmd/ and internal/ whose code
// never runs in the binary (test support).
var notProduct = map[string]bool{
	"internal/redistest": true, "internal/testkit": true, "internal/testkit/testserver": true,
	"internal/testcert": true, "internal/doctest": true,
}

// scanLogs finds every slog call in the binary's packages (non-test files
// under cmd/ and internal/) and reads its message and attribute keys,
// following a message passed through a local variable, a package
// constant or a parameter to the call sites that give it. A message it
// cannot read is an error: make it a constant, or teach this scanner.
func scanLogs(root string) ([]logLine, error) {
	dirs := map[string]bool{}
	for _, top := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
				dirs[filepath.Dir(p)] = true
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	var all []logLine
	var problems []string
	for dir := range dirs {
		rel, _ := filepath.Rel(root, dir)
		if notProduct[filepath.ToSlash(rel)] {
			continue
		}
		p, err := parsePkg(dir, filepath.ToSlash(rel))
		if err != nil {
			return nil, err
		}
		lines, probs := p.logCalls()
		all, problems = append(all, lines...), append(problems, probs...)
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, fmt.Errorf("log calls whose message the test cannot read:\n\t%s", strings.Join(problems, "\n\t"))
	}
	sort.Slice(all, func(i, j int) bool { return all[i].msg < all[j].msg })
	return all, nil
}

// pkgScan is one parsed package: its functions, with the calls in them,
// and its constants.
type pkgScan struct {
	rel    string
	fset   *token.FileSet
	funcs  []*ast.FuncDecl
	consts map[string]ast.Expr
}

func parsePkg(dir, rel string) (*pkgScan, error) {
	p := &pkgScan{rel: rel, fset: token.NewFileSet(), consts: map[string]ast.Expr{}}
	matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	for _, f := range matches {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(p.fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				p.funcs = append(p.funcs, d)
			case *ast.GenDecl:
				if d.Tok != token.CONST {
					continue
				}
				for _, s := range d.Specs {
					vs := s.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							p.consts[n.Name] = vs.Values[i]
						}
					}
				}
			}
		}
	}
	return p, nil
}

// funcName names a function for messages and dynamicLogs: "f" or "T.f".
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

// logCalls returns the package's log calls and the ones it cannot read.
func (p *pkgScan) logCalls() ([]logLine, []string) {
	var out []logLine
	var problems []string
	for _, fn := range p.funcs {
		if fn.Body == nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if leveledCall(call) {
				problems = append(problems, fmt.Sprintf("%s: a Log or LogAttrs call, whose level the scanner cannot tell: log with Debug, Info, Warn or Error", p.pos(call)))
				return true
			}
			level, at, ok := logCall(call)
			if !ok {
				return true
			}
			pos := p.pos(call)
			if dynamicLogs[p.rel+" "+funcName(fn)] {
				return true
			}
			msgs, err := p.strings(call.Args[at], fn, 0)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", pos, err))
				return true
			}
			attrs, err := p.attrKeys(call, at+1, fn)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: attributes: %v", pos, err))
				return true
			}
			for _, m := range msgs {
				out = append(out, logLine{level: level, msg: m, attrs: attrs, pos: pos})
			}
			return true
		})
	}
	return out, problems
}

func (p *pkgScan) pos(n ast.Node) string {
	at := p.fset.Position(n.Pos())
	return fmt.Sprintf("%s/%s:%d", p.rel, filepath.Base(at.Filename), at.Line)
}

// logCall reports whether call is a slog call (x.Info(msg, …),
// x.InfoContext(ctx, msg, …) …), its level and its message's index. A
// method of that name whose would-be message is a context (go-redis's
// rdb.Info(ctx, "server")) or missing (err.Error()) is not one.
func logCall(call *ast.CallExpr) (level string, msgAt int, ok bool) {
	sel, isSel := call.Fun.(*ast.SelectorExpr)
	if !isSel {
		return "", 0, false
	}
	level, ok = logLevels[sel.Sel.Name]
	if !ok {
		return "", 0, false
	}
	if strings.HasSuffix(sel.Sel.Name, "Context") {
		msgAt = 1
	}
	if len(call.Args) <= msgAt {
		return "", 0, false
	}
	if id, isID := call.Args[msgAt].(*ast.Ident); isID && id.Name == "ctx" {
		return "", 0, false
	}
	return level, msgAt, true
}

// leveledCall reports whether call looks like slog's Log(ctx, level, msg,
// …) or LogAttrs: a level given as a value would hide the message from
// the log table's check. (ClientLimit.Log(logger) has one argument.)
func leveledCall(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && (sel.Sel.Name == "Log" || sel.Sel.Name == "LogAttrs") && len(call.Args) >= 3
}

// maxDepth bounds how far strings follows a value back to where it is set.
const maxDepth = 6

// strings returns every text e can hold: a literal, a concatenation, a
// package constant, a local variable (each value it is given in fn), or a
// parameter of fn (each value fn's callers in the package pass).
func (p *pkgScan) strings(e ast.Expr, fn *ast.FuncDecl, depth int) ([]string, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%s: followed too far", p.pos(e))
	}
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			break
		}
		s, err := strconv.Unquote(e.Value)
		return []string{s}, err
	case *ast.ParenExpr:
		return p.strings(e.X, fn, depth)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			break
		}
		left, err := p.strings(e.X, fn, depth)
		if err != nil {
			return nil, err
		}
		right, err := p.strings(e.Y, fn, depth)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, l := range left {
			for _, r := range right {
				out = append(out, l+r)
			}
		}
		return out, nil
	case *ast.Ident:
		return p.ident(e, fn, depth)
	}
	return nil, fmt.Errorf("%s: %s is not a constant text", p.pos(e), p.src(e))
}

// ident resolves a name used as a text in fn.
func (p *pkgScan) ident(id *ast.Ident, fn *ast.FuncDecl, depth int) ([]string, error) {
	if fn == nil {
		return nil, fmt.Errorf("%s: %s is not a literal", p.pos(id), id.Name)
	}
	if vals := localValues(fn, id.Name); len(vals) > 0 {
		var out []string
		for _, v := range vals {
			s, err := p.strings(v, fn, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		}
		return out, nil
	}
	if i := paramIndex(fn, id.Name); i >= 0 {
		return p.fromCallers(fn, i, depth)
	}
	if c, ok := p.consts[id.Name]; ok {
		return p.strings(c, fn, depth+1)
	}
	return nil, fmt.Errorf("%s: cannot tell what %s holds", p.pos(id), id.Name)
}

// fromCallers resolves parameter i of fn at every call of fn in the package.
func (p *pkgScan) fromCallers(fn *ast.FuncDecl, i, depth int) ([]string, error) {
	var out []string
	var firstErr error
	found := false
	for _, caller := range p.funcs {
		if caller.Body == nil {
			continue
		}
		ast.Inspect(caller.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || calleeName(call) != fn.Name.Name || i >= len(call.Args) {
				return true
			}
			found = true
			s, err := p.strings(call.Args[i], caller, depth+1)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			out = append(out, s...)
			return true
		})
	}
	if firstErr != nil {
		return nil, firstErr
	}
	if !found {
		return nil, fmt.Errorf("%s: no call of %s in the package", p.pos(fn), fn.Name.Name)
	}
	return out, nil
}

func calleeName(call *ast.CallExpr) string {
	switch f := call.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

// localValues returns every value fn assigns to the local variable name
// (name := v, name = v, var name = v), in closures too.
func localValues(fn *ast.FuncDecl, name string) []ast.Expr {
	var out []ast.Expr
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if len(n.Lhs) != len(n.Rhs) {
				return true
			}
			for i, l := range n.Lhs {
				if id, ok := l.(*ast.Ident); ok && id.Name == name {
					out = append(out, n.Rhs[i])
				}
			}
		case *ast.ValueSpec:
			for i, id := range n.Names {
				if id.Name == name && i < len(n.Values) {
					out = append(out, n.Values[i])
				}
			}
		}
		return true
	})
	return out
}

// paramIndex returns the position of fn's parameter name, or -1.
func paramIndex(fn *ast.FuncDecl, name string) int {
	i := 0
	for _, f := range fn.Type.Params.List {
		if len(f.Names) == 0 {
			i++
			continue
		}
		for _, n := range f.Names {
			if n.Name == name {
				return i
			}
			i++
		}
	}
	return -1
}

// attrKeys returns the attribute keys of a log call's arguments from
// index at on: key-value pairs with a literal key, slog.String("k", …)
// and the like, or a slice spread with ... whose keys fn (or, for a
// parameter, fn's callers) puts in it with []any{…} and append.
func (p *pkgScan) attrKeys(call *ast.CallExpr, at int, fn *ast.FuncDecl) ([]string, error) {
	args := call.Args[at:]
	if call.Ellipsis.IsValid() {
		if len(args) != 1 {
			return nil, fmt.Errorf("%s: attributes before a spread", p.pos(call))
		}
		return p.spreadKeys(args[0], fn, 0)
	}
	return p.pairKeys(args)
}

// pairKeys reads key-value pairs (and slog.Attr constructors).
func (p *pkgScan) pairKeys(args []ast.Expr) ([]string, error) {
	set := map[string]bool{}
	for i := 0; i < len(args); i++ {
		if c, ok := args[i].(*ast.CallExpr); ok {
			if sel, ok := c.Fun.(*ast.SelectorExpr); ok && isIdent(sel.X, "slog") && len(c.Args) > 0 {
				k, err := p.strings(c.Args[0], nil, maxDepth) // a literal, nothing to follow
				if err != nil {
					return nil, err
				}
				set[k[0]] = true
				continue
			}
		}
		k, err := p.strings(args[i], nil, maxDepth)
		if err != nil {
			return nil, fmt.Errorf("%s: an attribute key that is not a literal", p.pos(args[i]))
		}
		set[k[0]] = true
		i++ // its value
	}
	return sortedKeys(set), nil
}

// spreadKeys reads the keys a slice spread into a log call can hold.
func (p *pkgScan) spreadKeys(e ast.Expr, fn *ast.FuncDecl, depth int) ([]string, error) {
	id, ok := e.(*ast.Ident)
	if !ok || depth > maxDepth {
		return nil, fmt.Errorf("%s: cannot read the attributes %s", p.pos(e), p.src(e))
	}
	set := map[string]bool{}
	vals := localValues(fn, id.Name)
	if len(vals) == 0 {
		i := paramIndex(fn, id.Name)
		if i < 0 {
			return nil, fmt.Errorf("%s: cannot tell what %s holds", p.pos(e), id.Name)
		}
		return nil, fmt.Errorf("%s: attributes passed in as the parameter %s are not followed", p.pos(e), id.Name)
	}
	for _, v := range vals {
		var pairs []ast.Expr
		switch v := v.(type) {
		case *ast.CompositeLit:
			pairs = v.Elts
		case *ast.CallExpr:
			if !isIdent(v.Fun, "append") || len(v.Args) < 1 || !isIdent(v.Args[0], id.Name) {
				return nil, fmt.Errorf("%s: cannot read the attributes %s", p.pos(v), p.src(v))
			}
			pairs = v.Args[1:]
		default:
			return nil, fmt.Errorf("%s: cannot read the attributes %s", p.pos(v), p.src(v))
		}
		keys, err := p.pairKeys(pairs)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			set[k] = true
		}
	}
	return sortedKeys(set), nil
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// src is a short rendering of an expression for messages.
func (p *pkgScan) src(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.CallExpr:
		return p.src(e.Fun) + "(…)"
	case *ast.SelectorExpr:
		return p.src(e.X) + "." + e.Sel.Name
	}
	return fmt.Sprintf("%T", e)
}
