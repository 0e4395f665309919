// The configuration of `hotcount serve` comes from four sources, in
// increasing precedence: built-in defaults, a YAML file, environment
// variables and command-line flags.
//
// Every setting has one name used by all sources: the YAML field NAME, the
// environment variable HOTCOUNT_NAME (upper case) and the flag --NAME with
// dashes for underscores (token_file: --token-file, HOTCOUNT_TOKEN_FILE).
// The file itself is named by --config or HOTCOUNT_CONFIG. The YAML is
// decoded strictly (an unknown field is an error) and may also list
// per-prefix namespaces and scoped tokens, which only the file can set.
// Secrets can come from files (token_file, redis_password_file, a token's
// token_file) or the environment (a token's token_env), so that they never
// show in ps. After merging, the result is validated as a whole; every
// error wraps errInvalidConfig and names the setting and the source it came
// from.

package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/server"
	"go.yaml.in/yaml/v3"
)

// autoNConfig configures automatic N: grow the sub-counters of a key whose
// cluster-wide write rate per sub-counter passes Budget, fold back after it
// stays cool for Hysteresis. Zero fields mean the library's defaults
// (10,000 writes/s, at most 64, 30 s).
type autoNConfig struct {
	Budget     float64       `yaml:"budget"`
	MaxN       int           `yaml:"max_n"`
	Hysteresis time.Duration `yaml:"hysteresis"`
}

// Defaults.
const (
	// defaultListen is the address served when none is given: loopback only.
	defaultListen = "127.0.0.1:7070"
	// defaultData is the durability folder of the embedded default.
	defaultData = "./hotcount-data"
	// defaultMode is the durability mode of keys no namespace names.
	defaultMode = "fast"
	// defaultLogFormat is the format of the log on stderr.
	defaultLogFormat = "text"
	// defaultRESPListen is where `hotcount proxy` serves the Redis
	// protocol: loopback only.
	defaultRESPListen = "127.0.0.1:6380"
	// defaultRESPProcs: `hotcount proxy` runs on one CPU, as Redis and
	// twemproxy do. Its work is moving small replies between sockets;
	// with one CPU its goroutines hand work to each other without waking
	// threads, and rueidis collects more commands into each write to the
	// cluster. Measured side by side (docs/benchmarks-log.md, proxy), one CPU used
	// about a third less CPU per pass-through command than two, and
	// served more commands per second. More proxies scale it out.
	defaultRESPProcs = 1
	// defaultAdminListen is the HTTP admin port of `hotcount proxy`
	// (/metrics, /healthz, /readyz); "off" turns it off.
	defaultAdminListen = "127.0.0.1:7071"
)

// errInvalidConfig is wrapped by every configuration error.
var errInvalidConfig = errors.New("hotcount: invalid configuration")

// Setting names shared by flags (--NAME), environment (HOTCOUNT_NAME) and
// the YAML file (NAME).
const (
	setListen        = "listen"
	setRedis         = "redis"
	setPostgres      = "postgres"
	setData          = "data"
	setMode          = "mode"
	setToken         = "token"
	setTokenFile     = "token_file"
	setMetricsPublic = "metrics_public"
	setDashboard     = "dashboard"
	setLogFormat     = "log_format"
	setAccessLog     = "access_log"
	setTLSCert       = "tls_cert"
	setTLSKey        = "tls_key"
	setRedisUser     = "redis_username"
	setRedisPass     = "redis_password"
	setRedisPassFile = "redis_password_file"
	setRedisTLS      = "redis_tls"
	setRedisCA       = "redis_tls_ca"
	setRedisCert     = "redis_tls_cert"
	setRedisKey      = "redis_tls_key"
	setRedisSNI      = "redis_tls_server_name"
	setFile          = "config"
	// The settings of `hotcount proxy`.
	setRESPListen   = "resp_listen"
	setAdminListen  = "admin_listen"
	setRESPPassword = "resp_password"
	setRESPProcs    = "resp_procs"
)

// settingNames lists the settings that flags and environment variables may set.
var settingNames = []string{setListen, setRedis, setPostgres, setData, setMode, setToken, setTokenFile,
	setMetricsPublic, setDashboard, setLogFormat, setAccessLog, setTLSCert, setTLSKey,
	setRedisUser, setRedisPass, setRedisPassFile, setRedisTLS, setRedisCA, setRedisCert, setRedisKey, setRedisSNI, setFile,
	setRESPListen, setAdminListen, setRESPPassword, setRESPProcs}

// flagName is the command-line flag of a setting: dashes for underscores.
func flagName(setting string) string { return strings.ReplaceAll(setting, "_", "-") }

// settingName is the setting of a command-line flag.
func settingName(flag string) string { return strings.ReplaceAll(flag, "-", "_") }

// serveConfig is the merged configuration of `hotcount serve`.
type serveConfig struct {
	// setListen is the host:port to serve on; port 0 picks a free port.
	Listen string `yaml:"listen"`
	// setRedis lists setRedis seed addresses; empty means the embedded store.
	Redis []string `yaml:"redis"`
	// setPostgres is the URL of the PostgreSQL durable store; empty means the
	// SQLite file in setData.
	Postgres string `yaml:"postgres"`
	// setData is the folder of the SQLite durable store (when setPostgres is
	// empty).
	Data string `yaml:"data"`
	// setMode is the durability mode of keys no namespace names: fast or
	// durable.
	Mode string `yaml:"mode"`
	// setToken, when set, is one bearer token with every scope; reads need
	// it too.
	Token string `yaml:"token"`
	// setTokenFile names a file holding that token instead.
	TokenFile string `yaml:"token_file"`
	// Tokens are scoped bearer tokens (file only).
	Tokens []tokenConfig `yaml:"tokens"`
	// setMetricsPublic serves /metrics without a token.
	MetricsPublic bool `yaml:"metrics_public"`
	// setDashboard serves the dashboard; nil means true.
	Dashboard *bool `yaml:"dashboard"`
	// setLogFormat is text or json.
	LogFormat string `yaml:"log_format"`
	// setAccessLog logs one line per request.
	AccessLog bool `yaml:"access_log"`
	// setTLSCert and setTLSKey, together, make the listener serve HTTPS.
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// The Redis login and TLS settings (redis_username, ...).
	RedisSecurity redisSecurity `yaml:",inline"`
	// Namespaces override settings per key prefix (longest prefix wins).
	Namespaces []nsConfig `yaml:"namespaces"`
	// autoNConfig, when present, turns automatic N on (file only).
	AutoN *autoNConfig `yaml:"auto_n"`
	// RESPListen is the host:port `hotcount proxy` serves Redis clients on.
	RESPListen string `yaml:"resp_listen"`
	// AdminListen is the host:port of the proxy's HTTP admin port, or
	// "off".
	AdminListen string `yaml:"admin_listen"`
	// RESPPassword, when set, is the password Redis clients of the proxy
	// must AUTH with (not a Redis credential).
	RESPPassword string `yaml:"resp_password"`
	// RESPProcs is how many CPUs `hotcount proxy` runs Go code on at once
	// (GOMAXPROCS); 0 means all of them. nil until applyDefaults, which
	// makes it defaultRESPProcs.
	RESPProcs *int `yaml:"resp_procs"`

	// Sources says where each setting came from: "flag", "env", "file" or
	// "default"; for messages.
	Sources map[string]string `yaml:"-"`

	// Resolved by Validate: the bearer tokens with their secrets read, the
	// Redis login and TLS, the listener's certificate.
	tokens    []server.Token
	redisConn hotcount.RedisConfig
	listenTLS *tls.Config
}

// tokenConfig is one scoped bearer token of the file. Its secret is given
// by exactly one of Token, TokenFile (a file holding it) and TokenEnv (an
// environment variable holding it).
type tokenConfig struct {
	Name      string   `yaml:"name"`
	Token     string   `yaml:"token"`
	TokenFile string   `yaml:"token_file"`
	TokenEnv  string   `yaml:"token_env"`
	Scopes    []string `yaml:"scopes"`
	Prefixes  []string `yaml:"prefixes"`
}

// nsConfig holds the settings of keys that start with Prefix.
type nsConfig struct {
	// Prefix selects keys; non-empty and unique.
	Prefix string `yaml:"prefix"`
	// setMode is fast or durable; empty means the serveConfig's setMode.
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
	// ColdStart false gives every counter n sub-counters from its first
	// write; nil or true start counters cold (one key) until they are hot.
	ColdStart *bool `yaml:"cold_start"`
	// HotRate is the cache writes/s past which a cold counter grows to n;
	// 0 means the library default.
	HotRate float64 `yaml:"hot_rate"`
	// Reply is what `hotcount proxy` answers to INCR on the namespace's
	// keys: "estimate" (the default) or "exact" (a fresh summed read).
	Reply string `yaml:"reply"`
}

// namespace returns the library's settings of the namespace.
func (n nsConfig) namespace() hotcount.Namespace {
	return hotcount.Namespace{Prefix: n.Prefix, N: n.N, Mode: hotcount.Mode(n.Mode), Buffered: n.Buffered != nil && *n.Buffered,
		FlushInterval: n.FlushInterval, ReadCacheTTL: n.ReadCacheTTL,
		NoColdStart: n.ColdStart != nil && !*n.ColdStart, HotRate: n.HotRate}
}

// loadConfig merges defaults, the YAML file, the environment and flags. flags
// holds the flags that were set on the command line (name → value, names
// from settingNames); lookupEnv is os.LookupEnv or a fake.
func loadConfig(flags map[string]string, lookupEnv func(string) (string, bool)) (serveConfig, error) {
	for name := range flags {
		if !known(name) {
			return serveConfig{}, fmt.Errorf("%w: unknown setting %q", errInvalidConfig, name)
		}
	}
	get := func(name string) (string, string, bool) {
		if v, ok := flags[name]; ok {
			return v, "flag --" + name, true
		}
		if v, ok := lookupEnv(envName(name)); ok && v != "" {
			return v, "env " + envName(name), true
		}
		return "", "", false
	}
	var cfg serveConfig
	cfg.Sources = map[string]string{}
	if path, src, ok := get(setFile); ok {
		if err := readFile(path, &cfg); err != nil {
			return serveConfig{}, fmt.Errorf("%w: %s (from %s): %v", errInvalidConfig, path, src, err)
		}
		fileSrc := "file " + path
		rs := cfg.RedisSecurity
		for name, set := range map[string]bool{setListen: cfg.Listen != "", setRedis: len(cfg.Redis) > 0,
			setPostgres: cfg.Postgres != "", setData: cfg.Data != "", setMode: cfg.Mode != "", setToken: cfg.Token != "",
			setTokenFile: cfg.TokenFile != "", setMetricsPublic: cfg.MetricsPublic, setDashboard: cfg.Dashboard != nil,
			setLogFormat: cfg.LogFormat != "", setAccessLog: cfg.AccessLog, setTLSCert: cfg.TLSCert != "", setTLSKey: cfg.TLSKey != "",
			setRedisUser: rs.Username != "", setRedisPass: rs.Password != "", setRedisPassFile: rs.PasswordFile != "",
			setRedisTLS: rs.TLS, setRedisCA: rs.CA != "", setRedisCert: rs.Cert != "", setRedisKey: rs.Key != "", setRedisSNI: rs.ServerName != "",
			setRESPListen: cfg.RESPListen != "", setAdminListen: cfg.AdminListen != "", setRESPPassword: cfg.RESPPassword != "",
			setRESPProcs: cfg.RESPProcs != nil, "tokens": len(cfg.Tokens) > 0, "namespaces": len(cfg.Namespaces) > 0, "auto_n": cfg.AutoN != nil} {
			if set {
				cfg.Sources[name] = fileSrc
			}
		}
		cfg.Sources[setFile] = src
	}
	for _, name := range settingNames {
		v, src, ok := get(name)
		if !ok || name == setFile {
			continue
		}
		cfg.Sources[name] = src
		if err := cfg.set(name, v); err != nil {
			return serveConfig{}, fmt.Errorf("%w: %s (from %s): %w", errInvalidConfig, name, src, err)
		}
	}
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return serveConfig{}, err
	}
	return cfg, nil
}

// set sets one setting from its text (a flag or an environment variable).
func (c *serveConfig) set(name, v string) error {
	str := map[string]*string{setListen: &c.Listen, setPostgres: &c.Postgres, setData: &c.Data, setMode: &c.Mode,
		setToken: &c.Token, setTokenFile: &c.TokenFile, setRESPListen: &c.RESPListen, setAdminListen: &c.AdminListen, setRESPPassword: &c.RESPPassword, setLogFormat: &c.LogFormat, setTLSCert: &c.TLSCert, setTLSKey: &c.TLSKey,
		setRedisUser: &c.RedisSecurity.Username, setRedisPass: &c.RedisSecurity.Password, setRedisPassFile: &c.RedisSecurity.PasswordFile,
		setRedisCA: &c.RedisSecurity.CA, setRedisCert: &c.RedisSecurity.Cert, setRedisKey: &c.RedisSecurity.Key, setRedisSNI: &c.RedisSecurity.ServerName}
	boolean := map[string]*bool{setMetricsPublic: &c.MetricsPublic, setAccessLog: &c.AccessLog, setRedisTLS: &c.RedisSecurity.TLS}
	switch {
	case name == setRedis:
		c.Redis = splitAddrs(v)
	case name == setRESPProcs:
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("want a whole number of CPUs (0: all), got %q", v)
		}
		c.RESPProcs = &n
	case name == setDashboard:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		c.Dashboard = &b
	case str[name] != nil:
		*str[name] = v
	case boolean[name] != nil:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		*boolean[name] = b
	}
	return nil
}

// envName returns the environment variable of a setting: HOTCOUNT_NAME.
func envName(name string) string { return "HOTCOUNT_" + strings.ToUpper(name) }

func known(name string) bool {
	for _, n := range settingNames {
		if n == name {
			return true
		}
	}
	return false
}

// readFile decodes the YAML file at path into cfg, strictly.
func readFile(path string, cfg *serveConfig) error {
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

func (c *serveConfig) applyDefaults() {
	def := func(name string, field *string, v string) {
		if *field == "" {
			*field = v
			c.Sources[name] = "default"
		}
	}
	def(setListen, &c.Listen, defaultListen)
	def(setMode, &c.Mode, defaultMode)
	def(setLogFormat, &c.LogFormat, defaultLogFormat)
	if c.Dashboard == nil {
		on := true
		c.Dashboard = &on
	}
	def(setRESPListen, &c.RESPListen, defaultRESPListen)
	def(setAdminListen, &c.AdminListen, defaultAdminListen)
	if c.RESPProcs == nil {
		n := defaultRESPProcs
		c.RESPProcs = &n
		c.Sources[setRESPProcs] = "default"
	}
	if c.Postgres == "" {
		def(setData, &c.Data, defaultData)
	}
}

// Validate checks a merged serveConfig.
func (c *serveConfig) Validate() error {
	bad := func(name, format string, args ...any) error {
		where := ""
		if src := c.Sources[name]; src != "" {
			where = " (from " + src + ")"
		}
		return fmt.Errorf("%w: %s%s: %s", errInvalidConfig, name, where, fmt.Sprintf(format, args...))
	}
	if err := checkHostPort(c.Listen); err != nil {
		return bad(setListen, "%v", err)
	}
	if err := checkHostPort(c.RESPListen); err != nil {
		return bad(setRESPListen, "%v", err)
	}
	if c.AdminListen != "off" {
		if err := checkHostPort(c.AdminListen); err != nil {
			return bad(setAdminListen, "%v (or off)", err)
		}
	}
	if c.RESPProcs != nil && *c.RESPProcs < 0 {
		return bad(setRESPProcs, "want a whole number of CPUs (0: all), got %d", *c.RESPProcs)
	}
	if strings.ContainsAny(c.RESPPassword, "\r\n") {
		return bad(setRESPPassword, "must not contain line breaks")
	}
	for _, a := range c.Redis {
		if err := checkHostPort(a); err != nil {
			return bad(setRedis, "%v", err)
		}
	}
	if c.Postgres != "" {
		if c.Data != "" {
			return fmt.Errorf("%w: postgres (from %s) and data (from %s) exclude each other", errInvalidConfig, c.Sources[setPostgres], c.Sources[setData])
		}
		u, err := url.Parse(c.Postgres)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
			return bad(setPostgres, "want a URL like postgres://user@host:5432/db")
		}
	}
	if !validMode(c.Mode) || c.Mode == "" {
		return bad(setMode, "must be fast or durable, got %q", c.Mode)
	}
	if c.Token != "" && strings.IndexFunc(c.Token, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return bad(setToken, "must not contain spaces or control characters")
	}
	if err := c.resolveTokens(); err != nil {
		return err
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return bad(setLogFormat, "must be text or json, got %q", c.LogFormat)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return bad(setTLSCert, "tls_cert and tls_key go together")
	}
	c.listenTLS = nil
	if c.TLSCert != "" {
		pair, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			return bad(setTLSCert, "%v", err)
		}
		c.listenTLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	}
	if c.RedisSecurity.set() && len(c.Redis) == 0 {
		return fmt.Errorf("%w: the redis_* login and TLS settings need redis (the embedded store has no login)", errInvalidConfig)
	}
	rc, err := c.RedisSecurity.resolve(c.Redis)
	if err != nil {
		return fmt.Errorf("%w: %v (%s)", errInvalidConfig, err, c.redisSources())
	}
	c.redisConn = rc
	for i, ns := range c.Namespaces {
		nsBad := func(format string, args ...any) error {
			return fmt.Errorf("%w: namespaces[%d] (prefix %q, from %s): %s", errInvalidConfig, i, ns.Prefix, c.Sources[setFile], fmt.Sprintf(format, args...))
		}
		switch {
		case ns.Prefix == "":
			return fmt.Errorf("%w: namespaces[%d] (from %s): prefix is required", errInvalidConfig, i, c.Sources[setFile])
		case ns.Reply != "" && ns.Reply != "estimate" && ns.Reply != "exact":
			return nsBad("reply must be estimate or exact, got %q", ns.Reply)
		case ns.Reply == "exact" && ns.ReadCacheTTL != 0:
			return nsBad("reply: exact reads afresh on every INCR and GET; read_cache_ttl does not apply")
		}
	}
	// The namespaces and automatic N are the library's settings: the
	// library validates them. serve always opens a durable store (SQLite
	// or PostgreSQL), so durable mode is allowed.
	if err := clientConfig(*c, plannedStore{}).Validate(); err != nil {
		return fmt.Errorf("%w: namespaces or auto_n (from %s): %w", errInvalidConfig, c.Sources[setFile], err)
	}
	return nil
}

// resolveTokens reads the secrets of token_file and of the scoped tokens
// and checks them as the server will.
func (c *serveConfig) resolveTokens() error {
	where := func(name string) string {
		if src := c.Sources[name]; src != "" {
			return " (from " + src + ")"
		}
		return ""
	}
	single := c.Token
	if c.TokenFile != "" {
		if c.Token != "" {
			return fmt.Errorf("%w: token%s and token_file%s exclude each other", errInvalidConfig, where(setToken), where(setTokenFile))
		}
		s, err := readSecret(c.TokenFile)
		if err != nil {
			return fmt.Errorf("%w: token_file%s: %w", errInvalidConfig, where(setTokenFile), err)
		}
		single = s
	}
	c.tokens = nil
	for i, t := range c.Tokens {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: tokens[%d] %q%s: %s", errInvalidConfig, i, t.Name, where("tokens"), fmt.Sprintf(format, args...))
		}
		given := 0
		for _, s := range []string{t.Token, t.TokenFile, t.TokenEnv} {
			if s != "" {
				given++
			}
		}
		if given != 1 {
			return bad("give exactly one of token, token_file and token_env")
		}
		secret := t.Token
		switch {
		case t.TokenFile != "":
			s, err := readSecret(t.TokenFile)
			if err != nil {
				return bad("token_file: %v", err)
			}
			secret = s
		case t.TokenEnv != "":
			secret = strings.TrimSpace(os.Getenv(t.TokenEnv))
			if secret == "" {
				return bad("token_env: $%s is empty or not set", t.TokenEnv)
			}
		}
		st := server.Token{Name: t.Name, Secret: secret, Prefixes: t.Prefixes}
		for _, sc := range t.Scopes {
			st.Scopes = append(st.Scopes, server.Scope(sc))
		}
		c.tokens = append(c.tokens, st)
	}
	if err := server.CheckTokens(single, c.tokens); err != nil {
		return fmt.Errorf("%w: %w", errInvalidConfig, err)
	}
	c.Token = single
	c.TokenFile = ""
	return nil
}

// redisSources names where the redis_* settings came from.
func (c *serveConfig) redisSources() string {
	var out []string
	for _, n := range []string{setRedisUser, setRedisPass, setRedisPassFile, setRedisTLS, setRedisCA, setRedisCert, setRedisKey, setRedisSNI} {
		if src := c.Sources[n]; src != "" && src != "default" {
			out = append(out, n+" from "+src)
		}
	}
	return strings.Join(out, ", ")
}

// hasTokens reports whether any bearer token is configured.
func (c *serveConfig) hasTokens() bool { return c.Token != "" || len(c.tokens) > 0 }

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

// ModeOf returns the durability mode of key: the longest matching
// namespace's mode, else c.Mode.
func (c *serveConfig) ModeOf(key string) string {
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
func (c *serveConfig) Loopback() bool {
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

// plannedStore stands for the durable store serve opens after the
// configuration is validated; it is never called.
type plannedStore struct{ durable.Backend }
