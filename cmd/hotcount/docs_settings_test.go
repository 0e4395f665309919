package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// proseDocs are the Markdown files whose settings are checked against the
// schema: the README and docs/, the generated reference and the dated
// benchmark log aside.
func proseDocs(t *testing.T) []string {
	t.Helper()
	files := []string{"../../README.md"}
	more, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range more {
		if b := filepath.Base(f); b != "benchmarks-log.md" && b != "configuration.md" {
			files = append(files, f)
		}
	}
	return files
}

// settingNames are every name the file knows: the settings (auto_n's by
// their name in the file too) and the fields of namespaces, tokens and
// peers.
func settingNames() []string {
	var names []string
	for _, s := range settings {
		if s.noFile {
			continue
		}
		names = append(names, s.name)
		if _, sub, ok := strings.Cut(s.name, "."); ok {
			names = append(names, sub)
		}
	}
	names = append(names, setAutoN)
	for _, fs := range [][]nsField{nsFields, tokenFields, peerFields} {
		for _, f := range fs {
			names = append(names, f.name)
		}
	}
	return names
}

var (
	// yamlBlock is a ```yaml block of a doc.
	yamlBlock = regexp.MustCompile("(?ms)^```ya?ml\n(.*?)^```")
	// yamlSpan is a code span holding one setting with its value, as a
	// doc writes one: `buffered: true`, `auto_n: {budget: 20000}`.
	yamlSpan = regexp.MustCompile("`([a-z][a-z0-9_]*: [^`<]+)`")
	// snakeSpan is a code span holding one snake_case word.
	snakeSpan = regexp.MustCompile("`([a-z][a-z0-9]*(?:_[a-z0-9]+)+)`")
	// fileValue is the value of a *_file key.
	fileValue = regexp.MustCompile(`(_file:\s*)[^\s,}\]]+`)
)

// acceptsYAML reports whether the file body is a valid config file of
// serve or of proxy, or, for one setting, a valid field of a namespace,
// a token or a peer; it returns the error of serve's loader otherwise.
func acceptsYAML(t *testing.T, body string) error {
	t.Helper()
	// Files a doc names (password_file: /etc/...) are not on this
	// machine: each *_file value becomes a file that exists.
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	body = fileValue.ReplaceAllString(body, "${1}"+secret)
	var first error
	for _, try := range []struct {
		cmd  cmdSet
		body string
	}{
		{cmdServe, body},
		{cmdProxy, body},
		{cmdProxy, "namespaces:\n  - {prefix: \"docs:\", " + strings.TrimSpace(body) + "}\n"},
		{cmdServe, "tokens:\n  - {name: docs, token: x, " + strings.TrimSpace(body) + "}\n"},
		{cmdServe, "redis: [\"10.0.0.1:7000\"]\nregion: eu\npeers:\n  - {name: us, redis: [\"10.0.0.2:7000\"], " + strings.TrimSpace(body) + "}\n"},
	} {
		flags := map[string]string{setFile: writeFile(t, try.body)}
		if try.cmd == cmdProxy {
			flags[setRedis] = "127.0.0.1:1"
		}
		_, err := loadConfigFor(try.cmd, flags, env(nil))
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// TestDocsSettings checks the settings the docs show outside the
// generated reference: every ```yaml block is a config file serve or
// proxy accepts, every `key: value` span is a setting (or a field of a
// namespace, token or peer) with a value its loader accepts, and a
// snake_case word in a code span that is not a setting is not a near miss
// of one (`no_cold_start` for `cold_start`, `bufer_hot_at`).
func TestDocsSettings(t *testing.T) {
	names := settingNames()
	known := map[string]bool{}
	for _, n := range names {
		known[n] = true
	}
	for _, f := range proseDocs(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		rel := strings.TrimPrefix(f, "../../")
		lineOf := func(i int) int { return strings.Count(text[:i], "\n") + 1 }
		for _, m := range yamlBlock.FindAllStringSubmatchIndex(text, -1) {
			if err := acceptsYAML(t, text[m[2]:m[3]]); err != nil {
				t.Errorf("%s:%d: the YAML block is not a valid config file: %v", rel, lineOf(m[0]), err)
			}
		}
		for _, m := range yamlSpan.FindAllStringSubmatchIndex(text, -1) {
			span := text[m[2]:m[3]]
			key, _, _ := strings.Cut(span, ":")
			if key == "hotcount" {
				continue // an error message: `hotcount: <command>: ...`
			}
			if err := acceptsYAML(t, span+"\n"); err != nil {
				t.Errorf("%s:%d: `%s` is not a setting the loader accepts: %v", rel, lineOf(m[0]), span, err)
			}
		}
		for _, m := range snakeSpan.FindAllStringSubmatchIndex(text, -1) {
			word := text[m[2]:m[3]]
			if known[word] || strings.HasPrefix(word, "hotcount_") || nearMissOK[word] {
				continue
			}
			if near := nearest(word, names); near != "" {
				t.Errorf("%s:%d: `%s` is not a setting (did you mean `%s`?)", rel, lineOf(m[0]), word, near)
			}
		}
	}
}

// nearMissOK are snake_case words of the docs that are close to a setting
// but name something else.
var nearMissOK = map[string]bool{}

// TestDocsSettingsChecker checks the checks on spans known to be good and
// bad.
func TestDocsSettingsChecker(t *testing.T) {
	for body, ok := range map[string]bool{
		"buffered: true\n":           true,
		"auto_n: {budget: 20000}\n":  true,
		"reply: exact\n":             true, // a namespace's
		"scopes: [read, write]\n":    true, // a token's
		"password_file: /x\n":        true, // a peer's
		"resp_allow_flush: true\n":   true,
		"no_cold_start: true\n":      false,
		"buffered: maybe\n":          false,
		"auto_n: {budgte: 20000}\n":  false,
		"log_format: xml\n":          false,
		"listen: 127.0.0.1:7070\n":   true,
		"resp_listen: 127.0.0.1:1\n": true,
	} {
		err := acceptsYAML(t, body)
		if (err == nil) != ok {
			t.Errorf("acceptsYAML(%q) = %v, want ok=%v", body, err, ok)
		}
		if err != nil && !errors.Is(err, errInvalidConfig) {
			t.Errorf("acceptsYAML(%q) = %v, not an errInvalidConfig", body, err)
		}
	}
	if near := nearest("no_cold_start", settingNames()); near != "cold_start" {
		t.Errorf("nearest(no_cold_start) = %q, want cold_start", near)
	}
}
