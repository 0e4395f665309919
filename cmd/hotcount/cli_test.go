package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/hotcount/hotcount"
)

func TestVersionLine(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123abc"}, {Key: "vcs.time", Value: "2026-12-02T19:50:35Z"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		bi       *debug.BuildInfo
		override string
		rev      string
		want     string
	}{
		{bi, "", "", "hotcount v1.2.3 (revision 0123abc (modified), 2026-12-02T19:50:35Z, go1.26.8)"},
		{bi, "v9", "", "hotcount v9 (revision 0123abc (modified), 2026-12-02T19:50:35Z, go1.26.8)"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "", "", "hotcount (devel) (revision unknown: no VCS stamp (not built in a git checkout, or with -buildvcs=false), go1.26.8)"},
		{nil, "", "", "hotcount (unknown) (no build information)"},
		// Stamped with -ldflags (scripts/image), built with -buildvcs=false.
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "v1.4.0", "4f72bc6", "hotcount v1.4.0 (revision 4f72bc6, go1.26.8)"},
		{bi, "v1.4.0", "4f72bc6", "hotcount v1.4.0 (revision 4f72bc6, go1.26.8)"},
		{nil, "v1.4.0", "4f72bc6", "hotcount v1.4.0 (revision 4f72bc6, no build information)"},
	} {
		if got := versionLine(tc.bi, tc.override, tc.rev); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// TestVersionFromGitCheckout builds the command in a git checkout of this
// repository (a clone sharing its objects, so that the build does not
// depend on how this working copy was made) and expects --version, -v and
// version to print the checkout's revision.
func TestVersionFromGitCheckout(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git not found: install it with `apt-get install -y git`")
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("not in a git checkout: %v", err)
	}
	clone := filepath.Join(t.TempDir(), "src")
	if out, err := exec.Command("git", "clone", "--quiet", "--shared", strings.TrimSpace(string(top)), clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	head, err := exec.Command("git", "-C", clone, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	rev := strings.TrimSpace(string(head))
	bin := filepath.Join(t.TempDir(), "hotcount")
	// Built as scripts/image builds the release binary (static,
	// -trimpath): the clone's own folder is then no part of the build
	// cache's keys, so its packages are compiled once, not again for every
	// fresh clone, and shared with the image's build.
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=true", "-o", bin, "./cmd/hotcount")
	build.Dir = clone
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, arg := range []string{"--version", "-v", "version"} {
		out, err := exec.Command(bin, arg).Output()
		if err != nil || !strings.Contains(string(out), "revision "+rev) || strings.Contains(string(out), "(modified)") {
			t.Errorf("hotcount %s: %v %q, want the revision %s", arg, err, out, rev)
		}
	}
}

// TestCLIConventions: for every command, --help prints usage, flags and
// examples on stdout (exit 0), and a bad flag or a usage error prints one
// line on stderr that starts with "hotcount: <command>: " (exit 2).
func TestCLIConventions(t *testing.T) {
	t.Setenv(envServer, "")
	t.Setenv(envClientToken, "")
	for _, name := range append(sortedCommands(), "cluster up", "cluster down", "cluster status") {
		args := strings.Fields(name)
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runCLI(append(args, "--help")...)
			if name != "version" && (code != exitOK || errOut != "" || !strings.Contains(out, "Usage:") || !strings.Contains(out, "Examples:")) {
				t.Errorf("--help: exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			if strings.Contains(out, "Flags:\n\n") || strings.HasSuffix(out, "Flags:\n") {
				t.Errorf("--help shows an empty Flags section: %q", out)
			}
			if name == "cluster" {
				return // a group: its subcommands are checked below
			}
			code, out, errOut = runCLI(append(args, "--no-such-flag")...)
			prefix := "hotcount: " + name + ": "
			if code != exitUsage || out != "" || !strings.HasPrefix(errOut, prefix) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("bad flag: exit %d, stdout %q, stderr %q; want one line starting %q", code, out, errOut, prefix)
			}
		})
	}
	// Usage errors name their command the same way.
	for _, args := range [][]string{
		{"incr"}, {"incr", "--key", "a", "--by", "0"}, {"get", "--key", "{x}"}, {"shards"}, {"resize", "--key", "a"},
		{"serve", "--mode", "slow"}, {"plan"}, {"simulate", "--nodes", "0"}, {"soak", "--duration", "0s"},
		{"rebuild"}, {"get", "--key", "a", "--token", "x", "--token-file", "y", "--server", "http://127.0.0.1:1"},
		{"get", "--key", "a", "--redis-tls"}, {"version", "extra"},
	} {
		code, _, errOut := runCLI(args...)
		prefix := "hotcount: " + args[0] + ": "
		if code != exitUsage || !strings.HasPrefix(errOut, prefix) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and one line starting %q", args, code, errOut, prefix)
		}
	}
	if code, out, _ := runCLI("help"); code != exitOK || !strings.Contains(out, "Examples:") || !strings.Contains(out, "HOTCOUNT_CLIENT_TOKEN") {
		t.Errorf("help: exit %d, stdout %q", code, out)
	}
	// docs/cli.md lists help as a command: help on it is the same help.
	for _, h := range []string{"help", "--help", "-h"} {
		if code, out, errOut := runCLI("help", h); code != exitOK || !strings.Contains(out, "Examples:") || errOut != "" {
			t.Errorf("help %s: exit %d, stdout %q, stderr %q", h, code, out, errOut)
		}
	}
}

// flagHelpLine is the line of help that names a flag.
var flagHelpLine = regexp.MustCompile(`^  --[a-z0-9-]+( [^ ]+)?$`)

// TestHelpNamesFlagsAsTyped: help lists flags as they are typed
// (--log-format, not -log-format), and serve and proxy name each flag's
// type as the schema has it (the flag package reads them as strings).
func TestHelpNamesFlagsAsTyped(t *testing.T) {
	for _, name := range append(sortedCommands(), "cluster up", "cluster down", "cluster status") {
		_, out, _ := runCLI(append(strings.Fields(name), "--help")...)
		_, flags, ok := strings.Cut(out, "\nFlags:\n")
		if !ok {
			continue // version, the cluster group
		}
		flags, _, _ = strings.Cut(flags, "\n\n")
		for _, line := range strings.Split(flags, "\n") {
			if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") {
				t.Errorf("%s --help: %q: a flag is typed with two dashes", name, line)
			}
			// "--name" or "--name TYPE": the flag package takes a
			// `quoted` word of the usage for TYPE, so a usage that
			// quotes a command would show it here.
			if strings.HasPrefix(line, "  --") && !flagHelpLine.MatchString(line) {
				t.Errorf("%s --help: %q: want --name or --name TYPE (one word)", name, line)
			}
		}
	}
	for _, cmd := range []string{"serve", "proxy"} {
		_, out, _ := runCLI(cmd, "--help")
		for _, want := range []string{"  --auto-n-max-n int\n", "  --flush-interval duration\n", "  --mode fast|durable\n", "  --redis host:port,...\n", "  --buffered\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s --help lacks %q", cmd, want)
			}
		}
	}
}

// TestSubcommandHelp: a command of two words has its own summary and
// examples, and its group's help names it.
func TestSubcommandHelp(t *testing.T) {
	for _, name := range []string{"bench longtail", "cluster up", "cluster down", "cluster status"} {
		code, out, _ := runCLI(append(strings.Fields(name), "--help")...)
		group := commands[strings.Fields(name)[0]].summary
		first, _, _ := strings.Cut(out, "\n")
		if code != exitOK || strings.Contains(first, group) || !strings.Contains(out, "Examples:\n  hotcount "+name) {
			t.Errorf("%s --help: exit %d, first line %q (the group's summary is %q); want its own summary and examples", name, code, first, group)
		}
	}
	// `hotcount help NAME` prints what `hotcount NAME --help` prints,
	// for a command of two words too.
	for _, name := range []string{"bench longtail", "cluster up", "cluster down", "cluster status", "cluster", "bench", "serve"} {
		code, out, _ := runCLI(append([]string{"help"}, strings.Fields(name)...)...)
		_, want, _ := runCLI(append(strings.Fields(name), "--help")...)
		if code != exitOK || out != want {
			t.Errorf("help %s: exit %d, first line %q; want what %s --help prints", name, code, strings.SplitN(out, "\n", 2)[0], name)
		}
	}
	if _, out, _ := runCLI("bench", "--help"); !strings.Contains(out, "hotcount bench longtail") {
		t.Errorf("bench --help does not name bench longtail")
	}
}

func sortedCommands() []string {
	var out []string
	for n := range commands {
		out = append(out, n)
	}
	return out
}

// TestShardsSuggestsRebalance: a report with collisions says how to move
// them back (the report comes from a stand-in server: collisions need a
// slot migration on a real cluster).
func TestShardsSuggestsRebalance(t *testing.T) {
	report := `{"key":"likes:post:1","n":4,"read_n":4,"epoch":2,"value":9,"distinct_nodes":2,"collisions":2,
		"shards":[{"label":"0","key":"{likes:post:1#0}","slot":1,"node":"a:1","value":9}]}`
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, report)
	}))
	defer ts.Close()
	t.Setenv(envClientToken, "")
	code, out, errOut := runCLI("shards", "--server", ts.URL, "--key", "likes:post:1")
	if code != exitOK || !strings.Contains(out, "collisions=2") || !strings.Contains(out, "--key likes:post:1 --rebalance") {
		t.Fatalf("shards: exit %d, %q %s", code, out, errOut)
	}
	report = strings.Replace(report, `"collisions":2`, `"collisions":0`, 1)
	if _, out, _ := runCLI("shards", "--server", ts.URL, "--key", "likes:post:1"); strings.Contains(out, "rebalance") {
		t.Fatalf("a report without collisions suggests a rebalance: %q", out)
	}
	if _, out, _ := runCLI("shards", "--server", ts.URL, "--key", "it's", "--json"); strings.Contains(out, "rebalance") {
		t.Fatalf("--json output carries the hint: %q", out)
	}
}

// TestErrorsNameFlagsAsTyped: a bad flag's message names it with two
// dashes, as it is typed and as help lists it (the flag package writes
// one), and a usage error says what to give.
func TestErrorsNameFlagsAsTyped(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"incr", "--key"}, "flag needs an argument: --key"},
		{[]string{"incr", "--key", "a", "--by", "x"}, `invalid value "x" for flag --by`},
		{[]string{"incr", "--key", "a", "--by", "-x"}, `invalid value "-x" for flag --by`},
		{[]string{"get", "--bogus"}, "flag provided but not defined: --bogus"},
		{[]string{"get", "--json=maybe"}, "for --json"},
		{[]string{"resize", "--key", "a"}, "give --n N (1..1024) or --auto"},
		{[]string{"resize", "--key", "a", "--n", "0"}, "--n must be 1..1024, got 0"},
		{[]string{"get", "--key", "a", "--redis", "127.0.0.1:1", "--token", "t"}, "--token and --token-file are for --server"},
		{[]string{"incr", "--key", "a", "--redis", "127.0.0.1:1", "--token-file", "f"}, "--token and --token-file are for --server"},
	} {
		code, _, errOut := runCLI(tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestHelpEnvironmentNamesItsCommands: the Environment section of
// `hotcount help` names, for $HOTCOUNT_SERVER, $HOTCOUNT_REDIS and
// $HOTCOUNT_REDIS_PASSWORD, every command whose own help says it reads
// the variable.
func TestHelpEnvironmentNamesItsCommands(t *testing.T) {
	_, top, _ := runCLI("help")
	_, env, ok := strings.Cut(top, "\nEnvironment:\n")
	if !ok {
		t.Fatal("hotcount help has no Environment section")
	}
	// entry returns the lines of a variable's entry: its own and the
	// indented lines that go on with it.
	entry := func(name string) string {
		var out []string
		in := false
		for _, line := range strings.Split(env, "\n") {
			switch {
			case strings.HasPrefix(line, "  "+name+" ") || strings.HasPrefix(line, "  "+name+","):
				in = true
			case strings.HasPrefix(line, "  HOTCOUNT_"):
				in = false
			}
			if in {
				out = append(out, line)
			}
		}
		return strings.Join(out, " ")
	}
	for _, v := range []string{envServer, envRedis, envRedisPass} {
		e := entry(v)
		if e == "" {
			t.Errorf("hotcount help: no entry for %s", v)
			continue
		}
		for _, name := range sortedCommands() {
			if name == "serve" || name == "proxy" {
				continue // the settings' variables, named as such
			}
			_, out, _ := runCLI(name, "--help")
			if regexp.MustCompile(`\$`+v+`\b`).MatchString(out) && !regexp.MustCompile(`\b`+name+`\b`).MatchString(e) {
				t.Errorf("hotcount help: the entry of %s does not name %s, whose help reads it: %q", v, name, e)
			}
		}
	}
}

// TestShardsJSONHelpNamesEveryField: the help of shards --json names every
// member of the report it prints (hotcount.ShardReport and its shards).
func TestShardsJSONHelpNamesEveryField(t *testing.T) {
	_, help, _ := runCLI("shards", "--help")
	report := reflect.TypeFor[hotcount.ShardReport]()
	shards, ok := report.FieldByName("Shards")
	if !ok {
		t.Fatal("hotcount.ShardReport has no field Shards")
	}
	for _, typ := range []reflect.Type{report, shards.Type.Elem()} {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			if !strings.Contains(help, `"`+name+`"`) {
				t.Errorf("shards --help does not name the member %q of its JSON (%s.%s)", name, typ.Name(), f.Name)
			}
		}
	}
}
