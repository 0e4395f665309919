package proxy_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/proxy"
)

// commandsDoc returns the "## title" section of docs/proxy-commands.md.
func commandsDoc(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile("../docs/proxy-commands.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("docs/proxy-commands.md has no section %q", title)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	return sec
}

// docCommand is a command name in a code span of the page: `INCR`,
// `SET <integer>`, `CONFIG SET`, `CLIENT TRACKING`.
var docCommand = regexp.MustCompile("`([A-Z][A-Z_-]*(?: [A-Z][A-Z_-]*| <integer>)?)`")

// TestCommandsDocMatchesProxy checks docs/proxy-commands.md against a
// proxy in front of a real cluster: the commands the page says counter
// keys accept are those the proxy's refusal lists; the CLIENT subcommands
// the page says the proxy answers are those of its CLIENT HELP; every
// command the Refused section names (and a CLIENT or CLUSTER subcommand
// not listed) gets the proxy's own -ERR.
func TestCommandsDocMatchesProxy(t *testing.T) {
	p := uniq(t)
	e := startProxy(t, []hotcount.Namespace{{Prefix: p + "c:"}}, proxy.Config{})
	r := dialRaw(t, e.addr)

	t.Run("counter keys", func(t *testing.T) {
		sec := commandsDoc(t, "Counter keys")
		list, _, ok := strings.Cut(sec, "Anything else naming")
		if !ok {
			t.Fatal("the Counter keys section has no \"Anything else naming\" sentence")
		}
		var doc []string
		for _, m := range docCommand.FindAllStringSubmatch(list, -1) {
			doc = append(doc, m[1])
		}
		reply := r.do("APPEND", p+"c:k", "x")
		_, accepted, ok := strings.Cut(strings.TrimSpace(reply), "counter keys accept ")
		if !ok {
			t.Fatalf("APPEND on a counter key: %q", reply)
		}
		code := strings.Split(accepted, ", ")
		slices.Sort(doc)
		slices.Sort(code)
		if !slices.Equal(doc, code) {
			t.Errorf("the page says counter keys accept %v; the proxy says %v", doc, code)
		}
	})

	t.Run("CLIENT", func(t *testing.T) {
		sec := commandsDoc(t, "Keyless commands")
		var doc []string
		if m := regexp.MustCompile("`CLIENT ([A-Z/-]+)`").FindStringSubmatch(sec); m != nil {
			doc = strings.Split(m[1], "/")
		}
		for _, m := range regexp.MustCompile("`CLIENT ([A-Z-]+) ").FindAllStringSubmatch(sec, -1) {
			doc = append(doc, m[1]) // `CLIENT UNBLOCK id [TIMEOUT|ERROR]`
		}
		var code []string
		for i, line := range strings.Split(strings.TrimSpace(r.do("CLIENT", "HELP")), "\r\n") {
			if i < 2 {
				continue // the array header and the title
			}
			code = append(code, strings.Fields(strings.TrimPrefix(line, "+"))[0])
		}
		slices.Sort(doc)
		slices.Sort(code)
		if !slices.Equal(doc, code) {
			t.Errorf("the page says the proxy answers CLIENT %v; its CLIENT HELP lists %v", doc, code)
		}
	})

	t.Run("refused", func(t *testing.T) {
		sec := commandsDoc(t, "Refused")
		// Arguments a command needs before the proxy looks at its name.
		args := map[string][]string{
			"CLIENT TRACKING": {"on"}, "CONFIG SET": {"maxmemory", "0"},
			"CLUSTER": {"RESET"}, "CLIENT": {"KILL", "ID", "1"},
		}
		checked := 0
		for _, m := range docCommand.FindAllStringSubmatch(sec, -1) {
			name := m[1]
			if name == "PUBLISH" {
				continue // "PUBLISH works"
			}
			cmd := append(strings.Fields(name), args[name]...)
			reply := r.do(cmd...)
			checked++
			if !strings.HasPrefix(reply, "-ERR") || !strings.Contains(reply, "hotcount proxy") {
				t.Errorf("the page says the proxy refuses %s; %v answered %q", name, cmd, reply)
			}
			if strings.Contains(name, " ") && !strings.Contains(reply, name) {
				// FUNCTION LIST is served: the refusal of FUNCTION
				// KILL must say which subcommand it refuses.
				t.Errorf("%v: the refusal does not name %s: %q", cmd, name, reply)
			}
		}
		for _, sub := range []string{"CLIENT", "CLUSTER"} {
			if !strings.Contains(sec, "`"+sub+"` subcommands other than those above") {
				t.Errorf("the Refused section does not say that other %s subcommands are refused", sub)
			}
		}
		if checked < 30 {
			t.Fatalf("checked only %d refused commands", checked)
		}
	})
}
