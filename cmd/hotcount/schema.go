// The configuration schema: one description of every setting of `hotcount
// serve` and `hotcount proxy`. It drives the flags (--NAME with dashes), the
// environment variables (HOTCOUNT_NAME), the YAML keys of the config file,
// the validation of the file's keys (an unknown key gets the nearest known
// one as a suggestion; a key of the other command is refused, naming it)
// and the configuration reference, docs/configuration.md, which
// configReference generates (TestConfigReference fails when the file is
// stale).
//
// To add a setting: add one entry to settings (or to nsFields for a
// per-namespace setting), a field to serveConfig (or nsConfig) with the
// same YAML name, and, when it sets a field of the library's Config, name
// that field in lib. TestLibraryFieldsReachable fails when a field of
// hotcount.Config or hotcount.Namespace has no setting and no `config:"code"`
// marker; TestConfigReference then asks for the reference to be written
// again (HOTCOUNT_UPDATE_DOCS=1 go test -run TestConfigReference ./cmd/hotcount).

package main

import (
	"flag"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/buffer"
	"github.com/hotcount/hotcount/hotkeys"
	"github.com/hotcount/hotcount/proxy"
	"github.com/hotcount/hotcount/store/mem"
	"go.yaml.in/yaml/v3"
)

// command is a set of the commands that use a setting.
type cmdSet uint8

const (
	cmdServe cmdSet = 1 << iota
	cmdProxy
	cmdBoth = cmdServe | cmdProxy
)

// String names the commands of c.
func (c cmdSet) String() string {
	var out []string
	if c&cmdServe != 0 {
		out = append(out, "serve")
	}
	if c&cmdProxy != 0 {
		out = append(out, "proxy")
	}
	return strings.Join(out, ", ")
}

// only names the one command of c, for messages ("hotcount proxy").
func (c cmdSet) only() string { return "hotcount " + c.String() }

// setting describes one setting of the configuration.
type setting struct {
	// name is the YAML key; the flag is --name with dashes for
	// underscores and dots, the environment variable HOTCOUNT_NAME in
	// upper case with underscores for dots (auto_n.budget:
	// --auto-n-budget, HOTCOUNT_AUTO_N_BUDGET; in the file, budget under
	// auto_n).
	name string
	// typ is the type as the reference shows it.
	typ string
	// choices, when set, are the values the setting takes; Validate
	// refuses any other with a message listing them.
	choices []string
	// def is the default as the reference and the flag help show it; ""
	// means none.
	def string
	// doc is the line of the reference and the flag help.
	doc string
	// cmds are the commands that use the setting.
	cmds cmdSet
	// fileOnly settings (lists of records) have no flag and no
	// environment variable; noFile ones (the path of the file itself)
	// are not a key of the file.
	fileOnly, noFile bool
	// lib names the field of hotcount.Config the setting sets
	// ("Durability.HealInterval"), or "" for a setting of the command.
	// invert says that the library field is the negation (cold_start:
	// Defaults.NoColdStart).
	lib    string
	invert bool
	// ptr returns where the setting's value lives in c.
	ptr func(c *serveConfig) any
}

// flag is the setting's command-line flag, without the dashes before it.
func (s setting) flag() string { return flagName(s.name) }

// env is the setting's environment variable.
func (s setting) env() string { return envName(s.name) }

// settings are the settings of serve and proxy, in the order of the
// reference.
var settings = []setting{
	{name: setFile, typ: "path", doc: "the YAML config file (its keys are the settings' names)", cmds: cmdBoth, noFile: true,
		ptr: func(c *serveConfig) any { return new(string) }},
	{name: setListen, typ: "host:port", def: defaultListen, doc: "address to serve the HTTP API on (port 0: any free port)", cmds: cmdServe,
		ptr: func(c *serveConfig) any { return &c.Listen }},
	{name: setRESPListen, typ: "host:port", def: defaultRESPListen, doc: "address to serve Redis clients on (port 0: any free port)", cmds: cmdProxy,
		ptr: func(c *serveConfig) any { return &c.RESPListen }},
	{name: setAdminListen, typ: "host:port or off", def: defaultAdminListen, doc: "HTTP admin port (/metrics, /healthz, /readyz, the dashboard), or off", cmds: cmdProxy,
		ptr: func(c *serveConfig) any { return &c.AdminListen }},
	{name: setRESPPassword, typ: "string", doc: "password Redis clients must AUTH with (not a Redis credential)", cmds: cmdProxy,
		ptr: func(c *serveConfig) any { return &c.RESPPassword }},
	{name: setRESPProcs, typ: "int", def: strconv.Itoa(defaultRESPProcs), doc: "CPUs the proxy runs Go code on at once (GOMAXPROCS), 0 for all; left unset, a GOMAXPROCS variable is kept", cmds: cmdProxy,
		ptr: func(c *serveConfig) any { return &c.RESPProcs }},
	{name: setRESPMaxBulk, typ: "bytes", def: strconv.Itoa(proxy.DefaultMaxBulkLen), doc: "largest bulk argument a client may send (Redis's proto-max-bulk-len); a longer one is refused on its header; at least 1 MiB (1048576), Redis's floor", cmds: cmdProxy,
		ptr: func(c *serveConfig) any { return &c.RESPMaxBulkLen }},
	{name: setRESPQueryBuf, typ: "bytes", def: strconv.Itoa(proxy.DefaultQueryBufferLimit), doc: "unparsed input one connection may hold (Redis's client-query-buffer-limit); at least resp_max_bulk_len (left unset, at least resp_max_bulk_len + 64 KiB), at most resp_memory_budget", cmds: cmdProxy,
		ptr: func(c *serveConfig) any { return &c.RESPQueryBufferLimit }},
	{name: setRESPBudget, typ: "bytes", def: strconv.Itoa(proxy.DefaultMemoryBudget), doc: "input all connections may hold together, with what open transactions keep of their queued commands; past it reads wait, then connections close (a transaction's copy is dropped instead; a keyless command it cannot hold is answered an error, and EXEC EXECABORT); at least resp_query_buffer_limit", cmds: cmdProxy,
		ptr: func(c *serveConfig) any { return &c.RESPMemoryBudget }},
	{name: setRESPFlush, typ: "bool", def: "false", doc: "let clients run FLUSHALL/FLUSHDB: every primary emptied (hotcount's own keys kept) and every counter of the durable store cleared", cmds: cmdProxy,
		ptr: func(c *serveConfig) any { return &c.RESPAllowFlush }},
	{name: setRESPConfig, typ: "bool", def: "false", doc: "let clients run CONFIG SET/RESETSTAT: sent to every node, replicas included, OK only when every node says OK (CONFIG REWRITE stays refused)", cmds: cmdProxy,
		ptr: func(c *serveConfig) any { return &c.RESPAllowConfig }},
	{name: setRESPAnnounce, typ: "host:port", doc: "address cluster clients are told to reach this proxy at (CLUSTER SLOTS, SHARDS, NODES); default: the address each client connected to", cmds: cmdProxy,
		ptr: func(c *serveConfig) any { return &c.RESPAnnounce }},
	{name: setRESPPeers, typ: "list of host:port", doc: "announced addresses of the other proxies of a group; the group splits the slots in what CLUSTER answers (needs resp_announce)", cmds: cmdProxy,
		ptr: func(c *serveConfig) any { return &c.RESPPeers }},
	{name: setRedis, typ: "list of host:port", doc: "Redis seed addresses, comma-separated in a flag or variable (standalone or Cluster, detected); serve: empty means the embedded store; proxy: required", cmds: cmdBoth, lib: "Redis.Addrs",
		ptr: func(c *serveConfig) any { return &c.Redis }},
	{name: setRedisUser, typ: "string", doc: "Redis ACL user", cmds: cmdBoth, lib: "Redis.Username",
		ptr: func(c *serveConfig) any { return &c.RedisSecurity.Username }},
	{name: setRedisPass, typ: "string", doc: "Redis password (prefer redis_password_file or the environment: a flag shows in ps)", cmds: cmdBoth, lib: "Redis.Password",
		ptr: func(c *serveConfig) any { return &c.RedisSecurity.Password }},
	{name: setRedisPassFile, typ: "path", doc: "file holding the Redis password", cmds: cmdBoth,
		ptr: func(c *serveConfig) any { return &c.RedisSecurity.PasswordFile }},
	{name: setRedisTLS, typ: "bool", def: "false", doc: "connect to Redis with TLS (system roots unless redis_tls_ca)", cmds: cmdBoth,
		ptr: func(c *serveConfig) any { return &c.RedisSecurity.TLS }},
	{name: setRedisCA, typ: "path", doc: "PEM file of the CA of the Redis certificates (implies TLS)", cmds: cmdBoth,
		ptr: func(c *serveConfig) any { return &c.RedisSecurity.CA }},
	{name: setRedisCert, typ: "path", doc: "PEM client certificate for Redis (with redis_tls_key; implies TLS)", cmds: cmdBoth,
		ptr: func(c *serveConfig) any { return &c.RedisSecurity.Cert }},
	{name: setRedisKey, typ: "path", doc: "PEM key of redis_tls_cert", cmds: cmdBoth,
		ptr: func(c *serveConfig) any { return &c.RedisSecurity.Key }},
	{name: setRedisSNI, typ: "string", doc: "name the Redis certificates are checked against (default: each address's host)", cmds: cmdBoth,
		ptr: func(c *serveConfig) any { return &c.RedisSecurity.ServerName }},
	{name: setPostgres, typ: "URL", doc: "PostgreSQL URL of the durable store (instead of data); TLS with ?sslmode=verify-full&sslrootcert=FILE", cmds: cmdBoth,
		ptr: func(c *serveConfig) any { return &c.Postgres }},
	{name: setData, typ: "path", def: defaultData, doc: "folder of the SQLite durable store, created if missing (proxy: no default, no durable store unless given)", cmds: cmdBoth,
		ptr: func(c *serveConfig) any { return &c.Data }},
	{name: setEmbeddedNodes, typ: "int", def: strconv.Itoa(hotcount.DefaultEmbeddedNodes), doc: "simulated nodes of the embedded store (without redis)", cmds: cmdServe, lib: "Embedded.Nodes",
		ptr: func(c *serveConfig) any { return &c.EmbeddedNodes }},
	{name: "embedded_fsync", typ: "everysec or always", choices: []string{mem.SyncEverySec, mem.SyncAlways}, def: mem.SyncEverySec, doc: "when the embedded store's append-only file (cache.aof in data) is fsynced: everysec (a machine crash loses at most about the last second; a killed process nothing) or always (before every reply; see docs/embedded-store.md)", cmds: cmdServe, lib: "Embedded.AOFSync",
		ptr: func(c *serveConfig) any { return &c.EmbeddedFsync }},
	{name: setToken, typ: "string", doc: "one bearer token with every scope (reads need it too; the proxy: its admin port); prefer token_file or the environment: a flag shows in ps", cmds: cmdBoth,
		ptr: func(c *serveConfig) any { return &c.Token }},
	{name: setTokenFile, typ: "path", doc: "file holding that token", cmds: cmdBoth,
		ptr: func(c *serveConfig) any { return &c.TokenFile }},
	{name: setTokens, typ: "list of tokens", doc: "scoped bearer tokens (see Tokens below)", cmds: cmdBoth, fileOnly: true,
		ptr: func(c *serveConfig) any { return &c.Tokens }},
	{name: setMetricsPublic, typ: "bool", def: "false", doc: "serve /metrics without a token when tokens are configured", cmds: cmdBoth,
		ptr: func(c *serveConfig) any { return &c.MetricsPublic }},
	{name: setDashboard, typ: "bool", def: "true", doc: "serve the dashboard at /", cmds: cmdServe,
		ptr: func(c *serveConfig) any { return &c.Dashboard }},
	{name: setTLSCert, typ: "path", doc: "PEM certificate: serve HTTPS (with tls_key)", cmds: cmdServe,
		ptr: func(c *serveConfig) any { return &c.TLSCert }},
	{name: setTLSKey, typ: "path", doc: "PEM key of tls_cert", cmds: cmdServe,
		ptr: func(c *serveConfig) any { return &c.TLSKey }},
	{name: setLogFormat, typ: "text or json", choices: []string{"text", "json"}, def: defaultLogFormat, doc: "format of the log on stderr (log/slog)", cmds: cmdServe,
		ptr: func(c *serveConfig) any { return &c.LogFormat }},
	{name: setAccessLog, typ: "bool", def: "false", doc: "one log line per request: method, path, route, status, bytes, duration, token name", cmds: cmdServe,
		ptr: func(c *serveConfig) any { return &c.AccessLog }},
	// The settings of keys no namespace names (the library's Defaults).
	{name: setMode, typ: "fast or durable", choices: []string{"fast", "durable"}, def: defaultMode, doc: "durability mode of keys no namespace names; a counter keeps the mode it was written in: a start that would change it is refused (see docs/concepts.md#changing-a-mode)", cmds: cmdBoth, lib: "Defaults.Mode",
		ptr: func(c *serveConfig) any { return &c.Mode }},
	{name: "n", typ: "int", def: strconv.Itoa(hotcount.DefaultN), doc: "sub-counters of a hot counter no namespace names", cmds: cmdBoth, lib: "Defaults.N",
		ptr: func(c *serveConfig) any { return &c.Defaults.N }},
	{name: "buffered", typ: "bool", def: "false", doc: "buffer the increments of keys no namespace names", cmds: cmdBoth, lib: "Defaults.Buffered",
		ptr: func(c *serveConfig) any { return &c.Defaults.Buffered }},
	{name: "flush_interval", typ: "duration", def: hotcount.DefaultFlushInterval.String(), doc: "how often buffered deltas of keys no namespace names are flushed", cmds: cmdBoth, lib: "Defaults.FlushInterval",
		ptr: func(c *serveConfig) any { return &c.Defaults.FlushInterval }},
	{name: "read_cache_ttl", typ: "duration", def: hotcount.DefaultReadCacheTTL.String(), doc: "how long a summed read of keys no namespace names is cached", cmds: cmdBoth, lib: "Defaults.ReadCacheTTL",
		ptr: func(c *serveConfig) any { return &c.Defaults.ReadCacheTTL }},
	{name: "cold_start", typ: "bool", def: "true", doc: "counters no namespace names start cold (one key) until hot; false: n sub-counters from the first write", cmds: cmdBoth, lib: "Defaults.NoColdStart", invert: true,
		ptr: func(c *serveConfig) any { return &c.Defaults.ColdStart }},
	{name: "hot_rate", typ: "float", def: strconv.Itoa(hotcount.DefaultHotRate), doc: "cache writes/s (per process) past which a cold counter grows to n", cmds: cmdBoth, lib: "Defaults.HotRate",
		ptr: func(c *serveConfig) any { return &c.Defaults.HotRate }},
	{name: "ttl", typ: "duration", def: "0 (never)", doc: "a new counter no namespace names expires this long after its first write", cmds: cmdBoth, lib: "Defaults.TTL",
		ptr: func(c *serveConfig) any { return &c.Defaults.TTL }},
	{name: setNamespaces, typ: "list of namespaces", doc: "settings per key prefix, longest prefix wins (see Namespaces below)", cmds: cmdBoth, fileOnly: true, lib: "Namespaces",
		ptr: func(c *serveConfig) any { return &c.Namespaces }},
	// Regions (docs/regions.md).
	{name: setRegion, typ: "string", doc: "this region's name, when counters are written in several regions each with its own Redis (empty: no regions)", cmds: cmdBoth, lib: "Region",
		ptr: func(c *serveConfig) any { return &c.Region }},
	{name: setPeers, typ: "list of peers", doc: "the other regions (see Peers below)", cmds: cmdBoth, fileOnly: true, lib: "Peers",
		ptr: func(c *serveConfig) any { return &c.Peers }},
	{name: setShipInterval, typ: "duration", def: hotcount.DefaultShipInterval.String(), doc: "how often the counters that changed are shipped to the peers", cmds: cmdBoth, lib: "ShipInterval",
		ptr: func(c *serveConfig) any { return &c.ShipInterval }},
	{name: setRetention, typ: "duration", def: hotcount.DefaultRegionRetention.String(), doc: "how long the region records of a counter cleared or expired here are kept before they are collected (a peer's record that arrives later counts again)", cmds: cmdBoth, lib: "RegionRetention",
		ptr: func(c *serveConfig) any { return &c.RegionRetention }},
	// The library's other settings.
	{name: "timeout", typ: "duration", def: hotcount.DefaultTimeout.String(), doc: "bound of every call to the cache", cmds: cmdBoth, lib: "Timeout",
		ptr: func(c *serveConfig) any { return &c.Timeout }},
	{name: "no_read_cache", typ: "bool", def: "false", doc: "turn the read cache off: every read sums afresh", cmds: cmdBoth, lib: "Reads.NoCache",
		ptr: func(c *serveConfig) any { return &c.NoReadCache }},
	{name: "meta_ttl", typ: "duration", def: hotcount.DefaultMetaTTL.String(), doc: "how long a process caches a counter's label sets", cmds: cmdBoth, lib: "Meta.TTL",
		ptr: func(c *serveConfig) any { return &c.MetaTTL }},
	{name: "naive_labels", typ: "bool", def: "false", doc: "counters without metadata use the labels 0..n-1 instead of placed ones (for comparison, and for counters written before placement)", cmds: cmdBoth, lib: "Meta.NaiveLabels",
		ptr: func(c *serveConfig) any { return &c.NaiveLabels }},
	{name: "buffer_max_keys", typ: "int", def: strconv.Itoa(buffer.DefaultMaxKeys), doc: "keys a buffer holds before it flushes on size", cmds: cmdBoth, lib: "Buffer.MaxKeys",
		ptr: func(c *serveConfig) any { return &c.BufferMaxKeys }},
	{name: "buffer_max_pending_keys", typ: "int", def: strconv.Itoa(buffer.DefaultMaxPendingKeys), doc: "keys held while the cache is unreachable before new keys get back-pressure", cmds: cmdBoth, lib: "Buffer.MaxPendingKeys",
		ptr: func(c *serveConfig) any { return &c.BufferMaxPendingKeys }},
	{name: "buffer_hot_at", typ: "int", def: strconv.Itoa(buffer.DefaultHotAt), doc: "increments of a key in one flush interval that make it hot: its flush is exactly-once; a cold key's is one plain INCRBY, dropped and counted when its reply is lost (1: every key hot)", cmds: cmdBoth, lib: "Buffer.HotAt",
		ptr: func(c *serveConfig) any { return &c.BufferHotAt }},
	{name: "checkpoint_interval", typ: "duration", def: hotcount.DefaultCheckpointInterval.String(), doc: "how often fast-mode counters are checkpointed to the durable store", cmds: cmdBoth, lib: "Durability.CheckpointInterval",
		ptr: func(c *serveConfig) any { return &c.CheckpointInterval }},
	{name: "rollup_age", typ: "duration", def: hotcount.DefaultRollupAge.String(), doc: "age past which durable events are rolled up into totals", cmds: cmdBoth, lib: "Durability.RollupAge",
		ptr: func(c *serveConfig) any { return &c.RollupAge }},
	{name: "cleanup_interval", typ: "duration", def: hotcount.DefaultCleanupInterval.String(), doc: "how often the clean-up pass clears expired counters in the durable store", cmds: cmdBoth, lib: "Durability.CleanupInterval",
		ptr: func(c *serveConfig) any { return &c.CleanupInterval }},
	{name: "heal_interval", typ: "duration", def: hotcount.DefaultHealInterval.String(), doc: "how often the view of durable counters is compared with the log and repaired (negative: off)", cmds: cmdBoth, lib: "Durability.HealInterval",
		ptr: func(c *serveConfig) any { return &c.HealInterval }},
	{name: "no_startup_repair", typ: "bool", def: "false", doc: "skip the checks at start: for cache nodes that came back empty, and for counters whose mode the settings would change", cmds: cmdBoth, lib: "Durability.NoStartupRepair",
		ptr: func(c *serveConfig) any { return &c.NoStartupRepair }},
	{name: "rebalance_auto", typ: "bool", def: "false", doc: "re-place the sub-counters a process uses whenever the slot map changes", cmds: cmdBoth, lib: "Rebalance.Auto",
		ptr: func(c *serveConfig) any { return &c.RebalanceAuto }},
	{name: "rebalance_check", typ: "duration", def: hotcount.DefaultRebalanceCheck.String(), doc: "how often the slot map is checked for re-placement", cmds: cmdBoth, lib: "Rebalance.Check",
		ptr: func(c *serveConfig) any { return &c.RebalanceCheck }},
	{name: "auto_n.enabled", typ: "bool", def: "false", doc: "automatic N; any auto_n setting turns it on unless this is false", cmds: cmdBoth, lib: "AutoN.Enabled",
		ptr: func(c *serveConfig) any { return &c.autoN().Enabled }},
	{name: "auto_n.budget", typ: "float", def: strconv.Itoa(hotkeys.DefaultBudget), doc: "writes/s per node past which automatic N grows a key (the dashboard's budget line)", cmds: cmdBoth, lib: "AutoN.Budget",
		ptr: func(c *serveConfig) any { return &c.autoN().Budget }},
	{name: "auto_n.max_n", typ: "int", def: strconv.Itoa(hotkeys.DefaultMaxN), doc: "largest N automatic N sets", cmds: cmdBoth, lib: "AutoN.MaxN",
		ptr: func(c *serveConfig) any { return &c.autoN().MaxN }},
	{name: "auto_n.hysteresis", typ: "duration", def: hotkeys.DefaultHysteresis.String(), doc: "how long a key stays cool before automatic N folds it back", cmds: cmdBoth, lib: "AutoN.Hysteresis",
		ptr: func(c *serveConfig) any { return &c.autoN().Hysteresis }},
}

// notSettings are fields of the library that are not settings, with the
// reason.
var notSettings = map[string]string{
	"Config.Defaults.Prefix": "the defaults are the settings of the keys no namespace matches: they have no prefix",
}

// nsField describes one field of a namespace of the file.
type nsField struct {
	name, typ, doc string
	cmds           cmdSet
	// lib is the field of hotcount.Namespace it sets.
	lib string
}

// nsFields are the fields of a namespace in the file.
var nsFields = []nsField{
	{"prefix", "string", "required, unique: the keys the namespace holds; the longest match wins (no braces or control characters, as in a key)", cmdBoth, "Prefix"},
	{"mode", "fast or durable", "durability mode (default: mode); a start that would change the mode of counters the durable store holds, by this field, a removed namespace or a changed prefix, is refused", cmdBoth, "Mode"},
	{"n", "int", "sub-counters of a hot counter (default: n)", cmdBoth, "N"},
	{"buffered", "bool", "buffer increments in the process, flushed every flush_interval (not inherited; default false)", cmdBoth, "Buffered"},
	{"flush_interval", "duration", "flush interval of the namespace's buffer (default: flush_interval)", cmdBoth, "FlushInterval"},
	{"read_cache_ttl", "duration", "how long a summed read is cached (default: read_cache_ttl)", cmdBoth, "ReadCacheTTL"},
	{"cold_start", "bool", "false: n sub-counters from the first write (not inherited; default true)", cmdBoth, "NoColdStart"},
	{"hot_rate", "float", "cache writes/s past which a cold counter grows to n (default: hot_rate)", cmdBoth, "HotRate"},
	{"ttl", "duration", "a new counter expires this long after its first write (default: ttl)", cmdBoth, "TTL"},
	{"reply", "estimate or exact", "what INCR answers: this proxy's estimate (default), or a fresh summed read; exact excludes read_cache_ttl", cmdProxy, ""},
}

// tokenFields are the fields of a scoped token in the file.
var tokenFields = []nsField{
	{"name", "string", "shown in the access log and the metrics", cmdBoth, ""},
	{"token", "string", "the secret (give exactly one of token, token_file and token_env)", cmdBoth, ""},
	{"token_file", "path", "a file holding the secret", cmdBoth, ""},
	{"token_env", "string", "an environment variable holding the secret", cmdBoth, ""},
	{"scopes", "list", "read, write, admin, metrics", cmdBoth, ""},
	{"prefixes", "list", "key prefixes the token is limited to (default: every key)", cmdBoth, ""},
}

// Names of settings used in code besides the schema.
const (
	setEmbeddedNodes = "embedded_nodes"
	setTokens        = "tokens"
	setNamespaces    = "namespaces"
	setAutoN         = "auto_n"
)

// settingByName finds a setting; nil when there is none.
func settingByName(name string) *setting {
	for i := range settings {
		if settings[i].name == name {
			return &settings[i]
		}
	}
	return nil
}

// settingOfFlag finds the setting of a command-line flag.
func settingOfFlag(flag string) *setting {
	for i := range settings {
		if settings[i].flag() == flag {
			return &settings[i]
		}
	}
	return nil
}

// registerFlags adds a flag for every setting cmd uses (file-only ones
// aside), each usage naming its environment variable.
func registerFlags(fs *flagSet, cmd cmdSet) {
	for _, s := range settings {
		if s.cmds&cmd == 0 || s.fileOnly {
			continue
		}
		usage := s.doc + "; env " + s.env()
		if s.typ == "bool" {
			fs.Bool(s.flag(), s.def == "true", usage)
			continue
		}
		if s.def != "" && !(cmd == cmdProxy && s.name == setData) {
			usage += " (default " + s.def + ")"
		}
		fs.String(s.flag(), "", usage)
	}
}

// checkFlagArgs looks at the flags of args before they are parsed: a flag
// of a setting the other command uses is an error naming that command
// (--resp-listen given to serve), and an unknown flag names the nearest
// flag fs has. It returns nil when the flag package should go on.
func checkFlagArgs(fs *flagSet, cmd cmdSet, args []string) error {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			return nil // the flag package stops here too
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "h" || name == "help" {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && !(ok && b.IsBoolFlag()) {
				i++ // the value, which may start with "-" (--heal-interval -1s)
			}
			continue
		}
		if s := settingOfFlag(name); s != nil && s.cmds&cmd == 0 {
			return fmt.Errorf("--%s is a setting of %s, not of hotcount %s", name, s.cmds.only(), cmd)
		}
		if near := nearest(name, names); near != "" {
			return fmt.Errorf("unknown flag --%s (did you mean --%s?)", name, near)
		}
		return nil // the flag package says it is not defined
	}
	return nil
}

// checkChoices refuses a value of a setting with choices that is not one
// of them (a setting cmd does not use is not looked at).
func checkChoices(c *serveConfig, bad func(name, format string, args ...any) error) error {
	for _, s := range settings {
		if len(s.choices) == 0 {
			continue
		}
		v, ok := s.ptr(c).(*string)
		if !ok || slices.Contains(s.choices, *v) || (*v == "" && c.Sources[s.name] == "") {
			continue
		}
		return bad(s.name, "must be %s, got %q", strings.Join(s.choices, " or "), *v)
	}
	return nil
}

// setText sets the value at ptr from the text of a flag or an environment
// variable.
func setText(ptr any, v string) error {
	switch p := ptr.(type) {
	case *string:
		*p = v
	case *[]string:
		*p = splitAddrs(v)
	case *bool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		*p = b
	case **bool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		*p = &b
	case *int:
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("want a whole number, got %q", v)
		}
		*p = n
	case **int:
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("want a whole number, got %q", v)
		}
		*p = &n
	case *float64:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("want a number, got %q", v)
		}
		*p = f
	case *time.Duration:
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("want a duration such as 500ms or 2s, got %q", v)
		}
		*p = d
	default:
		return fmt.Errorf("cannot be set from text (%T)", ptr)
	}
	return nil
}

// checkFileKeys checks the keys of the file's top-level mapping, and those
// of its namespaces, tokens and auto_n, against the schema for cmd. It
// returns the top-level keys the file sets, in the form of setting names
// (auto_n's as auto_n.KEY).
func checkFileKeys(doc *yaml.Node, cmd cmdSet) ([]string, error) {
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind != yaml.MappingNode {
		if doc.Kind == yaml.ScalarNode && doc.Tag == "!!null" {
			return nil, nil
		}
		return nil, fmt.Errorf("line %d: want a mapping of settings", doc.Line)
	}
	var top []string
	for _, s := range settings {
		if !s.noFile && !strings.Contains(s.name, ".") {
			top = append(top, s.name)
		}
	}
	top = append(top, setAutoN)
	var set []string
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i], doc.Content[i+1]
		key := k.Value
		if key == setAutoN {
			if err := checkKeys(v, "auto_n", autoNKeys(), cmd); err != nil {
				return nil, err
			}
			set = append(set, setAutoN)
			if v.Kind == yaml.MappingNode {
				for j := 0; j < len(v.Content); j += 2 {
					set = append(set, setAutoN+"."+v.Content[j].Value)
				}
			}
			continue
		}
		s := settingByName(key)
		if s == nil || s.noFile {
			return nil, unknownKey(k, key, "", top)
		}
		if s.cmds&cmd == 0 {
			return nil, fmt.Errorf("line %d: %s is a setting of %s, not of hotcount %s", k.Line, key, s.cmds.only(), cmd)
		}
		switch key {
		case setNamespaces:
			if err := checkList(v, setNamespaces, nsFields, cmd); err != nil {
				return nil, err
			}
		case setTokens:
			if err := checkList(v, setTokens, tokenFields, cmd); err != nil {
				return nil, err
			}
		case setPeers:
			if err := checkList(v, setPeers, peerFields, cmd); err != nil {
				return nil, err
			}
		}
		set = append(set, key)
	}
	return set, nil
}

// autoNKeys are the fields of auto_n in the file.
func autoNKeys() []nsField {
	var out []nsField
	for _, s := range settings {
		if rest, ok := strings.CutPrefix(s.name, setAutoN+"."); ok {
			out = append(out, nsField{name: rest, cmds: s.cmds})
		}
	}
	return out
}

// checkList checks the keys of every record of a list (namespaces, tokens).
func checkList(v *yaml.Node, what string, fields []nsField, cmd cmdSet) error {
	if v.Kind != yaml.SequenceNode {
		if v.Tag == "!!null" {
			return nil
		}
		return fmt.Errorf("line %d: %s: want a list", v.Line, what)
	}
	for i, item := range v.Content {
		if err := checkKeys(item, fmt.Sprintf("%s[%d]", what, i), fields, cmd); err != nil {
			return err
		}
	}
	return nil
}

// checkKeys checks the keys of one mapping against fields.
func checkKeys(m *yaml.Node, what string, fields []nsField, cmd cmdSet) error {
	if m.Kind != yaml.MappingNode {
		if m.Tag == "!!null" {
			return nil
		}
		return fmt.Errorf("line %d: %s: want a mapping", m.Line, what)
	}
	var names []string
	for _, f := range fields {
		names = append(names, f.name)
	}
	for j := 0; j+1 < len(m.Content); j += 2 {
		k := m.Content[j]
		var f *nsField
		for i := range fields {
			if fields[i].name == k.Value {
				f = &fields[i]
			}
		}
		if f == nil {
			return unknownKey(k, k.Value, what+": ", names)
		}
		if f.cmds&cmd == 0 {
			return fmt.Errorf("line %d: %s: %s is a setting of %s, not of hotcount %s", k.Line, what, k.Value, f.cmds.only(), cmd)
		}
	}
	return nil
}

// unknownKey says that key is not known, with the nearest known key.
func unknownKey(k *yaml.Node, key, where string, known []string) error {
	msg := fmt.Sprintf("line %d: %sunknown key %q", k.Line, where, key)
	if near := nearest(key, known); near != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", near)
	}
	return fmt.Errorf("%s", msg)
}

// envTypos returns a warning for each HOTCOUNT_* variable of environ that
// names no setting but is a likely typo of one (HOTCOUNT_BUFFERD: did you
// mean HOTCOUNT_BUFFERED?) or names a setting only the file can hold
// (HOTCOUNT_NAMESPACES). Other HOTCOUNT_* variables, such as the
// counter commands' HOTCOUNT_SERVER, and empty ones (as good as unset)
// are left alone.
func envTypos(environ []string) []string {
	known := map[string]bool{}
	fileOnly := map[string]string{}
	var names []string
	for _, s := range settings {
		if s.fileOnly {
			fileOnly[s.env()] = s.name
			continue
		}
		known[s.env()] = true
		names = append(names, strings.TrimPrefix(s.env(), "HOTCOUNT_"))
	}
	var out []string
	for _, kv := range environ {
		name, val, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(name, "HOTCOUNT_")
		if !ok || known[name] || val == "" {
			continue
		}
		if setting, ok := fileOnly[name]; ok {
			out = append(out, fmt.Sprintf("%s is ignored: %s is set only in the config file", name, setting))
			continue
		}
		if near := nearest(rest, names); near != "" {
			out = append(out, fmt.Sprintf("%s is not a setting and is ignored (did you mean HOTCOUNT_%s?)", name, near))
		}
	}
	sort.Strings(out)
	return out
}

// nearest returns the known name closest to name by edit distance, when
// it is close enough to be a likely typo; "" otherwise.
func nearest(name string, known []string) string {
	best, bestD := "", 0
	for _, k := range known {
		d := editDistance(name, k)
		if best == "" || d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" || bestD > max(2, len(name)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// applyLibrary copies the settings that set a field of the library's
// Config (those with lib) from c into hc. Redis, its login and the
// namespaces are set by clientConfig.
func applyLibrary(c *serveConfig, hc *hotcount.Config) {
	for _, s := range settings {
		if s.lib == "" || strings.HasPrefix(s.lib, "Redis.") || s.lib == "Namespaces" || s.lib == "Peers" || strings.HasPrefix(s.lib, "AutoN.") {
			continue
		}
		v := reflect.ValueOf(s.ptr(c)).Elem()
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				continue
			}
			v = v.Elem()
		}
		dst := libField(reflect.ValueOf(hc).Elem(), s.lib)
		if s.invert {
			dst.SetBool(!v.Bool())
			continue
		}
		dst.Set(v.Convert(dst.Type()))
	}
}

// libField is the field of the struct v at a dotted path.
func libField(v reflect.Value, path string) reflect.Value {
	for _, p := range strings.Split(path, ".") {
		v = v.FieldByName(p)
	}
	return v
}

// codeOnly reports whether a field of the library carries the marker
// `config:"code"`: only code can set it (a store, a clock, a hook, a
// *tls.Config), so the file has no way to it.
func codeOnly(f reflect.StructField) bool { return f.Tag.Get("config") == "code" }

// fileOnlyList names the settings only the file holds, for the
// reference: "` + "`namespaces`" + `, ..." in the schema's order.
func fileOnlyList() string {
	var names []string
	for _, s := range settings {
		if s.fileOnly {
			names = append(names, "`"+s.name+"`")
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// configReference is docs/configuration.md, generated from the schema.
func configReference() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	b.WriteString(`# Configuration

<!-- Generated from cmd/hotcount/schema.go; do not edit. After changing
the schema: HOTCOUNT_UPDATE_DOCS=1 go test -run TestConfigReference ./cmd/hotcount -->

` + "`hotcount serve`" + ` and ` + "`hotcount proxy`" + ` read their settings from four
sources, in increasing precedence: the defaults below, a YAML file
(` + "`--config FILE`" + ` or ` + "`HOTCOUNT_CONFIG`" + `), environment variables and
flags. Every setting has one name across them: the YAML key ` + "`NAME`" + `, the
environment variable ` + "`HOTCOUNT_NAME`" + ` (upper case) and the flag ` + "`--NAME`" + `
with dashes for underscores (` + "`token_file`" + `: ` + "`--token-file`" + `,
` + "`HOTCOUNT_TOKEN_FILE`" + `). The settings of automatic N sit under ` + "`auto_n`" + `
in the file (` + "`auto_n: {budget: 20000}`" + `) and are named with ` + "`auto_n_`" + `
elsewhere (` + "`--auto-n-budget`" + `, ` + "`HOTCOUNT_AUTO_N_BUDGET`" + `). A number, byte
count or duration set to 0 takes its default, as if it were left out
(` + "`--timeout 0`" + ` is ` + hotcount.DefaultTimeout.String() + `, not no bound), except ` + "`resp_procs`" + ` (0: every CPU). Only the file can
list ` + fileOnlyList() + ` (they are lists of records); each of
their fields is below.

The merged result is validated at start: a bad value exits with status 2
and a message naming the setting and where it came from (` + "`flag --log-format`" + `,
` + "`env HOTCOUNT_LOG_FORMAT`" + `, ` + "`file hotcount.yaml`" + `). The file is read
strictly: an unknown key is an error that names the nearest known key
(` + "`unknown key \"bufferd\" (did you mean \"buffered\"?)`" + `), and a key that only
the other command uses is an error naming that command
(` + "`resp_listen is a setting of hotcount proxy`" + `). The environment is
shared by both commands, so a variable of the other command's setting is
ignored; a ` + "`HOTCOUNT_…`" + ` variable that is a likely typo of a setting's, or
that names a setting only the file holds, gets a warning on stderr
(` + "`HOTCOUNT_BUFFERD is not a setting and is ignored (did you mean HOTCOUNT_BUFFERED?)`" + `).

## Settings

| setting | flag | environment | type | default | commands | meaning |
|---|---|---|---|---|---|---|
`)
	for _, s := range settings {
		flag, env := "`--"+s.flag()+"`", "`"+s.env()+"`"
		if s.fileOnly {
			flag, env = "file only", "file only"
		}
		name := "`" + s.name + "`"
		if s.noFile {
			name = "(not in the file)"
		}
		def := s.def
		if def == "" {
			def = "—"
		} else {
			def = "`" + def + "`"
		}
		w("| %s | %s | %s | %s | %s | %s | %s |\n", name, flag, env, s.typ, def, s.cmds, s.doc)
	}
	w("\n## Namespaces\n\nEach namespace of `namespaces` holds these fields (a field left out takes the\ntop-level setting of the same name, except where it says):\n\n| field | type | commands | meaning |\n|---|---|---|---|\n")
	for _, f := range nsFields {
		w("| `%s` | %s | %s | %s |\n", f.name, f.typ, f.cmds, f.doc)
	}
	w("\n## Tokens\n\nEach token of `tokens` has these fields. In `hotcount serve` the tokens guard the\nHTTP API; in `hotcount proxy` they guard its admin port as they guard serve\n(`/metrics` needs the `metrics` or `admin` scope, or `metrics_public`; the\ndashboard's routes their own scopes; `/healthz` and `/readyz` stay open). Redis\nclients of the proxy `AUTH` with `resp_password` instead.\n\n| field | type | meaning |\n|---|---|---|\n")
	for _, f := range tokenFields {
		w("| `%s` | %s | %s |\n", f.name, f.typ, f.doc)
	}
	w("\n## Peers\n\nEach peer of `peers` is another region (see docs/regions.md); it takes the same\nlogin and TLS options as `redis`:\n\n| field | type | meaning |\n|---|---|---|\n")
	for _, f := range peerFields {
		w("| `%s` | %s | %s |\n", f.name, f.typ, f.doc)
	}
	w(`
## An example file

` + "```yaml" + `
listen: 0.0.0.0:7070
tls_cert: /etc/hotcount/cert.pem
tls_key: /etc/hotcount/key.pem
redis: [10.0.0.1:6379, 10.0.0.2:6379]
redis_username: hotcount
redis_password_file: /run/secrets/redis
redis_tls_ca: /etc/hotcount/redis-ca.pem
postgres: postgres://hotcount@db/hotcount?sslmode=verify-full&sslrootcert=/etc/hotcount/db-ca.pem
namespaces:
  - {prefix: "views:", buffered: true, n: 16, flush_interval: 250ms}
  - {prefix: "live:", read_cache_ttl: 100ms}
  - {prefix: "paid:", mode: durable}
  - {prefix: "session:", ttl: 48h}
tokens:
  - {name: web, token_file: /run/secrets/web, scopes: [read, write], prefixes: ["views:", "live:"]}
  - {name: billing, token_env: BILLING_TOKEN, scopes: [read, write], prefixes: ["paid:"]}
  - {name: ops, token_file: /run/secrets/ops, scopes: [read, admin]}
  - {name: prometheus, token_file: /run/secrets/scrape, scopes: [metrics]}
auto_n: {budget: 10000, max_n: 64, hysteresis: 30s}
` + "```" + `

## Set only in code

These fields of the library's ` + "`hotcount.Config`" + ` and of its peers
(` + "`hotcount.PeerConfig`" + `, the elements of ` + "`Config.Peers`" + `) have no setting:
only a program that uses the library can set them (they carry the marker
` + "`config:\"code\"`" + `). ` + "`Config.Redis.TLS`" + ` is built from the ` + "`redis_tls*`" + `
settings, a peer's ` + "`Redis.TLS`" + ` from its ` + "`tls*`" + ` fields, and
` + "`Config.Durability.Store`" + ` is opened from ` + "`postgres`" + ` or ` + "`data`" + `:
the file names them, not the objects.

`)
	for _, p := range codeOnlyFields() {
		w("- `%s`\n", p)
	}
	var not []string
	for p := range notSettings {
		not = append(not, p)
	}
	sort.Strings(not)
	for _, p := range not {
		w("\n`%s` is not a setting: %s.\n", p, notSettings[p])
	}
	return b.String()
}

// codeOnlyFields lists the paths of the library's code-only fields.
func codeOnlyFields() []string {
	var out []string
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			p := path + f.Name
			if codeOnly(f) {
				out = append(out, p)
				continue
			}
			if f.Type.Kind() == reflect.Struct && strings.HasPrefix(f.Type.PkgPath(), "github.com/hotcount/hotcount") {
				walk(f.Type, p+".")
			}
		}
	}
	walk(reflect.TypeOf(hotcount.Config{}), "Config.")
	walk(reflect.TypeOf(hotcount.Namespace{}), "Namespace.")
	walk(reflect.TypeOf(hotcount.PeerConfig{}), "PeerConfig.")
	sort.Strings(out)
	return out
}
