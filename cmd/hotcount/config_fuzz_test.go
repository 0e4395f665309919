package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary YAML files and flag values to Load: it never
// panics, every failure wraps errInvalidConfig, and every accepted configuration
// is valid and has its defaults filled in.
func FuzzLoad(f *testing.F) {
	for _, seed := range []struct{ yaml, mode, listen string }{
		{"listen: 127.0.0.1:7070\nmode: fast\n", "", ""},
		{"namespaces:\n  - prefix: likes:\n    mode: durable\n    n: 16\n    buffered: true\n", "durable", ""},
		{"redis: [a:1, b:2]\nunknown: 1\n", "", "127.0.0.1:0"},
		{"---\n---\n", "slow", "nohost"},
		{"namespaces: [{prefix: '', n: -1}]", "", ""},
		{"\x00\xff", "", ":"},
	} {
		f.Add(seed.yaml, seed.mode, seed.listen)
	}
	f.Fuzz(func(t *testing.T, yamlText, mode, listen string) {
		path := filepath.Join(t.TempDir(), "hotcount.yaml")
		if err := os.WriteFile(path, []byte(yamlText), 0o600); err != nil {
			t.Fatal(err)
		}
		flags := map[string]string{setFile: path}
		if mode != "" {
			flags[setMode] = mode
		}
		if listen != "" {
			flags[setListen] = listen
		}
		cfg, err := loadConfig(flags, func(string) (string, bool) { return "", false })
		if err != nil {
			if !errors.Is(err, errInvalidConfig) {
				t.Fatalf("error %v does not wrap errInvalidConfig", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted configuration is invalid: %v", err)
		}
		if cfg.Listen == "" || cfg.Mode == "" {
			t.Fatalf("defaults not applied: %+v", cfg)
		}
	})
}
