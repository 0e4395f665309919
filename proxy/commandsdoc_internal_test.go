package proxy

import (
	"os"
	"strings"
	"testing"
)

// docSection returns the text of the "## title" section of the Markdown
// file at path, up to the next "## " heading.
func docSection(t *testing.T, path, title string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", path, title)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	return sec
}

// TestRefusedCommandsDocumented: the Refused section of
// docs/proxy-commands.md names every command the proxy refuses by name
// (the subscribe family as `SUBSCRIBE` and friends), so that a refusal
// added to the code is not left out of the page.
func TestRefusedCommandsDocumented(t *testing.T) {
	sec := docSection(t, "../docs/proxy-commands.md", "Refused")
	for _, name := range refusedNames {
		want := "`" + strings.ToUpper(name) + "`"
		if strings.HasSuffix(name, "subscribe") {
			want = "`SUBSCRIBE` and friends"
		}
		if !strings.Contains(sec, want) {
			t.Errorf("docs/proxy-commands.md, Refused: the proxy refuses %s, the page does not name it (%s)", strings.ToUpper(name), want)
		}
	}
}
