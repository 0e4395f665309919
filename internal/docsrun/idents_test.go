package docsrun

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// goNames indexes the exported names of the repository's Go code, from
// its source (test files aside): what a doc may name.
type goNames struct {
	// pkgs maps a package name to its exported top-level names.
	pkgs map[string]map[string]bool
	// members maps a type name (of any package) to its fields and
	// methods, each with the name of the field's type ("" for a method
	// or a type that is not a named one).
	members map[string]map[string]string
	// embeds maps a type name to the names of the types it embeds.
	embeds map[string][]string
	// aliases maps an alias (type A = pkg.B) to the name it stands for.
	aliases map[string]string
	// top holds every exported top-level name of every package.
	top map[string]bool
	// metrics holds the hotcount_* names in the source's string literals:
	// metric names, INFO fields.
	metrics map[string]bool
}

// typeName is the name of a named type behind pointers, slices, maps'
// values and package qualifiers; "" for other types.
func typeName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.StarExpr:
		return typeName(t.X)
	case *ast.ArrayType:
		return typeName(t.Elt)
	case *ast.MapType:
		return typeName(t.Value)
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.IndexExpr:
		return typeName(t.X)
	}
	return ""
}

// loadGoNames parses every non-test Go file under the repository.
func loadGoNames(t *testing.T) *goNames {
	t.Helper()
	g := &goNames{pkgs: map[string]map[string]bool{}, members: map[string]map[string]string{},
		embeds: map[string][]string{}, aliases: map[string]string{}, top: map[string]bool{}, metrics: map[string]bool{}}
	member := func(typ, name, of string) {
		if g.members[typ] == nil {
			g.members[typ] = map[string]string{}
		}
		if _, ok := g.members[typ][name]; !ok || of != "" {
			g.members[typ][name] = of
		}
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				for _, m := range metricName.FindAllString(lit.Value, -1) {
					g.metrics[m] = true
				}
			}
			return true
		})
		pkg := f.Name.Name
		if g.pkgs[pkg] == nil {
			g.pkgs[pkg] = map[string]bool{}
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil && len(d.Recv.List) == 1 {
					member(typeName(d.Recv.List[0].Type), d.Name.Name, "")
					continue
				}
				g.pkgs[pkg][d.Name.Name] = true
				g.top[d.Name.Name] = true
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							g.pkgs[pkg][n.Name] = true
							g.top[n.Name] = true
						}
					case *ast.TypeSpec:
						name := s.Name.Name
						g.pkgs[pkg][name] = true
						g.top[name] = true
						if s.Assign.IsValid() {
							g.aliases[name] = typeName(s.Type)
						}
						st, ok := s.Type.(*ast.StructType)
						if !ok {
							if it, ok := s.Type.(*ast.InterfaceType); ok {
								for _, m := range it.Methods.List {
									for _, n := range m.Names {
										member(name, n.Name, "")
									}
								}
							}
							continue
						}
						for _, fld := range st.Fields.List {
							if len(fld.Names) == 0 {
								emb := typeName(fld.Type)
								g.embeds[name] = append(g.embeds[name], emb)
								member(name, emb, emb)
								continue
							}
							for _, n := range fld.Names {
								member(name, n.Name, typeName(fld.Type))
							}
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// hasMember reports whether type typ (through aliases and embedded
// types) has the field or method name, and returns the name of its type.
func (g *goNames) hasMember(typ, name string, depth int) (string, bool) {
	if depth > 8 {
		return "", false
	}
	if a, ok := g.aliases[typ]; ok && a != typ {
		return g.hasMember(a, name, depth+1)
	}
	if of, ok := g.members[typ][name]; ok {
		return of, true
	}
	for _, e := range g.embeds[typ] {
		if of, ok := g.hasMember(e, name, depth+1); ok {
			return of, true
		}
	}
	return "", false
}

// check says what is wrong with the dotted Go name ref ("" when it
// exists or is not one of this repository's): pkg.Name[.Member...] or
// Type.Member[.Member...].
func (g *goNames) check(ref string) string {
	parts := strings.Split(strings.TrimSuffix(ref, "()"), ".")
	typ := ""
	rest := parts[1:]
	switch first := parts[0]; {
	case g.pkgs[first] != nil && !unicode.IsUpper(rune(first[0])):
		if !unicode.IsUpper(rune(parts[1][0])) {
			return "" // a file name (hotcount.db) or a metric field
		}
		if !g.pkgs[first][parts[1]] {
			return "package " + first + " has no " + parts[1]
		}
		typ, rest = parts[1], parts[2:]
	case unicode.IsUpper(rune(first[0])) && g.top[first]:
		typ = first
	default:
		return "" // not a name of this repository (errors.Is)
	}
	for _, m := range rest {
		of, ok := g.hasMember(typ, m, 0)
		if !ok {
			return typ + " has no field or method " + m
		}
		typ = of
	}
	return ""
}

// docFiles are the Markdown files whose Go names are checked: the README
// and docs/, the dated benchmark log aside (old entries stay as run).
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{filepath.Join(root, "README.md")}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range more {
		if filepath.Base(f) != "benchmarks-log.md" {
			files = append(files, f)
		}
	}
	return files
}

// docLine is one line of a doc file: the file's path from the module
// root, the line's index from 0, and its text.
type docLine struct {
	rel  string
	i    int
	text string
}

// docLines returns every line of the docs that docFiles lists.
func docLines(t *testing.T) []docLine {
	t.Helper()
	var out []docLine
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for i, line := range strings.Split(string(data), "\n") {
			out = append(out, docLine{rel, i, line})
		}
	}
	return out
}

var (
	// dottedName is a code span holding only a dotted Go name:
	// `Config.Region`, `proxy.DefaultMaxBulkLen`, `Client.Unpin()`.
	dottedName = regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\\(\\))?`")
	// bareName is a code span holding one exported name of the kinds
	// docs quote alone: errors, defaults, modes.
	bareName = regexp.MustCompile("`((?:Err|Default|Mode)[A-Z][A-Za-z0-9_]*)`")
	// metricName is a name of hotcount's metrics (or INFO fields); in a
	// doc, one followed by "*" names a family of them.
	metricName = regexp.MustCompile(`hotcount_[a-z0-9_]*[a-z0-9]`)
	docMetric  = regexp.MustCompile(`\bhotcount_[a-z0-9_]*(\*|[a-z0-9])`)
)

// goneMetrics are metric names the upgrade notes of docs/operations.md
// name because they were removed or renamed.
var goneMetrics = map[string]bool{
	"hotcount_node_write_rate":         true,
	"hotcount_auto_n_recent_decisions": true,
	"hotcount_restored_amount_total":   true,
}

// TestMetricNamesExist checks the hotcount_* names of README.md and docs/
// (metrics, the proxy's INFO fields): each is in the source, a histogram's
// _bucket, _sum or _count series of one, or, with a trailing "*", the
// prefix of one.
func TestMetricNamesExist(t *testing.T) {
	g := loadGoNames(t)
	if len(g.metrics) < 50 {
		t.Fatalf("found only %d metric names in the source", len(g.metrics))
	}
	for _, l := range docLines(t) {
		rel, i, line := l.rel, l.i, l.text
		for _, m := range docMetric.FindAllString(line, -1) {
			if prefix, ok := strings.CutSuffix(m, "*"); ok {
				found := false
				for name := range g.metrics {
					found = found || strings.HasPrefix(name, prefix)
				}
				if !found {
					t.Errorf("%s:%d: no metric starts with %s", rel, i+1, prefix)
				}
				continue
			}
			base := m
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(m, suffix); ok && g.metrics[b] {
					base = b
				}
			}
			if !g.metrics[base] && !goneMetrics[m] {
				t.Errorf("%s:%d: %s is not a metric or field of the source", rel, i+1, m)
			}
		}
	}
}

// TestGoNamesExist checks the Go names the docs quote in code spans: a
// package's exported name (`proxy.DefaultMaxBulkLen`), a field or method
// of a type, through the types of the fields on the way
// (`Config.Redis.FlushDelay`), and the errors and defaults quoted alone
// (`ErrOverflow`, `DefaultN`). A name of another module (`errors.Is`) is
// not looked at.
func TestGoNamesExist(t *testing.T) {
	g := loadGoNames(t)
	for _, l := range docLines(t) {
		rel, i, line := l.rel, l.i, l.text
		for _, m := range dottedName.FindAllStringSubmatch(line, -1) {
			// A path inside the library's Config may leave out
			// "Config." (`Buffer.HotAt`, `Durability.HealInterval`).
			if why := g.check(m[1]); why != "" && g.check("Config."+m[1]) != "" {
				t.Errorf("%s:%d: `%s`: %s", rel, i+1, m[1], why)
			}
		}
		for _, m := range bareName.FindAllStringSubmatch(line, -1) {
			if !g.top[m[1]] {
				t.Errorf("%s:%d: `%s`: no package has it", rel, i+1, m[1])
			}
		}
	}
}

// TestGoNamesChecked checks the checker on names known to exist and not.
func TestGoNamesChecked(t *testing.T) {
	g := loadGoNames(t)
	for ref, ok := range map[string]bool{
		"Config.Region":                true,
		"Config.Redis.FlushDelay":      true,
		"PeerConfig.Redis.TLS":         true,
		"hotcount.Config":              true,
		"Client.Unpin()":               true,
		"errors.Is":                    true,
		"hotcount.db":                  true,
		"Config.NoSuchField":           false,
		"Config.Redis.NoSuchField":     false,
		"hotcount.NoSuchName":          false,
		"Client.NoSuchMethod":          false,
		"store.NoSuchDefaultTokenTTLx": false,
		"Buffer.NoSuchField":           false,
	} {
		if why := g.check(ref); (why == "") != ok {
			t.Errorf("check(%q) = %q, want ok=%v", ref, why, ok)
		}
	}
}

// TestLibraryErrorsListed: docs/library.md names every named error of the
// root package, the ones a caller tests with errors.Is.
func TestLibraryErrorsListed(t *testing.T) {
	g := loadGoNames(t)
	data, err := os.ReadFile(filepath.Join(root, "docs", "library.md"))
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for name := range g.pkgs["hotcount"] {
		if strings.HasPrefix(name, "Err") && !strings.Contains(string(data), "`"+name+"`") {
			missing = append(missing, name)
		}
	}
	if len(g.pkgs["hotcount"]) == 0 {
		t.Fatal("found no package hotcount")
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("docs/library.md does not name the errors %v of package hotcount", missing)
	}
}
