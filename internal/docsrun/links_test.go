package docsrun

import (
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// markdownFiles lists the Markdown files of the repository, outside
// hidden folders (.git, .cache) and node_modules.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var (
	fence      = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```")
	codeSpan   = regexp.MustCompile("`[^`\n]*`")
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`(?m)^\s*\[[^\]]+\]:\s*(\S+)`)
	heading    = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// stripCode removes fenced blocks and code spans, whose brackets are not
// links.
func stripCode(s string) string {
	return codeSpan.ReplaceAllString(fence.ReplaceAllString(s, ""), "")
}

// slug is the anchor GitHub gives a heading: lower case, letters, digits,
// '-' and '_' kept, spaces as '-', the rest dropped.
func slug(h string) string {
	h = strings.ReplaceAll(h, "`", "")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors are the fragments a Markdown file offers: its headings' slugs
// (a repeated one as slug-1, slug-2...) and HTML anchors.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	for _, m := range htmlAnchor.FindAllStringSubmatch(text, -1) {
		out[m[1]] = true
	}
	return out
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + itoa(n%10)
}

// TestMarkdownLinks checks every relative link of every Markdown file: the
// file or folder it names exists and, for a #fragment in a Markdown file,
// a heading has it.
func TestMarkdownLinks(t *testing.T) {
	files := markdownFiles(t)
	if len(files) < 5 {
		t.Fatalf("found only %d Markdown files under %s", len(files), root)
	}
	cache := map[string]map[string]bool{}
	anchorsOf := func(p string) map[string]bool {
		if a, ok := cache[p]; ok {
			return a
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		cache[p] = anchors(string(data))
		return cache[p]
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := stripCode(string(data))
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
			targets = append(targets, m[1])
		}
		for _, m := range refLink.FindAllStringSubmatch(text, -1) {
			targets = append(targets, m[1])
		}
		rel, _ := filepath.Rel(root, f)
		for _, target := range targets {
			if u, err := url.Parse(target); err == nil && u.Scheme != "" {
				continue // http, https, mailto: not checked here
			}
			path, frag, _ := strings.Cut(target, "#")
			path, _ = url.PathUnescape(path)
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), filepath.FromSlash(path))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %s does not exist", rel, target, path)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[frag] {
				t.Errorf("%s: link %q: no heading with the anchor #%s", rel, target, frag)
			}
		}
	}
}

// TestSlugs checks the anchors against headings whose GitHub anchors are
// known.
func TestSlugs(t *testing.T) {
	for h, want := range map[string]string{
		"The self-healing view (durable mode)":               "the-self-healing-view-durable-mode",
		"HTTP API (`hotcount serve`)":                        "http-api-hotcount-serve",
		"Capacity: one key against capped nodes":             "capacity-one-key-against-capped-nodes",
		"Durable throughput against PostgreSQL's own ingest": "durable-throughput-against-postgresqls-own-ingest",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
	a := anchors("# A\n## A\n```\n# not a heading\n```\n<a name=\"x\"></a>\n")
	if !a["a"] || !a["a-1"] || a["not-a-heading"] || !a["x"] {
		t.Fatalf("anchors %v", a)
	}
}
