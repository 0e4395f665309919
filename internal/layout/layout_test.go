package layout

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/hotcount/hotcount"

// pkg is what the tests read of `go list -deps -json`.
type pkg struct {
	ImportPath string
	Dir        string
	Standard   bool
	Imports    []string
	Deps       []string
}

// listAll returns every package of the module and everything it depends
// on, by import path, as `go list -deps -json ./...` run at the module
// root reports them (test files excluded).
func listAll(t *testing.T) map[string]pkg {
	t.Helper()
	root := moduleRoot(t)
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Dir,Standard,Imports,Deps", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	if _, ok := pkgs[module+"/cmd/hotcount"]; !ok {
		t.Fatalf("go list found no %s/cmd/hotcount (ran in %s)", module, root)
	}
	return pkgs
}

// moduleRoot is the directory of go.mod, two levels up.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// ours reports whether path is a package of this module.
func ours(path string) bool { return path == module || strings.HasPrefix(path, module+"/") }

// harness reports whether path is a package of the test harness.
func harness(path string) bool {
	switch path {
	case module + "/internal/testenv", module + "/internal/faultproxy", module + "/internal/layout":
		return true
	}
	return strings.HasSuffix(path, "test") // durable/durabletest and its like
}

// harnessViolations lists, for each production package of pkgs, the harness
// packages (and package testing) among its dependencies.
func harnessViolations(pkgs map[string]pkg) []string {
	var bad []string
	for path, p := range pkgs {
		if !ours(path) || harness(path) {
			continue
		}
		for _, d := range p.Deps {
			if d == "testing" || (ours(d) && harness(d)) {
				bad = append(bad, path+" depends on "+d)
			}
		}
	}
	slices.Sort(bad)
	return bad
}

func TestProductionStandsOnProduction(t *testing.T) {
	pkgs := listAll(t)
	for _, b := range harnessViolations(pkgs) {
		t.Error(b)
	}
	// The harness builds on the production package that starts clusters.
	if te, ok := pkgs[module+"/internal/testenv"]; !ok || !slices.Contains(te.Imports, module+"/internal/rediscluster") {
		t.Errorf("internal/testenv does not build on internal/rediscluster (imports %v)", te.Imports)
	}
}

// faceImports lists the imports of this module by server, proxy and their
// subpackages that are not the root, keyspace, clock or the face's own
// subpackages.
func faceImports(pkgs map[string]pkg) []string {
	allowed := map[string]bool{module: true, module + "/keyspace": true, module + "/clock": true}
	var bad []string
	for path, p := range pkgs {
		var face string
		for _, f := range []string{module + "/server", module + "/proxy"} {
			if path == f || strings.HasPrefix(path, f+"/") {
				face = f
			}
		}
		if face == "" {
			continue
		}
		for _, imp := range p.Imports {
			if ours(imp) && !allowed[imp] && imp != face && !strings.HasPrefix(imp, face+"/") {
				bad = append(bad, path+" imports "+imp)
			}
		}
	}
	slices.Sort(bad)
	return bad
}

func TestFacesImportOnlyTheRoot(t *testing.T) {
	pkgs := listAll(t)
	for _, f := range []string{"server", "proxy"} {
		if _, ok := pkgs[module+"/"+f]; !ok {
			t.Fatalf("go list did not report %s/%s", module, f)
		}
	}
	for _, b := range faceImports(pkgs) {
		t.Errorf("%s: the faces import only the root package, keyspace, clock and their own subpackages; export what is needed from the root", b)
	}
}

// literalDefs returns "file: name = value" for every constant named one
// of names whose value is a literal rather than a reference, in the
// non-test Go files under root.
func literalDefs(t *testing.T, root string, names ...string) []string {
	t.Helper()
	var defs []string
	fset := token.NewFileSet()
	err := eachSource(root, fset, func(path string, f *ast.File) error {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !slices.Contains(names, n.Name) || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
						rel, _ := filepath.Rel(root, path)
						defs = append(defs, rel+": "+n.Name+" = "+lit.Value)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(defs)
	return defs
}

func TestMaxNDefinedOnce(t *testing.T) {
	defs := literalDefs(t, moduleRoot(t), "MaxN", "LimitN")
	want := []string{filepath.Join("keyspace", "keyspace.go") + ": MaxN = 1024"}
	if !slices.Equal(defs, want) {
		t.Errorf("the largest N is defined by %q; want it defined once, %q, and referred to elsewhere (keyspace.MaxN)", defs, want)
	}
}

// eachSource parses, with fset, every non-test Go file under root (not in
// hidden folders, testdata or node_modules) and calls fn with it.
func eachSource(root string, fset *token.FileSet, fn func(path string, f *ast.File) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		return fn(path, f)
	})
}
