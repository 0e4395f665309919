package main

import (
	"fmt"

	"github.com/hotcount/hotcount"
)

// Settings of regions (docs/regions.md).
const (
	setRegion       = "region"
	setPeers        = "peers"
	setShipInterval = "ship_interval"
	setRetention    = "region_retention"
)

// peerConfig is one entry of peers: another region's cache, with the same
// login and TLS options as redis.
type peerConfig struct {
	Name          string   `yaml:"name"`
	Redis         []string `yaml:"redis"`
	Username      string   `yaml:"username"`
	Password      string   `yaml:"password"`
	PasswordFile  string   `yaml:"password_file"`
	TLS           bool     `yaml:"tls"`
	TLSCA         string   `yaml:"tls_ca"`
	TLSCert       string   `yaml:"tls_cert"`
	TLSKey        string   `yaml:"tls_key"`
	TLSServerName string   `yaml:"tls_server_name"`
}

// peerFields are the fields of a peer in the file; lib is the field of
// hotcount.PeerConfig each sets (the tls* fields build Redis.TLS).
var peerFields = []nsField{
	{"name", "string", "the peer region's name (1-64 letters, digits, - or _)", cmdBoth, "Name"},
	{"redis", "list of host:port", "seed addresses of the peer region's Redis", cmdBoth, "Redis.Addrs"},
	{"username", "string", "Redis ACL user", cmdBoth, "Redis.Username"},
	{"password", "string", "Redis password (prefer password_file)", cmdBoth, "Redis.Password"},
	{"password_file", "path", "file holding the Redis password", cmdBoth, ""},
	{"tls", "bool", "connect with TLS (system roots unless tls_ca)", cmdBoth, ""},
	{"tls_ca", "path", "PEM file of the CA of the peer's certificates (implies TLS)", cmdBoth, ""},
	{"tls_cert", "path", "PEM client certificate (with tls_key; implies TLS)", cmdBoth, ""},
	{"tls_key", "path", "PEM key of tls_cert", cmdBoth, ""},
	{"tls_server_name", "string", "name the peer's certificates are checked against", cmdBoth, ""},
}

// resolvePeers checks region and peers and turns the peers into the
// library's (passwords read, TLS built).
func (c *serveConfig) resolvePeers() error {
	if c.Region == "" {
		if len(c.Peers) > 0 {
			return fmt.Errorf("%w: peers (from %s) need region", errInvalidConfig, c.Sources[setPeers])
		}
		return nil
	}
	if len(c.Redis) == 0 {
		return fmt.Errorf("%w: region %q needs redis (each region is its own Redis)", errInvalidConfig, c.Region)
	}
	c.peerConns = nil
	for i, p := range c.Peers {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: peers[%d] (name %q, from %s): %s", errInvalidConfig, i, p.Name, c.Sources[setPeers], fmt.Sprintf(format, args...))
		}
		if p.Name == "" || len(p.Redis) == 0 {
			return bad("name and redis are required")
		}
		sec := redisSecurity{Username: p.Username, Password: p.Password, PasswordFile: p.PasswordFile, TLS: p.TLS,
			CA: p.TLSCA, Cert: p.TLSCert, Key: p.TLSKey, ServerName: p.TLSServerName}
		rc, err := sec.resolve(p.Redis)
		if err != nil {
			return bad("%v", err)
		}
		c.peerConns = append(c.peerConns, hotcount.PeerConfig{Name: p.Name, Redis: rc})
	}
	// The library checks names, repeats and addresses.
	probe := hotcount.Config{Redis: hotcount.RedisConfig{Addrs: c.Redis}, Region: c.Region, Peers: c.peerConns, ShipInterval: c.ShipInterval, RegionRetention: c.RegionRetention}
	if err := probe.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errInvalidConfig, err)
	}
	return nil
}
