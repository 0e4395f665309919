package docsrun

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
)

// root is the repository, from this package's folder.
const root = "../.."

// skipMarker marks a block the test does not run: <!-- docs-run: skip: REASON -->.
var skipMarker = regexp.MustCompile(`^<!-- docs-run: skip: (.*\S)\s*-->$`)

// helpSkips are the examples of `hotcount --help` that cannot run here, by
// a part of their text, with the reason.
var helpSkips = map[string]string{
	"--node-cpu":                       "CPU quotas need root and a writable cgroup, and the capped run takes minutes (docs/performance.md)",
	"--redis 127.0.0.1:7200 --key hot": "it drives the capped cluster of the example before it",
}

// example is one command of a doc and the output the doc shows, if any.
type example struct {
	where    string // file:line
	cmd      string
	output   *string
	skipWhy  string
	fromHelp bool
	// last: the last command of its block.
	last bool
}

// docBlocks returns the examples of the ```sh, ```bash and ```console
// blocks of a Markdown file.
func docBlocks(t *testing.T, path string) []example {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var out []example
	lastText := ""
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		lang, isFence := strings.CutPrefix(strings.TrimSpace(line), "```")
		if !isFence {
			if strings.TrimSpace(line) != "" {
				lastText = strings.TrimSpace(line)
			}
			continue
		}
		start := i
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		blockStart := len(out)
		skip := ""
		if m := skipMarker.FindStringSubmatch(lastText); m != nil {
			skip = m[1]
		} else if strings.HasPrefix(lastText, "<!-- docs-run") {
			t.Errorf("%s:%d: a skip marker reads <!-- docs-run: skip: REASON -->, got %q", path, start, lastText)
		}
		lastText = ""
		where := func(j int) string { return fmt.Sprintf("%s:%d", filepath.Base(path), start+2+j) }
		switch lang {
		case "sh", "bash":
			for j := 0; j < len(body); j++ {
				cmd, n := joinContinued(body, j)
				if m := heredoc.FindStringSubmatch(cmd); m != nil {
					// The lines up to the delimiter belong to the command.
					for n+1 < len(body) {
						n++
						cmd += "\n" + body[n]
						if strings.TrimSpace(body[n]) == m[1] {
							break
						}
					}
					out = append(out, example{where: where(j), cmd: cmd, skipWhy: skip})
					j = n
					continue
				}
				if c := stripComment(cmd); c != "" {
					out = append(out, example{where: where(j), cmd: c, skipWhy: skip})
				}
				j = n
			}
		case "console":
			for j := 0; j < len(body); j++ {
				rest, ok := strings.CutPrefix(body[j], "$ ")
				if !ok {
					t.Fatalf("%s: a console block's lines start with \"$ \" or follow one as its output", where(j))
				}
				body[j] = rest
				cmd, n := joinContinued(body, j)
				var shown []string
				for n+1 < len(body) && !strings.HasPrefix(body[n+1], "$ ") {
					n++
					shown = append(shown, body[n])
				}
				o := strings.Join(shown, "\n")
				out = append(out, example{where: where(j), cmd: stripComment(cmd), output: &o, skipWhy: skip})
				j = n
			}
		}
		if len(out) > blockStart {
			out[len(out)-1].last = true
		}
	}
	return out
}

// joinContinued joins line j and those a trailing backslash continues; it
// returns the command and the index of its last line.
func joinContinued(lines []string, j int) (string, int) {
	cmd := lines[j]
	for strings.HasSuffix(cmd, "\\") && j+1 < len(lines) {
		j++
		cmd = strings.TrimSuffix(cmd, "\\") + " " + strings.TrimSpace(lines[j])
	}
	return strings.TrimSpace(cmd), j
}

// heredoc finds a here-document: <<'EOF', <<"EOF" or <<EOF.
var heredoc = regexp.MustCompile(`<<-?\s*['"]?(\w+)['"]?`)

// comment is a trailing "  # ..." comment of a command line.
var comment = regexp.MustCompile(`\s+#\s.*$`)

func stripComment(cmd string) string {
	if strings.HasPrefix(strings.TrimSpace(cmd), "#") {
		return ""
	}
	return strings.TrimSpace(comment.ReplaceAllString(cmd, ""))
}

// helpExamples returns the examples of `hotcount --help`: the lines of its
// Examples section that start with "hotcount ", without the description
// after two or more spaces.
func helpExamples(t *testing.T, bin string) []example {
	t.Helper()
	out, err := exec.Command(bin, "--help").Output()
	if err != nil {
		t.Fatalf("hotcount --help: %v", err)
	}
	_, section, ok := strings.Cut(string(out), "\nExamples:\n")
	if !ok {
		t.Fatal("hotcount --help has no Examples section")
	}
	section, _, _ = strings.Cut(section, "\n\n")
	var exs []example
	for i, line := range strings.Split(section, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "hotcount ") {
			continue // the rest of a description
		}
		cmd := regexp.MustCompile(`\s{2,}`).Split(line, 2)[0]
		ex := example{where: fmt.Sprintf("hotcount --help, example line %d", i+1), cmd: cmd, fromHelp: true}
		for part, why := range helpSkips {
			if strings.Contains(cmd, part) {
				ex.skipWhy = why
			}
		}
		exs = append(exs, ex)
	}
	if len(exs) < 5 {
		t.Fatalf("found %d examples in hotcount --help", len(exs))
	}
	return exs
}

// runner runs the examples of one doc in its own folder.
type runner struct {
	t       *testing.T
	bin     string // folder of the hotcount binary
	dir     string
	env     []string
	addrs   map[string]string // address the doc names → the real one
	bg      []*background
	started map[string]bool // cluster folders brought up
}

// background is a long-running command (serve, proxy).
type background struct {
	where string
	cmd   *exec.Cmd
	out   *lockedBuffer
	done  chan error
	// stopped: stopOne has run (a doc's "kill %N", or the end).
	stopped bool
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newRunner(t *testing.T, bin string) *runner {
	r := &runner{t: t, bin: bin, dir: t.TempDir(), addrs: map[string]string{}, started: map[string]bool{}}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOTCOUNT_") && !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "GOMAXPROCS=") {
			r.env = append(r.env, kv)
		}
	}
	r.env = append(r.env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if err := os.Symlink(filepath.Join(bin, "hotcount"), filepath.Join(r.dir, "hotcount")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stop)
	return r
}

// rewrite maps what a doc names to what runs here: addresses of servers
// and clusters started before, cluster folders and ports.
func (r *runner) rewrite(cmd string) string {
	cmd = regexp.MustCompile(`--dir /tmp/([\w.-]+)`).ReplaceAllString(cmd, "--dir "+r.dir+"/$1")
	for doc, real := range r.addrs {
		cmd = strings.ReplaceAll(cmd, doc, real)
	}
	return cmd
}

var (
	clusterPort = regexp.MustCompile(`\bcluster up\b.*--port (\d+)`)
	clusterDir  = regexp.MustCompile(`--dir (\S+)`)
	isLong      = regexp.MustCompile(`(^|&& |\s)(\./)?hotcount (serve|proxy)\b`)
	listening   = regexp.MustCompile(`listening on (http|redis)://(\S+)`)
	adminOn     = regexp.MustCompile(`admin on http://(\S+)`)
	seeds       = regexp.MustCompile(`seeds: (\S+)`)
	goBuild     = regexp.MustCompile(`^go build -o hotcount (\S+)$`)
	killJob     = regexp.MustCompile(`^kill %(\d+)$`)
)

// run runs one example.
func (r *runner) run(ex example) {
	t := r.t
	if ex.skipWhy != "" {
		t.Logf("%s: skipped (%s): %s", ex.where, ex.skipWhy, ex.cmd)
		return
	}
	cmd := strings.TrimSpace(ex.cmd)
	// "go build -o hotcount ./cmd/hotcount && ./hotcount serve": the
	// build runs in the repository and writes the binary the test uses.
	if before, after, ok := strings.Cut(cmd, " && "); ok {
		if m := goBuild.FindStringSubmatch(before); m != nil {
			r.shell(ex.where, "go build -o "+filepath.Join(r.bin, "hotcount")+" "+m[1], root, nil)
			cmd = after
		}
	}
	if m := goBuild.FindStringSubmatch(cmd); m != nil {
		r.shell(ex.where, "go build -o "+filepath.Join(r.bin, "hotcount")+" "+m[1], root, nil)
		return
	}
	if isLong.MatchString(cmd) {
		// In a block, the shell waits for a command in the foreground:
		// the lines after serve or proxy would never run.
		if !ex.fromHelp && !ex.last && !strings.HasSuffix(cmd, "&") {
			t.Errorf("%s: %s runs in the foreground, so the lines after it in its block never run: end it with &", ex.where, cmd)
		}
		r.start(ex.where, strings.TrimSuffix(strings.TrimSpace(cmd), "&"))
		return
	}
	// "kill %N": the doc's shell stops its Nth background job (serve or
	// proxy, started with "&"): stop it with SIGTERM, expecting exit 0.
	if m := killJob.FindStringSubmatch(cmd); m != nil {
		n, _ := strconv.Atoi(m[1])
		if n < 1 || n > len(r.bg) {
			t.Fatalf("%s: %s: there are %d background commands", ex.where, cmd, len(r.bg))
		}
		r.stopOne(r.bg[n-1])
		return
	}
	docPort := ""
	if m := clusterPort.FindStringSubmatch(cmd); m != nil {
		docPort = m[1]
		cmd = strings.Replace(cmd, "--port "+docPort, "--port 0", 1)
	}
	cmd = r.rewrite(cmd)
	out := r.shell(ex.where, cmd, r.dir, ex.output)
	if docPort != "" {
		m := seeds.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("%s: cluster up printed no seeds:\n%s", ex.where, out)
		}
		r.addrs["127.0.0.1:"+docPort] = strings.Split(m[1], ",")[0]
		if d := clusterDir.FindStringSubmatch(cmd); d != nil {
			dir := d[1]
			r.started[dir] = true
			t.Cleanup(func() { _ = testenv.Down(dir) })
		}
	}
}

// mask replaces what changes from run to run.
func mask(s string) string {
	s = regexp.MustCompile(`"stale_ms":\d+`).ReplaceAllString(s, `"stale_ms":N`)
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		lines = append(lines, strings.TrimRight(l, " \t\r"))
	}
	return strings.Join(lines, "\n")
}

// shell runs cmd with bash in dir and checks its exit status and, when
// the doc shows one, its output; it returns the output.
func (r *runner) shell(where, cmd, dir string, want *string) string {
	t := r.t
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "-c", cmd)
	c.Dir, c.Env = dir, r.env
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	if err != nil {
		t.Fatalf("%s: %s: %v\nstdout:\n%s\nstderr:\n%s", where, cmd, err, stdout.String(), stderr.String())
	}
	if want != nil && mask(stdout.String()) != mask(*want) {
		t.Errorf("%s: %s\nthe doc shows:\n%s\nit printed:\n%s", where, cmd, *want, stdout.String())
	}
	return stdout.String()
}

// start runs serve or proxy in the background on free ports and waits
// until it listens.
func (r *runner) start(where, cmd string) {
	t := r.t
	docAddrs := map[string][]string{
		"serve": {"127.0.0.1:7070", "localhost:7070"},
		"proxy": {"127.0.0.1:6380", "localhost:6380"},
	}
	sub := "serve"
	if strings.Contains(cmd, "hotcount proxy") {
		sub = "proxy"
		cmd += " --resp-listen 127.0.0.1:0 --admin-listen 127.0.0.1:0"
	} else {
		cmd += " --listen 127.0.0.1:0"
	}
	cmd = r.rewrite(cmd)
	c := exec.Command("bash", "-c", "exec "+cmd)
	c.Dir, c.Env = r.dir, r.env
	out := &lockedBuffer{}
	c.Stdout, c.Stderr = out, out
	if err := c.Start(); err != nil {
		t.Fatalf("%s: %s: %v", where, cmd, err)
	}
	bg := &background{where: where, cmd: c, out: out, done: make(chan error, 1)}
	go func() { bg.done <- c.Wait() }()
	r.bg = append(r.bg, bg)
	deadline := time.Now().Add(time.Minute)
	for {
		if m := listening.FindStringSubmatch(out.String()); m != nil {
			for _, a := range docAddrs[sub] {
				r.addrs[a] = m[2]
			}
			if sub == "serve" {
				// The counter commands' default server is the doc's
				// 127.0.0.1:7070: here, the one just started.
				r.env = append(r.env, "HOTCOUNT_SERVER=http://"+m[2])
			}
			if a := adminOn.FindStringSubmatch(out.String()); a != nil {
				r.addrs["127.0.0.1:7071"] = a[1]
				r.addrs["localhost:7071"] = a[1]
			}
			if sub == "proxy" {
				// redis-cli -p 6380: the proxy's port.
				if _, port, err := net.SplitHostPort(m[2]); err == nil {
					r.addrs["-p 6380"] = "-p " + port
				}
			}
			return
		}
		select {
		case err := <-bg.done:
			bg.done <- err
			t.Fatalf("%s: %s ended before it listened (%v):\n%s", where, cmd, err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s did not listen within a minute:\n%s", where, cmd, out.String())
		}
	}
}

// stop stops the background commands with SIGTERM; each must exit 0.
func (r *runner) stop() {
	for _, bg := range r.bg {
		r.stopOne(bg)
	}
	r.bg = nil
}

// stopOne stops one background command with SIGTERM, once; it must exit 0.
func (r *runner) stopOne(bg *background) {
	if bg.stopped {
		return
	}
	bg.stopped = true
	_ = bg.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-bg.done:
		if err != nil {
			r.t.Errorf("%s: %s stopped with %v after SIGTERM:\n%s", bg.where, strings.Join(bg.cmd.Args, " "), err, bg.out.String())
		}
	case <-time.After(time.Minute):
		_ = bg.cmd.Process.Kill()
		r.t.Errorf("%s: %s did not stop within a minute of SIGTERM", bg.where, strings.Join(bg.cmd.Args, " "))
	}
}

// buildOnce builds the hotcount binary once for every doc.
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func hotcountBin(t *testing.T) string {
	buildOnce.Do(func() {
		if _, err := os.Stat(filepath.Join(binDir, "hotcount")); err == nil {
			return // the README's Quick start built it
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, "hotcount"), root+"/cmd/hotcount").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "hotcount-docsrun-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// TestDocsRun runs the README's Quick start, the examples of docs/cli.md
// and docs/proxy.md and those of `hotcount --help` (see the package
// documentation).
func TestDocsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the docs' examples against real servers and a cluster")
	}
	if _, err := testenv.RedisServer(); err != nil {
		t.Fatalf("redis-server is needed for the examples that start a cluster: %v", err)
	}
	for _, doc := range []string{"README.md", "docs/cli.md", "docs/proxy.md"} {
		t.Run(doc, func(t *testing.T) {
			bin := binDir // the README's Quick start builds it
			if doc != "README.md" {
				bin = hotcountBin(t)
			}
			r := newRunner(t, bin)
			exs := docBlocks(t, filepath.Join(root, doc))
			if len(exs) == 0 {
				t.Fatalf("%s has no examples", doc)
			}
			for _, ex := range exs {
				r.run(ex)
			}
		})
	}
	t.Run("hotcount --help", func(t *testing.T) {
		bin := hotcountBin(t)
		r := newRunner(t, bin)
		for _, ex := range helpExamples(t, filepath.Join(bin, "hotcount")) {
			r.run(ex)
		}
	})
}

// TestBlocksParsed checks the parsing of blocks, markers and help lines on
// a sample, so that a doc the parser misreads fails here first.
func TestBlocksParsed(t *testing.T) {
	md := "text\n\n```sh\n./hotcount cluster up --dir /tmp/hc --port 7100   # seeds\n./hotcount bench --redis 127.0.0.1:7100 \\\n  --key k\n```\n\n" +
		"<!-- docs-run: skip: needs root -->\n```sh\nsudo x\n```\n\n```console\n$ ./hotcount get --key k\n5\n$ curl x\n{\"a\":1}\n```\n\n```go\nnot run\n```\n"
	p := filepath.Join(t.TempDir(), "x.md")
	os.WriteFile(p, []byte(md), 0o644)
	exs := docBlocks(t, p)
	got := []string{}
	for _, e := range exs {
		s := e.cmd
		if e.skipWhy != "" {
			s += " [skip: " + e.skipWhy + "]"
		}
		if e.output != nil {
			s += " => " + *e.output
		}
		if e.last {
			s += " [last]"
		}
		got = append(got, s)
	}
	want := []string{
		"./hotcount cluster up --dir /tmp/hc --port 7100",
		"./hotcount bench --redis 127.0.0.1:7100  --key k [last]",
		"sudo x [skip: needs root] [last]",
		"./hotcount get --key k => 5",
		"curl x => {\"a\":1} [last]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("parsed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if mask("{\"stale_ms\":12}\n") != mask("{\"stale_ms\":0}") || mask("1") == mask("2") {
		t.Fatal("mask")
	}
}

var _ io.Writer = (*lockedBuffer)(nil)
