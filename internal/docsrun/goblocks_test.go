package docsrun

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goBlock is a ```go block of a doc.
var goBlock = regexp.MustCompile("(?ms)^```go\n(.*?)^```")

// TestGoBlocksCompile compiles the ```go blocks of README.md and
// docs/library.md, each as the body of a function that has what the
// examples take as given (ctx, the durable store db, a requestID), in a
// module that uses this repository: a call, a field or a type the
// library no longer has fails it. "{ ... }" in a block stands for error
// handling; a variable an example declares and does not use is not an
// error here.
func TestGoBlocksCompile(t *testing.T) {
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go \S+$`).FindString(string(goMod))
	mod := "module docsblocks\n\n" + goLine + "\n\nrequire github.com/hotcount/hotcount v0.0.0\n\nreplace github.com/hotcount/hotcount => " + abs + "\n"
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", mod)
	write("go.sum", string(sum))
	n := 0
	for _, doc := range []string{"README.md", "docs/library.md"} {
		data, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range goBlock.FindAllStringSubmatch(string(data), -1) {
			n++
			body := strings.ReplaceAll(m[1], "{ ... }", "{ panic(err) }")
			write(filepath.Base(doc)+".go", "package docsblocks\n\nimport (\n\t\"context\"\n\t\"time\"\n\n\t\"github.com/hotcount/hotcount\"\n\t\"github.com/hotcount/hotcount/durable\"\n)\n\n"+
				"var _ = time.Second\n\n// "+doc+"\nfunc _(ctx context.Context, db durable.Backend, requestID string) {\n"+body+"}\n")
		}
	}
	if n < 2 {
		t.Fatalf("found %d Go blocks in README.md and docs/library.md", n)
	}
	cmd := exec.Command("go", "build", "-gcflags=-e", "-o", os.DevNull, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	var real []string
	for _, line := range strings.Split(string(out), "\n") {
		if line == "" || strings.HasPrefix(line, "#") || strings.Contains(line, "declared and not used") {
			continue
		}
		real = append(real, line)
	}
	if len(real) > 0 {
		t.Fatalf("the Go blocks do not compile:\n%s", strings.Join(real, "\n"))
	}
}
