// The configuration of `hotcount serve` and `hotcount proxy` comes from
// four sources, in increasing precedence: built-in defaults, a YAML file,
// environment variables and command-line flags.
//
// Every setting is described once, in the schema (schema.go): its name
// (the YAML key NAME, the environment variable HOTCOUNT_NAME and the flag
// --NAME with dashes for underscores), type, default, doc line and the
// commands that use it. The file itself is named by --config or
// HOTCOUNT_CONFIG. Its keys are checked against the schema first (an
// unknown key gets the nearest known one as a suggestion; a key of the
// other command is refused, naming it), then it is decoded strictly; only
// the file lists per-prefix namespaces and scoped tokens. Secrets can come
// from files (token_file, redis_password_file, a token's token_file) or
// the environment (a token's token_env), so that they never show in ps.
// After merging, the result is validated as a whole; every error wraps
// errInvalidConfig and names the setting and the source it came from, a
// flag as it is typed (flag --log-format).

package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/proxy"
	"github.com/hotcount/hotcount/server"
	"go.yaml.in/yaml/v3"
)

// autoNConfig configures automatic N: grow the sub-counters of a key whose
// cluster-wide write rate per sub-counter passes Budget, fold back after it
// stays cool for Hysteresis. Zero fields mean the library's defaults
// (10,000 writes/s, at most 64, 30 s).
type autoNConfig struct {
	// Enabled false turns automatic N off although other fields are set;
	// nil means on.
	Enabled    *bool         `yaml:"enabled"`
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
	setRESPMaxBulk  = "resp_max_bulk_len"
	setRESPQueryBuf = "resp_query_buffer_limit"
	setRESPBudget   = "resp_memory_budget"
	setRESPFlush    = "resp_allow_flush"
	setRESPConfig   = "resp_allow_config"
	setRESPAnnounce = "resp_announce"
	setRESPPeers    = "resp_peers"
)

// flagName is the command-line flag of a setting: dashes for underscores
// and dots.
func flagName(setting string) string {
	return strings.NewReplacer("_", "-", ".", "-").Replace(setting)
}

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
	// AutoN, when present, turns automatic N on.
	AutoN *autoNConfig `yaml:"auto_n"`
	// EmbeddedNodes is the number of simulated nodes of the embedded
	// store; 0 means the library's default.
	EmbeddedNodes int `yaml:"embedded_nodes"`
	// EmbeddedFsync is when the embedded store's append-only file is
	// fsynced (mem.SyncEverySec or mem.SyncAlways).
	EmbeddedFsync string `yaml:"embedded_fsync"`
	// Defaults are the settings of keys no namespace names, besides Mode.
	Defaults defaultsConfig `yaml:",inline"`
	// The library's other settings; zero values mean its defaults.
	Timeout              time.Duration `yaml:"timeout"`
	NoReadCache          bool          `yaml:"no_read_cache"`
	MetaTTL              time.Duration `yaml:"meta_ttl"`
	NaiveLabels          bool          `yaml:"naive_labels"`
	BufferMaxKeys        int           `yaml:"buffer_max_keys"`
	BufferMaxPendingKeys int           `yaml:"buffer_max_pending_keys"`
	BufferHotAt          int           `yaml:"buffer_hot_at"`
	CheckpointInterval   time.Duration `yaml:"checkpoint_interval"`
	RollupAge            time.Duration `yaml:"rollup_age"`
	CleanupInterval      time.Duration `yaml:"cleanup_interval"`
	HealInterval         time.Duration `yaml:"heal_interval"`
	NoStartupRepair      bool          `yaml:"no_startup_repair"`
	RebalanceAuto        bool          `yaml:"rebalance_auto"`
	RebalanceCheck       time.Duration `yaml:"rebalance_check"`
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
	// RESPMaxBulkLen, RESPQueryBufferLimit and RESPMemoryBudget bound the
	// input of the proxy's clients (proxy.Config.MaxBulkLen,
	// QueryBufferLimit, MemoryBudget); 0 means the proxy's defaults.
	RESPMaxBulkLen       int `yaml:"resp_max_bulk_len"`
	RESPQueryBufferLimit int `yaml:"resp_query_buffer_limit"`
	RESPMemoryBudget     int `yaml:"resp_memory_budget"`
	// RESPAllowFlush lets the proxy's clients run FLUSHALL and FLUSHDB.
	RESPAllowFlush bool `yaml:"resp_allow_flush"`
	// RESPAllowConfig lets the proxy's clients run CONFIG SET and CONFIG
	// RESETSTAT, on every node of the cluster.
	RESPAllowConfig bool `yaml:"resp_allow_config"`
	// RESPAnnounce and RESPPeers are what CLUSTER answers cluster clients
	// (proxy.Config.Announce, Peers).
	RESPAnnounce string   `yaml:"resp_announce"`
	RESPPeers    []string `yaml:"resp_peers"`

	// Region, Peers, ShipInterval and RegionRetention put the process in
	// a region (see docs/regions.md).
	Region          string        `yaml:"region"`
	Peers           []peerConfig  `yaml:"peers"`
	ShipInterval    time.Duration `yaml:"ship_interval"`
	RegionRetention time.Duration `yaml:"region_retention"`

	// Sources says where each setting came from: "flag", "env", "file" or
	// "default"; for messages.
	Sources map[string]string `yaml:"-"`

	// Resolved by Validate: the bearer tokens with their secrets read, the
	// Redis login and TLS, the listener's certificate.
	tokens    []server.Token
	redisConn hotcount.RedisConfig
	peerConns []hotcount.PeerConfig
	listenTLS *tls.Config
}

// defaultsConfig holds the settings of keys no namespace names (the
// library's Defaults), as top-level keys of the file.
type defaultsConfig struct {
	N             int           `yaml:"n"`
	Buffered      bool          `yaml:"buffered"`
	FlushInterval time.Duration `yaml:"flush_interval"`
	ReadCacheTTL  time.Duration `yaml:"read_cache_ttl"`
	ColdStart     *bool         `yaml:"cold_start"`
	HotRate       float64       `yaml:"hot_rate"`
	TTL           time.Duration `yaml:"ttl"`
}

// autoN returns c.AutoN, making it (automatic N on) when it is nil.
func (c *serveConfig) autoN() *autoNConfig {
	if c.AutoN == nil {
		c.AutoN = &autoNConfig{}
	}
	return c.AutoN
}

// autoNOn reports whether automatic N is on.
func (c *serveConfig) autoNOn() bool {
	return c.AutoN != nil && (c.AutoN.Enabled == nil || *c.AutoN.Enabled)
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
	// TTL gives every new counter a deadline this long after its first
	// write; 0 inherits.
	TTL time.Duration `yaml:"ttl"`
	// Reply is what `hotcount proxy` answers to INCR on the namespace's
	// keys: "estimate" (the default) or "exact" (a fresh summed read).
	Reply string `yaml:"reply"`
}

// namespace returns the library's settings of the namespace.
func (n nsConfig) namespace() hotcount.Namespace {
	return hotcount.Namespace{Prefix: n.Prefix, N: n.N, Mode: hotcount.Mode(n.Mode), Buffered: n.Buffered != nil && *n.Buffered,
		FlushInterval: n.FlushInterval, ReadCacheTTL: n.ReadCacheTTL,
		NoColdStart: n.ColdStart != nil && !*n.ColdStart, HotRate: n.HotRate, TTL: n.TTL}
}

// loadConfig merges the configuration of `hotcount serve`.
func loadConfig(flags map[string]string, lookupEnv func(string) (string, bool)) (serveConfig, error) {
	return loadConfigFor(cmdServe, flags, lookupEnv)
}

// loadConfigFor merges defaults, the YAML file, the environment and flags
// for cmd. flags holds the flags that were set on the command line
// (setting name → value); lookupEnv is os.LookupEnv or a fake.
// Environment variables of settings cmd does not use are ignored: the
// environment may be shared by both commands.
func loadConfigFor(cmd cmdSet, flags map[string]string, lookupEnv func(string) (string, bool)) (serveConfig, error) {
	for name := range flags {
		if s := settingByName(name); s == nil || s.fileOnly || s.cmds&cmd == 0 {
			return serveConfig{}, fmt.Errorf("%w: unknown setting %q", errInvalidConfig, name)
		}
	}
	get := func(s *setting) (string, string, bool) {
		if v, ok := flags[s.name]; ok {
			return v, "flag --" + s.flag(), true
		}
		if v, ok := lookupEnv(s.env()); ok && v != "" {
			return v, "env " + s.env(), true
		}
		return "", "", false
	}
	var cfg serveConfig
	cfg.Sources = map[string]string{}
	if path, src, ok := get(settingByName(setFile)); ok {
		keys, err := readFile(path, &cfg, cmd)
		if err != nil {
			return serveConfig{}, fmt.Errorf("%w: %s (from %s): %v", errInvalidConfig, path, src, err)
		}
		for _, k := range keys {
			cfg.Sources[k] = "file " + path
		}
		cfg.Sources[setFile] = src
	}
	for i := range settings {
		s := &settings[i]
		if s.fileOnly || s.noFile || s.cmds&cmd == 0 {
			continue
		}
		v, src, ok := get(s)
		if !ok {
			continue
		}
		cfg.Sources[s.name] = src
		if err := setText(s.ptr(&cfg), v); err != nil {
			return serveConfig{}, fmt.Errorf("%w: %s (from %s): %w", errInvalidConfig, s.name, src, err)
		}
	}
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return serveConfig{}, err
	}
	return cfg, nil
}

// envName returns the environment variable of a setting: HOTCOUNT_NAME,
// with underscores for dots.
func envName(name string) string {
	return "HOTCOUNT_" + strings.ToUpper(strings.ReplaceAll(name, ".", "_"))
}

// readFile checks the keys of the YAML file at path against the schema
// for cmd, then decodes it into cfg, strictly. It returns the settings the
// file sets.
func readFile(path string, cfg *serveConfig, cmd cmdSet) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // an empty file sets nothing
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document")
	}
	keys, err := checkFileKeys(&doc, cmd)
	if err != nil {
		return nil, err
	}
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return keys, nil
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

// minRESPMaxBulkLen is the smallest resp_max_bulk_len, Redis's floor for
// proto-max-bulk-len: below it the proxy would refuse ordinary commands
// (a key or a value longer than the limit).
const minRESPMaxBulkLen = 1 << 20

// checkRESPBounds checks that the proxy's input bounds, with the proxy's
// defaults for those left at 0, nest as proxy.Config requires: a bulk
// argument fits one connection's buffer, which fits the budget of all of
// them. It blames the setting that was given.
func (c *serveConfig) checkRESPBounds(bad func(name, format string, args ...any) error) error {
	bulk := int64(c.RESPMaxBulkLen)
	if bulk == 0 {
		bulk = proxy.DefaultMaxBulkLen
	}
	qbuf := int64(c.RESPQueryBufferLimit)
	if qbuf == 0 {
		// proxy.Config's default: room for the largest bulk argument.
		qbuf = max(proxy.DefaultQueryBufferLimit, min(bulk, math.MaxInt32)+proxy.MaxInlineSize)
	}
	budget := int64(c.RESPMemoryBudget)
	if budget == 0 {
		budget = proxy.DefaultMemoryBudget
	}
	switch {
	case bulk > qbuf && c.RESPQueryBufferLimit != 0:
		return bad(setRESPQueryBuf, "must be at least %s (%d), got %d", setRESPMaxBulk, bulk, qbuf)
	case bulk > qbuf:
		return bad(setRESPMaxBulk, "must be at most %s (%d), got %d", setRESPQueryBuf, qbuf, bulk)
	case qbuf > budget && c.RESPMemoryBudget != 0:
		return bad(setRESPBudget, "must be at least %s (%d), got %d", setRESPQueryBuf, qbuf, budget)
	case qbuf > budget && c.RESPQueryBufferLimit != 0:
		return bad(setRESPQueryBuf, "must be at most %s (%d), got %d", setRESPBudget, budget, qbuf)
	case qbuf > budget:
		return bad(setRESPMaxBulk, "makes the default %s %d, past %s (%d): raise %s", setRESPQueryBuf, qbuf, setRESPBudget, budget, setRESPBudget)
	}
	return nil
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
	for name, v := range map[string]int{setRESPMaxBulk: c.RESPMaxBulkLen, setRESPQueryBuf: c.RESPQueryBufferLimit, setRESPBudget: c.RESPMemoryBudget} {
		if v < 0 {
			return bad(name, "want a number of bytes (0: the default), got %d", v)
		}
	}
	if c.RESPMaxBulkLen != 0 && c.RESPMaxBulkLen < minRESPMaxBulkLen {
		return bad(setRESPMaxBulk, "must be at least 1 MiB (%d), got %d (0: the default)", minRESPMaxBulkLen, c.RESPMaxBulkLen)
	}
	if err := c.checkRESPBounds(bad); err != nil {
		return err
	}
	if len(c.RESPPeers) > 0 && c.RESPAnnounce == "" {
		return bad(setRESPPeers, "needs resp_announce (this proxy's own address in the group)")
	}
	for _, a := range append([]string{c.RESPAnnounce}, c.RESPPeers...) {
		if a == "" {
			continue
		}
		if err := checkHostPort(a); err != nil {
			return bad(setRESPAnnounce, "%v", err)
		}
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
	if c.Data != "" {
		// A folder that exists must be one: the store is created in it.
		if fi, err := os.Stat(c.Data); err == nil && !fi.IsDir() {
			return bad(setData, "%q is not a folder (the durable store is created in it)", c.Data)
		}
	}
	if err := checkChoices(c, bad); err != nil {
		return err
	}
	if c.Token != "" && strings.IndexFunc(c.Token, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return bad(setToken, "must not contain spaces or control characters")
	}
	if err := c.resolveTokens(); err != nil {
		return err
	}
	switch {
	case c.TLSCert != "" && c.TLSKey == "":
		return bad(setTLSCert, "needs tls_key (they go together)")
	case c.TLSCert == "" && c.TLSKey != "":
		return bad(setTLSKey, "needs tls_cert (they go together)")
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
	if err := c.resolvePeers(); err != nil {
		return err
	}
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
		return fmt.Errorf("%w: %w (%s)", errInvalidConfig, err, c.librarySources())
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

// librarySources names where the settings of the library came from.
func (c *serveConfig) librarySources() string {
	var out []string
	for _, s := range settings {
		if src := c.Sources[s.name]; s.lib != "" && src != "" && src != "default" && !strings.HasPrefix(s.lib, "Redis.") {
			out = append(out, s.name+" from "+src)
		}
	}
	if src := c.Sources[setAutoN]; src != "" {
		out = append(out, "auto_n from "+src)
	}
	if len(out) == 0 {
		return "the defaults"
	}
	return strings.Join(out, ", ")
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
