package docsrun

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// commandFlags returns the flags of every command and subcommand of the
// hotcount binary, as its --help prints them ("serve", "cluster up",
// "bench longtail").
func commandFlags(t *testing.T, bin string) map[string]map[string]bool {
	t.Helper()
	top, err := exec.Command(bin, "--help").Output()
	if err != nil {
		t.Fatalf("hotcount --help: %v", err)
	}
	section, _, _ := strings.Cut(strings.SplitN(string(top), "\nCommands:\n", 2)[1], "\n\n")
	var cmds []string
	for _, line := range strings.Split(section, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			cmds = append(cmds, f[0])
		}
	}
	if len(cmds) < 10 {
		t.Fatalf("found %d commands in hotcount --help", len(cmds))
	}
	cmds = append(cmds, "cluster up", "cluster down", "cluster status", "bench longtail")
	flagLine := regexp.MustCompile(`(?m)^\s+-{1,2}([a-z][a-z0-9-]*)\b`)
	out := map[string]map[string]bool{}
	for _, c := range cmds {
		help, err := exec.Command(bin, append(strings.Fields(c), "--help")...).Output()
		if err != nil {
			t.Fatalf("hotcount %s --help: %v", c, err)
		}
		out[c] = map[string]bool{"help": true, "h": true}
		if _, flags, ok := strings.Cut(string(help), "\nFlags:\n"); ok {
			flags, _, _ = strings.Cut(flags, "\nExamples:")
			for _, m := range flagLine.FindAllStringSubmatch(flags, -1) {
				out[c][m[1]] = true
			}
		}
	}
	return out
}

var (
	// hotcountCmd is a hotcount command line in a doc: what follows
	// "hotcount " up to the end of the code span or line.
	hotcountCmd = regexp.MustCompile(`\bhotcount ((?:cluster (?:up|down|status)|bench longtail|[a-z]+)\b[^` + "`" + `\n]*)`)
	// docFlag is a --flag in a command line.
	docFlag = regexp.MustCompile(`(?:^|[\s\[(|])--([a-z][a-z0-9-]*)`)
	// loneFlag is a code span that starts with a flag: `--rounds`,
	// `--resp-listen ADDR`.
	loneFlag = regexp.MustCompile("`--([a-z][a-z0-9-]*)[^`]*`")
)

// otherFlags are flags of other programs the docs quote alone, in a code
// span: scripts/redis-suite's, Redis's Tcl suite's, podman's,
// redis-benchmark's.
var otherFlags = map[string]bool{
	"tests": true, "keep": true, "skip": true, // scripts/redis-suite
	"host": true, "port": true, "singledb": true, "durable": true, "skiptest": true, // Redis's test_helper.tcl
	"runtime": true, "cgroup-manager": true, // podman
	"user": true, "tls": true, "cacert": true, "cert": true, "sni": true, // redis-benchmark
	"version": true, "help": true,
}

// TestDocsFlagsExist checks the flags of hotcount commands in README.md
// and docs/ (code blocks and code spans) against `hotcount <command>
// --help`: a flag after `hotcount serve` is one of serve's, one after
// `hotcount cluster up` one of cluster up's; a code span that starts with
// a flag (`--rounds`) names a flag of some command.
func TestDocsFlagsExist(t *testing.T) {
	flags := commandFlags(t, filepath.Join(hotcountBin(t), "hotcount"))
	any := map[string]bool{}
	for _, fs := range flags {
		for f := range fs {
			any[f] = true
		}
	}
	for _, l := range docLines(t) {
		rel, i, line := l.rel, l.i, l.text
		for _, m := range hotcountCmd.FindAllStringSubmatch(line, -1) {
			cmd := m[1]
			name := strings.Fields(cmd)[0]
			for _, sub := range []string{"cluster up", "cluster down", "cluster status", "bench longtail"} {
				if strings.HasPrefix(cmd, sub) {
					name = sub
				}
			}
			// A comment, a pipe into another program or a second
			// command ends this one.
			for _, end := range []string{"  #", " && ", "; ", " | "} {
				cmd, _, _ = strings.Cut(cmd, end)
			}
			fs, ok := flags[name]
			if !ok {
				// Prose ("hotcount absorbs ...") or the help; a
				// command line with flags names a command.
				if name != "help" && docFlag.MatchString(cmd) {
					t.Errorf("%s:%d: hotcount %s is no command of hotcount --help", rel, i+1, name)
				}
				continue
			}
			for _, fm := range docFlag.FindAllStringSubmatch(cmd, -1) {
				if !fs[fm[1]] {
					t.Errorf("%s:%d: hotcount %s has no flag --%s", rel, i+1, name, fm[1])
				}
			}
		}
		for _, m := range loneFlag.FindAllStringSubmatch(line, -1) {
			if !any[m[1]] && !otherFlags[m[1]] && !strings.HasSuffix(m[1], "-") {
				t.Errorf("%s:%d: no hotcount command has the flag --%s", rel, i+1, m[1])
			}
		}
	}
}

// loginFlags are the Redis login and TLS flags of the commands that reach
// Redis directly; docs/cli.md lists them once, below its table.
var loginFlags = []string{"redis-username", "redis-password-file", "redis-tls", "redis-tls-ca", "redis-tls-cert", "redis-tls-key", "redis-tls-server-name"}

// TestCLIGuideHasEveryFlag: the table of docs/cli.md shows every flag of
// every command in that command's row (serve's and proxy's are the
// settings of docs/configuration.md, which TestConfigReference keeps
// whole), and the text below it every Redis login and TLS flag.
func TestCLIGuideHasEveryFlag(t *testing.T) {
	flags := commandFlags(t, filepath.Join(hotcountBin(t), "hotcount"))
	data, err := os.ReadFile(filepath.Join(root, "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `hotcount ") {
			continue
		}
		cell := strings.SplitN(line, " | ", 2)[0]
		for _, part := range strings.Split(cell, "`, `") {
			part = strings.Trim(strings.TrimPrefix(part, "| "), "`")
			if !strings.HasPrefix(part, "hotcount ") {
				part = "hotcount " + part // `cluster status`
			}
			name := ""
			for c := range flags {
				if (strings.HasPrefix(part, "hotcount "+c+" ") || part == "hotcount "+c) && len(c) > len(name) {
					name = c
				}
			}
			if name == "" {
				// The help and the version, which are not commands
				// of the list; any other part names a command that
				// does not exist.
				if f := strings.Fields(part); len(f) < 2 || (f[1] != "help" && f[1] != "<command>" && f[1] != "--version" && f[1] != "-v") {
					t.Errorf("docs/cli.md: the table shows %q, which is no command of hotcount --help", part)
				}
				continue
			}
			if shown[name] == nil {
				shown[name] = map[string]bool{}
			}
			for _, m := range docFlag.FindAllStringSubmatch(part, -1) {
				shown[name][m[1]] = true
			}
		}
	}
	login := map[string]bool{}
	for _, f := range loginFlags {
		login[f] = true
		if !strings.Contains(string(data), "`--"+f+"`") {
			t.Errorf("docs/cli.md does not list the Redis flag --%s", f)
		}
	}
	for c, fs := range flags {
		if c == "serve" || c == "proxy" || len(fs) <= 2 {
			continue // settings, or no flags but -h and --help
		}
		if shown[c] == nil {
			t.Errorf("docs/cli.md has no row for hotcount %s", c)
			continue
		}
		for f := range fs {
			if f != "help" && f != "h" && !login[f] && !shown[c][f] {
				t.Errorf("docs/cli.md: the row of hotcount %s does not show --%s", c, f)
			}
		}
	}
}

// commandDefaults returns, for every command and subcommand, the default
// its --help shows for each flag that has one ("bench longtail" →
// "keys" → "200000"), quotes taken off.
func commandDefaults(t *testing.T, bin string) map[string]map[string]string {
	t.Helper()
	flagStart := regexp.MustCompile(`^\s+--([a-z][a-z0-9-]*)\b`)
	def := regexp.MustCompile(`\(default "?(.*?)"?\)$`)
	out := map[string]map[string]string{}
	for c := range commandFlags(t, bin) {
		help, err := exec.Command(bin, append(strings.Fields(c), "--help")...).Output()
		if err != nil {
			t.Fatalf("hotcount %s --help: %v", c, err)
		}
		out[c] = map[string]string{}
		_, flags, ok := strings.Cut(string(help), "\nFlags:\n")
		if !ok {
			continue
		}
		flags, _, _ = strings.Cut(flags, "\nExamples:")
		name := ""
		for _, line := range strings.Split(flags, "\n") {
			if m := flagStart.FindStringSubmatch(line); m != nil {
				name = m[1]
				continue
			}
			if m := def.FindStringSubmatch(strings.TrimSpace(line)); m != nil && name != "" {
				out[c][name] = m[1]
			}
		}
	}
	return out
}

// rowOption is one optional flag with a value in a row of docs/cli.md:
// "[--keys 200000]"; an option of alternatives ("[--n N | --n 1,2,4,8]")
// is not one.
var rowOption = regexp.MustCompile(`\[--([a-z][a-z0-9-]*) ([^\]\[|\s]+)\]`)

// placeholder is a value that stands for what the user gives: N, ADDRS, A.
var placeholder = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// sameDefault reports whether the value a doc shows is the default the
// help shows: the same text, or the same duration (10m and 10m0s).
func sameDefault(doc, help string) bool {
	if doc == help {
		return true
	}
	a, errA := time.ParseDuration(doc)
	b, errB := time.ParseDuration(help)
	return errA == nil && errB == nil && a == b
}

// TestCLIGuideDefaults: a value docs/cli.md's table shows for an optional
// flag ([--keys 200000], [--duration 10m]) is the default that command's
// --help shows for it, when the help shows one: the table reads as the
// defaults. A placeholder (N, ADDRS) and an option of alternatives are not
// looked at.
func TestCLIGuideDefaults(t *testing.T) {
	bin := filepath.Join(hotcountBin(t), "hotcount")
	defaults := commandDefaults(t, bin)
	data, err := os.ReadFile(filepath.Join(root, "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for i, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `hotcount ") {
			continue
		}
		cell := strings.SplitN(line, " | ", 2)[0]
		for _, part := range strings.Split(cell, "`, `") {
			part = strings.Trim(strings.TrimPrefix(part, "| "), "`")
			if !strings.HasPrefix(part, "hotcount ") {
				part = "hotcount " + part // `cluster status`
			}
			name := ""
			for c := range defaults {
				if (strings.HasPrefix(part, "hotcount "+c+" ") || part == "hotcount "+c) && len(c) > len(name) {
					name = c
				}
			}
			if name == "" || name == "serve" || name == "proxy" {
				continue // serve's and proxy's defaults are docs/configuration.md's
			}
			for _, m := range rowOption.FindAllStringSubmatch(strings.ReplaceAll(part, `\|`, "|"), -1) {
				flag, val := m[1], m[2]
				def, ok := defaults[name][flag]
				if !ok || placeholder.MatchString(val) {
					continue
				}
				checked++
				if !sameDefault(val, def) {
					t.Errorf("docs/cli.md:%d: hotcount %s [--%s %s]: the default is %s", i+1, name, flag, val, def)
				}
			}
		}
	}
	t.Logf("checked %d defaults", checked)
	if checked < 10 {
		t.Fatalf("checked only %d defaults in docs/cli.md", checked)
	}
}
