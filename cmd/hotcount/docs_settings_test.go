package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
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
		"resp_allow_config: true\n":  true,
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

var (
	// docDefault is a default the docs quote after a setting or a field
	// of the library's Config: "`buffer_hot_at`, default **8**",
	// "`Durability.CleanupInterval`, default 1 min".
	docDefault = regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_.]*)`([^`.;]{0,40}?)\\bdefault:?\\s+(?:\\*\\*)?`?([0-9][0-9,.]*(?:\\s?(?:ms|µs|s|min|h)\\b)?|\\./[a-z./-]+)")
	// docValue is a value right after a setting: "(`auto_n.hysteresis`, 30 s)".
	docValue = regexp.MustCompile("`([a-z_][a-z0-9_.]*)`, ([0-9][0-9,.]*(?:\\s?(?:ms|µs|s|min|h))?)\\)")
)

// sameValue reports whether the value a doc quotes is the default def of
// the schema: the same number, duration or text.
func sameValue(doc, def string) bool {
	doc = strings.ReplaceAll(strings.TrimSpace(doc), ",", "")
	if doc == def {
		return true
	}
	if d, err := time.ParseDuration(strings.ReplaceAll(strings.ReplaceAll(doc, " ", ""), "min", "m")); err == nil {
		want, err := time.ParseDuration(def)
		return err == nil && d == want
	}
	a, errA := strconv.ParseFloat(doc, 64)
	b, errB := strconv.ParseFloat(def, 64)
	return errA == nil && errB == nil && a == b
}

// TestDocsDefaults checks the defaults the docs quote beside a setting
// (`hot_rate`, default 1,000) or beside the library field it sets
// (`Durability.HealInterval`, `HealInterval`, `Config.ShipInterval`)
// against the schema's default, which the reference shows and the code
// applies.
func TestDocsDefaults(t *testing.T) {
	defOf := map[string]string{}
	for _, s := range settings {
		if s.def == "" {
			continue
		}
		defOf[s.name] = s.def
		if s.lib != "" {
			defOf[s.lib] = s.def
			defOf["Config."+s.lib] = s.def
			parts := strings.Split(s.lib, ".")
			if len(parts) > 1 {
				defOf[parts[len(parts)-1]] = s.def
			}
		}
	}
	checked := 0
	for _, f := range proseDocs(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(data), "\n", " ")
		rel := strings.TrimPrefix(f, "../../")
		for _, re := range []*regexp.Regexp{docDefault, docValue} {
			for _, m := range re.FindAllStringSubmatch(text, -1) {
				name, val := m[1], m[len(m)-1]
				def, ok := defOf[name]
				if !ok {
					continue
				}
				checked++
				if !sameValue(val, def) {
					t.Errorf("%s: `%s` is quoted with the default %q; the default is %s", rel, name, strings.TrimSpace(val), def)
				}
			}
		}
	}
	t.Logf("checked %d defaults", checked)
	if checked < 5 {
		t.Fatalf("checked only %d defaults in the docs", checked)
	}
}

// TestSameValue checks the comparison of quoted values with defaults.
func TestSameValue(t *testing.T) {
	for _, tc := range []struct {
		doc, def string
		want     bool
	}{
		{"1,000", "1000", true}, {"10,000 ", "10000", true}, {"8", "8", true}, {"30 s", "30s", true},
		{"1 min", "1m0s", true}, {"24 h", "24h0m0s", true}, {"500 ms", "500ms", true}, {"./hotcount-data", "./hotcount-data", true},
		{"2 s", "1s", false}, {"9", "8", false}, {"./data", "./hotcount-data", false},
	} {
		if got := sameValue(tc.doc, tc.def); got != tc.want {
			t.Errorf("sameValue(%q, %q) = %v", tc.doc, tc.def, got)
		}
	}
}
