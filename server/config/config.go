// Package config loads the settings of `hotcount serve` from four sources,
// in increasing precedence: built-in defaults, a YAML file, environment
// variables and command-line flags.
//
// Every setting has one name used by all sources: the flag --NAME, the
// environment variable HOTCOUNT_NAME (upper case) and the YAML field NAME.
// The file itself is named by --config or HOTCOUNT_CONFIG. The YAML is
// decoded strictly (an unknown field is an error) and may also list
// per-prefix namespaces, which only the file can set. After merging, the
// result is validated as a whole; every error wraps ErrInvalid and names
// the setting and the source it came from.
package config

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hotcount/hotcount"
)

// AutoN configures automatic N: grow the sub-counters of a key whose
// cluster-wide write rate per sub-counter passes Budget, fold back after it
// stays cool for Hysteresis. Zero fields mean the library's defaults
// (10,000 writes/s, at most 64, 30 s).
type AutoN struct {
	Budget     float64       `yaml:"budget"`
	MaxN       int           `yaml:"max_n"`
	Hysteresis time.Duration `yaml:"hysteresis"`
}

// Defaults.
const (
	// DefaultListen is the address served when none is given: loopback only.
	DefaultListen = "127.0.0.1:7070"
	// DefaultData is the durability folder of the embedded default.
	DefaultData = "./hotcount-data"
	// DefaultMode is the durability mode of keys no namespace names.
	DefaultMode = "fast"
	// DefaultRESPListen is where `hotcount proxy` serves the Redis
	// protocol: loopback only.
	DefaultRESPListen = "127.0.0.1:6380"
	// DefaultAdminListen is the HTTP admin port of `hotcount proxy`
	// (/metrics, /healthz, /readyz); "off" turns it off.
	DefaultAdminListen = "127.0.0.1:7071"
)

// ErrInvalid is wrapped by every configuration error.
var ErrInvalid = errors.New("hotcount: invalid configuration")

// Setting names shared by flags (--NAME), environment (HOTCOUNT_NAME) and
// the YAML file (NAME).
const (
	Listen   = "listen"
	Redis    = "redis"
	Postgres = "postgres"
	Data     = "data"
	Mode     = "mode"
	Token    = "token"
	File     = "config"
	// The settings of `hotcount proxy`.
	RESPListen   = "resp_listen"
	AdminListen  = "admin_listen"
	RESPPassword = "resp_password"
)

// Names lists the settings that flags and environment variables may set.
var Names = []string{Listen, Redis, Postgres, Data, Mode, Token, File, RESPListen, AdminListen, RESPPassword}

// Config is the merged configuration of `hotcount serve`.
type Config struct {
	// Listen is the host:port to serve on; port 0 picks a free port.
	Listen string `yaml:"listen"`
	// Redis lists Redis seed addresses; empty means the embedded store.
	Redis []string `yaml:"redis"`
	// Postgres is the URL of the PostgreSQL durable store; empty means the
	// SQLite file in Data.
	Postgres string `yaml:"postgres"`
	// Data is the folder of the SQLite durable store (when Postgres is
	// empty).
	Data string `yaml:"data"`
	// Mode is the durability mode of keys no namespace names: fast or
	// durable.
	Mode string `yaml:"mode"`
	// Token, when set, is the bearer token the write endpoints require.
	Token string `yaml:"token"`
	// Namespaces override settings per key prefix (longest prefix wins).
	Namespaces []Namespace `yaml:"namespaces"`
	// AutoN, when present, turns automatic N on (file only).
	AutoN *AutoN `yaml:"auto_n"`
	// RESPListen is the host:port `hotcount proxy` serves Redis clients on.
	RESPListen string `yaml:"resp_listen"`
	// AdminListen is the host:port of the proxy's HTTP admin port, or
	// "off".
	AdminListen string `yaml:"admin_listen"`
	// RESPPassword, when set, is the password Redis clients of the proxy
	// must AUTH with (not a Redis credential).
	RESPPassword string `yaml:"resp_password"`

	// Sources says where each setting came from: "flag", "env", "file" or
	// "default"; for messages.
	Sources map[string]string `yaml:"-"`
}

// Namespace holds the settings of keys that start with Prefix.
type Namespace struct {
	// Prefix selects keys; non-empty and unique.
	Prefix string `yaml:"prefix"`
	// Mode is fast or durable; empty means the Config's Mode.
	Mode string `yaml:"mode"`
	// N is the number of sub-counters; 0 means the library default.
	N int `yaml:"n"`
	// Buffered turns process-local delta buffering on; nil means the
	// library default.
	Buffered *bool `yaml:"buffered"`
	// FlushInterval is the buffer flush interval ("500ms"); 0 means the
	// library default.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// ReadCacheTTL is how long a summed read is cached ("1s"); 0 means the
	// library default.
	ReadCacheTTL time.Duration `yaml:"read_cache_ttl"`
	// Reply is what `hotcount proxy` answers to INCR on the namespace's
	// keys: "estimate" (the default) or "exact" (a fresh summed read).
	Reply string `yaml:"reply"`
}

// Load merges defaults, the YAML file, the environment and flags. flags
// holds the flags that were set on the command line (name → value, names
// from Names); lookupEnv is os.LookupEnv or a fake.
func Load(flags map[string]string, lookupEnv func(string) (string, bool)) (Config, error) {
	for name := range flags {
		if !known(name) {
			return Config{}, fmt.Errorf("%w: unknown setting %q", ErrInvalid, name)
		}
	}
	get := func(name string) (string, string, bool) {
		if v, ok := flags[name]; ok {
			return v, "flag --" + name, true
		}
		if v, ok := lookupEnv(EnvName(name)); ok && v != "" {
			return v, "env " + EnvName(name), true
		}
		return "", "", false
	}
	var cfg Config
	cfg.Sources = map[string]string{}
	if path, src, ok := get(File); ok {
		if err := readFile(path, &cfg); err != nil {
			return Config{}, fmt.Errorf("%w: %s (from %s): %v", ErrInvalid, path, src, err)
		}
		fileSrc := "file " + path
		for name, set := range map[string]bool{Listen: cfg.Listen != "", Redis: len(cfg.Redis) > 0,
			Postgres: cfg.Postgres != "", Data: cfg.Data != "", Mode: cfg.Mode != "", Token: cfg.Token != "",
			RESPListen: cfg.RESPListen != "", AdminListen: cfg.AdminListen != "", RESPPassword: cfg.RESPPassword != ""} {
			if set {
				cfg.Sources[name] = fileSrc
			}
		}
		cfg.Sources[File] = src
	}
	for _, name := range Names {
		v, src, ok := get(name)
		if !ok || name == File {
			continue
		}
		cfg.Sources[name] = src
		switch name {
		case Listen:
			cfg.Listen = v
		case Redis:
			cfg.Redis = SplitList(v)
		case Postgres:
			cfg.Postgres = v
		case Data:
			cfg.Data = v
		case Mode:
			cfg.Mode = v
		case Token:
			cfg.Token = v
		case RESPListen:
			cfg.RESPListen = v
		case AdminListen:
			cfg.AdminListen = v
		case RESPPassword:
			cfg.RESPPassword = v
		}
	}
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// EnvName returns the environment variable of a setting: HOTCOUNT_NAME.
func EnvName(name string) string { return "HOTCOUNT_" + strings.ToUpper(name) }

func known(name string) bool {
	for _, n := range Names {
		if n == name {
			return true
		}
	}
	return false
}

// readFile decodes the YAML file at path into cfg, strictly.
func readFile(path string, cfg *Config) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file sets nothing
		}
		return err
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document")
	}
	return nil
}

func (c *Config) applyDefaults() {
	def := func(name string, field *string, v string) {
		if *field == "" {
			*field = v
			c.Sources[name] = "default"
		}
	}
	def(Listen, &c.Listen, DefaultListen)
	def(Mode, &c.Mode, DefaultMode)
	def(RESPListen, &c.RESPListen, DefaultRESPListen)
	def(AdminListen, &c.AdminListen, DefaultAdminListen)
	if c.Postgres == "" {
		def(Data, &c.Data, DefaultData)
	}
}

// Validate checks a merged Config.
func (c *Config) Validate() error {
	if a := c.AutoN; a != nil && (a.Budget < 0 || a.MaxN < 0 || a.MaxN > hotcount.MaxN || a.Hysteresis < 0) {
		return fmt.Errorf("%w: auto_n: budget and hysteresis must not be negative, max_n must be 0..%d", ErrInvalid, hotcount.MaxN)
	}
	bad := func(name, format string, args ...any) error {
		where := ""
		if src := c.Sources[name]; src != "" {
			where = " (from " + src + ")"
		}
		return fmt.Errorf("%w: %s%s: %s", ErrInvalid, name, where, fmt.Sprintf(format, args...))
	}
	if err := checkHostPort(c.Listen); err != nil {
		return bad(Listen, "%v", err)
	}
	if err := checkHostPort(c.RESPListen); err != nil {
		return bad(RESPListen, "%v", err)
	}
	if c.AdminListen != "off" {
		if err := checkHostPort(c.AdminListen); err != nil {
			return bad(AdminListen, "%v (or off)", err)
		}
	}
	if strings.ContainsAny(c.RESPPassword, "\r\n") {
		return bad(RESPPassword, "must not contain line breaks")
	}
	for _, a := range c.Redis {
		if err := checkHostPort(a); err != nil {
			return bad(Redis, "%v", err)
		}
	}
	if c.Postgres != "" {
		if c.Data != "" {
			return fmt.Errorf("%w: postgres (from %s) and data (from %s) exclude each other", ErrInvalid, c.Sources[Postgres], c.Sources[Data])
		}
		u, err := url.Parse(c.Postgres)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
			return bad(Postgres, "want a URL like postgres://user@host:5432/db")
		}
	}
	if !validMode(c.Mode) || c.Mode == "" {
		return bad(Mode, "must be fast or durable, got %q", c.Mode)
	}
	if c.Token != "" && strings.IndexFunc(c.Token, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return bad(Token, "must not contain spaces or control characters")
	}
	seen := map[string]bool{}
	for i, ns := range c.Namespaces {
		nsBad := func(format string, args ...any) error {
			return fmt.Errorf("%w: namespaces[%d] (prefix %q, from %s): %s", ErrInvalid, i, ns.Prefix, c.Sources[File], fmt.Sprintf(format, args...))
		}
		switch {
		case ns.Prefix == "":
			return nsBad("prefix is required")
		case seen[ns.Prefix]:
			return nsBad("prefix appears twice")
		case !validMode(ns.Mode):
			return nsBad("mode must be fast or durable, got %q", ns.Mode)
		case ns.N < 0 || ns.N > hotcount.MaxN:
			return nsBad("n must be 0..%d, got %d", hotcount.MaxN, ns.N)
		case ns.FlushInterval < 0:
			return nsBad("flush_interval must not be negative")
		case ns.ReadCacheTTL < 0:
			return nsBad("read_cache_ttl must not be negative")
		case ns.Reply != "" && ns.Reply != "estimate" && ns.Reply != "exact":
			return nsBad("reply must be estimate or exact, got %q", ns.Reply)
		case ns.Reply == "exact" && ns.ReadCacheTTL != 0:
			return nsBad("reply: exact reads afresh on every INCR and GET; read_cache_ttl does not apply")
		}
		seen[ns.Prefix] = true
	}
	return nil
}

func validMode(m string) bool { return m == "" || m == "fast" || m == "durable" }

// checkHostPort accepts "host:port" with a port 0..65535.
func checkHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port", a)
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("%q has a bad host", a)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%q: port must be 0..65535", a)
	}
	return nil
}

// SplitList splits a comma-separated list, dropping blanks.
func SplitList(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// ModeOf returns the durability mode of key: the longest matching
// namespace's mode, else c.Mode.
func (c *Config) ModeOf(key string) string {
	best, mode := -1, c.Mode
	for _, ns := range c.Namespaces {
		if strings.HasPrefix(key, ns.Prefix) && len(ns.Prefix) > best {
			best, mode = len(ns.Prefix), ns.Mode
		}
	}
	if mode == "" {
		return c.Mode
	}
	return mode
}

// Loopback reports whether c.Listen binds to a loopback address only.
func (c *Config) Loopback() bool {
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
