package regions

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/durable"
)

// Link is how to reach a peer region's cache.
type Link struct {
	// Addrs are the peer cache's seed addresses.
	Addrs []string
	// Username and Password log in (ACL); TLS, when set, encrypts.
	Username, Password string
	TLS                *tls.Config
	// Dial, when set, opens the connections to the peer's nodes instead
	// of a TCP dial of the address the cluster announces.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Timeout bounds a dial and a write.
	Timeout time.Duration
}

// Connect opens a client of the peer cache l names (Peer.Connect).
func Connect(ctx context.Context, l Link) (rueidis.Client, error) {
	opt := rueidis.ClientOption{
		InitAddress:      l.Addrs,
		Username:         l.Username,
		Password:         l.Password,
		TLSConfig:        l.TLS,
		DisableCache:     true,
		ClientSetInfo:    rueidis.DisableClientSetInfo,
		ConnWriteTimeout: 2 * l.Timeout,
		Dialer:           net.Dialer{Timeout: l.Timeout},
	}
	if l.Dial != nil {
		opt.DialCtxFn = func(ctx context.Context, addr string, _ *net.Dialer, cfg *tls.Config) (net.Conn, error) {
			conn, err := l.Dial(ctx, addr)
			if err != nil || cfg == nil {
				return conn, err
			}
			tc := tls.Client(conn, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				conn.Close()
				return nil, err
			}
			return tc, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return rueidis.NewClient(opt)
}

// FromParts builds the State of a counter in region self from the parts
// its durable store keeps (durable.Regions.LoadRegionParts): the own
// contribution gives the own epoch, the rest are merged. An exact read
// adds the peers' parts without reading the cache.
func FromParts(self string, parts []durable.RegionPart) State {
	var st State
	for _, p := range parts {
		if p.Origin == self && p.Kind == durable.PartContribution {
			st.Epoch = p.Epoch
			continue
		}
		st.Merge(p)
	}
	return st
}

// CheckPeers checks a region's peers, named in names with their cache
// addresses in addrs: each name valid and named once (the region's own
// included), each with host:port addresses.
func CheckPeers(region string, names []string, addrs [][]string) error {
	seen := map[string]bool{region: true}
	for i, n := range names {
		switch {
		case !ValidName(n):
			return fmt.Errorf("peer name %q must be 1-64 letters, digits, - or _", n)
		case seen[n]:
			return fmt.Errorf("region %q named twice in Region and Peers", n)
		case i >= len(addrs) || len(addrs[i]) == 0:
			return fmt.Errorf("peer %q has no Redis addresses", n)
		}
		for _, a := range addrs[i] {
			if strings.TrimSpace(a) == "" || !strings.Contains(a, ":") {
				return fmt.Errorf("peer %q: Redis address %q is not host:port", n, a)
			}
		}
		seen[n] = true
	}
	return nil
}

// Settings are a region's own settings, as a Client's Config gives them.
type Settings struct {
	// Region is the region's name; empty means no regions.
	Region string
	// Peers are the peers' names, PeerAddrs their cache addresses.
	Peers     []string
	PeerAddrs [][]string
	// Interval and Retention are Config.Interval and Config.Retention.
	Interval, Retention time.Duration
	// Cache reports that the region has a cache of its own (Redis).
	Cache bool
}

// CheckSettings checks s: without a region, no peer, interval or
// retention; with one, a valid name, no negative duration, a cache, and
// peers as CheckPeers wants them.
func CheckSettings(s Settings) error {
	if s.Region == "" {
		if len(s.Peers) > 0 || s.Interval != 0 || s.Retention != 0 {
			//lint:ignore ST1005 the message names Config's fields.
			return errors.New("Peers, ShipInterval and RegionRetention need Region")
		}
		return nil
	}
	switch {
	case !ValidName(s.Region):
		return fmt.Errorf("Region %q must be 1-64 letters, digits, - or _", s.Region)
	case s.Interval < 0:
		return fmt.Errorf("ShipInterval must not be negative, got %v", s.Interval)
	case s.Retention < 0:
		return fmt.Errorf("RegionRetention must not be negative, got %v", s.Retention)
	case !s.Cache:
		return errors.New("Region needs a Redis cache (Redis.Addrs)")
	}
	return CheckPeers(s.Region, s.Peers, s.PeerAddrs)
}

// SplitTotals returns the Totals that reads the exact durable totals of
// the counters exact names (exactMulti) and the sub-counters' sums of the
// others (sums).
func SplitTotals(exact func(key string) bool, exactMulti, sums Totals) Totals {
	return func(ctx context.Context, keys []string) (map[string]int64, error) {
		out := make(map[string]int64, len(keys))
		var cached, ex []string
		for _, k := range keys {
			if exact(k) {
				ex = append(ex, k)
			} else {
				cached = append(cached, k)
			}
		}
		for _, part := range []struct {
			keys []string
			read Totals
		}{{ex, exactMulti}, {cached, sums}} {
			if len(part.keys) == 0 {
				continue
			}
			if part.read == nil {
				return nil, fmt.Errorf("regions: no totals for %q", part.keys[0])
			}
			m, err := part.read(ctx, part.keys)
			if err != nil {
				return nil, err
			}
			for k, v := range m {
				out[k] = v
			}
		}
		return out, nil
	}
}
