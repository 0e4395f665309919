package hotcount

import (
	"context"
	"fmt"
	"net"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/internal/counters"
	"github.com/hotcount/hotcount/internal/regions"
)

// DefaultShipInterval is how often a region ships the counters that
// changed to its peers (Config.ShipInterval).
const DefaultShipInterval = regions.DefaultInterval

// DefaultRegionRetention is how long the region records of a counter
// cleared or expired in a region are kept before they are collected
// (Config.RegionRetention).
const DefaultRegionRetention = regions.DefaultRetention

// RegionShare is one region's share of a global reading (Reading.Regions).
type RegionShare = regions.Share

// PeerConfig is another region (see docs/regions.md).
type PeerConfig struct {
	// Name is the peer region's name: 1-64 letters, digits, '-' or '_'.
	Name string
	// Redis is the peer region's cache (its seed addresses and login).
	Redis RedisConfig
	// Dial, when set, opens the connections to the peer's nodes instead of
	// a plain TCP dial of the address the cluster announces (e.g. through
	// a tunnel or a proxy); nil means TCP.
	Dial func(ctx context.Context, addr string) (net.Conn, error) `config:"code"`
}

// validateRegions checks Region, Peers, ShipInterval and RegionRetention.
func (c Config) validateRegions() error {
	names, addrs := make([]string, len(c.Peers)), make([][]string, len(c.Peers))
	for i, p := range c.Peers {
		names[i], addrs[i] = p.Name, p.Redis.Addrs
	}
	err := regions.CheckSettings(regions.Settings{Region: c.Region, Peers: names, PeerAddrs: addrs,
		Interval: c.ShipInterval, Retention: c.RegionRetention, Cache: len(c.Redis.Addrs) > 0 || c.Store != nil})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// localClient is what a Redis store gives the regions service.
type localClient interface{ Client() rueidis.Client }

// startRegions starts the regions service when Config.Region is set.
func (c *Client) startRegions() error {
	s := c.cfg
	if s.Region == "" {
		return nil
	}
	lc, ok := c.st.(localClient)
	if !ok {
		return fmt.Errorf("%w: Region needs a Redis cache, not %T", ErrConfig, c.st)
	}
	peers := make([]regions.Peer, len(s.Peers))
	for i, p := range s.Peers {
		p := p
		peers[i] = regions.Peer{Name: p.Name, Connect: func(ctx context.Context) (rueidis.Client, error) {
			return regions.Connect(ctx, regions.Link{Addrs: p.Redis.Addrs, Username: p.Redis.Username,
				Password: p.Redis.Password, TLS: p.Redis.TLS, Dial: p.Dial, Timeout: s.Timeout})
		}}
	}
	var err error
	c.reg, err = c.ops.StartRegions(counters.RegionsConfig{Local: lc.Client(), Peers: peers,
		Retention: s.RegionRetention, Interval: s.ShipInterval, ReadTTL: s.Defaults.ReadCacheTTL, Timeout: s.Timeout})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// RegionLinks returns the figures of every link to a peer region (nil
// without Config.Region).
func (c *Client) RegionLinks() []RegionLink {
	if c.reg == nil {
		return nil
	}
	return c.reg.Stats()
}

// RegionLink is the figures of one link to a peer region.
type RegionLink = regions.LinkStats

// Region returns the name of the Client's region ("" without regions).
func (c *Client) Region() string { return c.cfg.Region }

// onRestore wraps the caller's restore callback: after fast-mode counters
// were restored from their checkpoints, a region ships them all again, so
// that the peers hold the restored totals.
func (c *Client) onRestore(user func(Restore)) func(Restore) {
	if c.cfg.Region == "" {
		return user
	}
	return func(r Restore) {
		if reg := c.restored.Load(); reg != nil && !r.DryRun {
			ctx, cancel := context.WithTimeout(context.Background(), 10*c.cfg.Timeout)
			_ = reg.Resync(ctx)
			cancel()
		}
		if user != nil {
			user(r)
		}
	}
}

// ValidRegion reports whether name may name a region (Config.Region, a
// peer's name): 1 to 64 letters, digits, '-' or '_'.
func ValidRegion(name string) bool { return regions.ValidName(name) }
