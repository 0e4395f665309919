package hotcount

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/durable"
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
	if c.Region == "" {
		if len(c.Peers) > 0 || c.ShipInterval != 0 || c.RegionRetention != 0 {
			return fmt.Errorf("%w: Peers, ShipInterval and RegionRetention need Region", ErrConfig)
		}
		return nil
	}
	if !regions.ValidName(c.Region) {
		return fmt.Errorf("%w: Region %q must be 1-64 letters, digits, - or _", ErrConfig, c.Region)
	}
	if c.ShipInterval < 0 {
		return fmt.Errorf("%w: ShipInterval must not be negative, got %v", ErrConfig, c.ShipInterval)
	}
	if c.RegionRetention < 0 {
		return fmt.Errorf("%w: RegionRetention must not be negative, got %v", ErrConfig, c.RegionRetention)
	}
	if len(c.Redis.Addrs) == 0 && c.Store == nil {
		return fmt.Errorf("%w: Region needs a Redis cache (Redis.Addrs)", ErrConfig)
	}
	names, addrs := make([]string, len(c.Peers)), make([][]string, len(c.Peers))
	for i, p := range c.Peers {
		names[i], addrs[i] = p.Name, p.Redis.Addrs
	}
	if err := regions.CheckPeers(c.Region, names, addrs); err != nil {
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
	var dr durable.Regions
	if r, ok := s.Durability.Store.(durable.Regions); ok {
		dr = r
	}
	// A counter is shipped again one flush interval after it changed, so
	// that a delta buffered in another process is shipped too.
	settle := s.ShipInterval
	if fl := s.table.FlushIntervals(); len(fl) > 0 {
		settle = max(settle, fl[len(fl)-1]+s.Timeout)
	}
	var err error
	c.reg, err = regions.New(regions.Config{
		Region: s.Region, Local: lc.Client(), Peers: peers, Totals: c.regionTotals(), Durable: dr,
		Retention: s.RegionRetention,
		Deadlines: c.eng.Deadlines, Expire: c.ownDeadline, Ended: c.regionEnded,
		Expiring: func(key string) bool { return s.table.Lookup(key).TTL != 0 },
		Interval: s.ShipInterval, Settle: settle, ReadTTL: s.Defaults.ReadCacheTTL, Timeout: s.Timeout, Clock: s.Clock,
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// ownDeadline gives this region's own counter key the deadline at (zero:
// none) that the counter's deadline register holds (set in a peer), as
// Expire and Persist do here, the durable record included.
func (c *Client) ownDeadline(ctx context.Context, key string, at time.Time) error {
	var ok bool
	var err error
	if at.IsZero() {
		ok, err = c.eng.Persist(ctx, key)
	} else {
		ok, err = c.eng.Expire(ctx, key, at)
	}
	if err == nil && ok && c.dur != nil {
		err = c.dur.Deadline(ctx, key, at)
	}
	return err
}

// regionEnded drops, after a durable-mode counter's expiry ran here, what
// the ended counter left in the durable store (its log events and total
// up to the deadline), so that its exact total, which this region ships,
// counts only the counter that started after it.
func (c *Client) regionEnded(ctx context.Context, key string, at time.Time) error {
	if c.cfg.table.Lookup(key).Mode != ModeDurable || c.cfg.Durability.Store == nil {
		return nil
	}
	return c.cfg.Durability.Store.ClearEnded(ctx, key, at)
}

// regionTotals reads this region's own totals of keys: the exact durable
// total of a durable-mode counter, the sum of the sub-counters of any
// other (without unflushed deltas: those are shipped once flushed).
func (c *Client) regionTotals() regions.Totals {
	var exact regions.Totals
	if st := c.cfg.Durability.Store; st != nil {
		exact = st.ExactMulti
	}
	return regions.SplitTotals(func(k string) bool { return c.cfg.table.Lookup(k).Mode == ModeDurable }, exact, c.sums)
}

// sums reads the sums of the sub-counters of keys.
func (c *Client) sums(ctx context.Context, keys []string) (map[string]int64, error) {
	reads, _, _, err := c.eng.Read(ctx, keys, nil)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(keys))
	for _, r := range reads {
		v, err := r.Sum()
		if err != nil {
			return nil, err
		}
		out[r.Key] = v
	}
	return out, nil
}

// global turns local readings into global ones: each gets every peer's
// contribution as last received, less the fences of clears.
func (c *Client) global(ctx context.Context, rs []*Reading, fresh bool) error {
	if c.reg == nil || len(rs) == 0 {
		return nil
	}
	keys := make([]string, len(rs))
	for i, r := range rs {
		keys[i] = r.Key
	}
	states, err := c.reg.Read(ctx, keys, fresh)
	if err != nil {
		return err
	}
	now := c.cfg.Clock.Now()
	for i, r := range rs {
		r.Value, r.Regions = states[i].Global(c.cfg.Region, r.Value, now)
	}
	return nil
}

// globalExact adds to the exact local total of a durable counter every
// peer's part as kept in the durable store (no cache is read).
func (c *Client) globalExact(ctx context.Context, r *Reading) error {
	if c.reg == nil {
		return nil
	}
	dr, ok := c.cfg.Durability.Store.(durable.Regions)
	if !ok {
		return nil
	}
	m, err := dr.LoadRegionParts(ctx, []string{r.Key})
	if err != nil {
		return err
	}
	st := regions.FromParts(c.cfg.Region, m[r.Key])
	r.Value, r.Regions = st.Global(c.cfg.Region, r.Value, c.cfg.Clock.Now())
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
