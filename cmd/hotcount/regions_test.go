package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRegionConfig: region, peers (with the same login options as redis)
// and ship_interval reach the library's Config; bad entries are refused
// naming the peer.
func TestRegionConfig(t *testing.T) {
	pass := filepath.Join(t.TempDir(), "us.pass")
	if err := os.WriteFile(pass, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, `
redis: ["10.0.1.1:7000"]
region: eu
ship_interval: 500ms
region_retention: 48h
peers:
  - {name: us, redis: ["10.0.2.1:7000"], username: hc, password_file: `+pass+`}
  - {name: ap, redis: ["10.0.3.1:7000", "10.0.3.2:7000"]}
`)
	c, err := loadConfig(map[string]string{"config": file}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	hc := clientConfig(c, nil)
	if hc.Region != "eu" || hc.ShipInterval != 500*time.Millisecond || hc.RegionRetention != 48*time.Hour || len(hc.Peers) != 2 {
		t.Fatalf("library config: region %q, ship %v, retention %v, peers %+v", hc.Region, hc.ShipInterval, hc.RegionRetention, hc.Peers)
	}
	us := hc.Peers[0]
	if us.Name != "us" || us.Redis.Addrs[0] != "10.0.2.1:7000" || us.Redis.Username != "hc" || us.Redis.Password != "s3cret" {
		t.Fatalf("peer us = %+v", us)
	}
	// The flag and the environment set region too.
	c, err = loadConfig(map[string]string{"config": file, "region": "eu-2"}, env(nil))
	if err != nil || c.Region != "eu-2" || c.Sources[setRegion] != "flag --region" {
		t.Fatalf("region flag: %q from %q, %v", c.Region, c.Sources[setRegion], err)
	}

	for _, tc := range []struct{ name, file, want string }{
		{"peers without region", "redis: [a:1]\npeers:\n  - {name: us, redis: [b:1]}\n", "need region"},
		{"region without redis", "region: eu\n", "needs redis"},
		{"peer without redis", "redis: [a:1]\nregion: eu\npeers:\n  - {name: us}\n", "peers[0]"},
		{"bad peer name", "redis: [a:1]\nregion: eu\npeers:\n  - {name: u s, redis: [b:1]}\n", "u s"},
		{"peer named as region", "redis: [a:1]\nregion: eu\npeers:\n  - {name: eu, redis: [b:1]}\n", "twice"},
		{"unknown peer field", "redis: [a:1]\nregion: eu\npeers:\n  - {name: us, redis: [b:1], passwd: x}\n", "passwd"},
		{"bad region", "redis: [a:1]\nregion: \"eu/1\"\n", "eu/1"},
		{"negative ship interval", "redis: [a:1]\nregion: eu\nship_interval: -1s\n", "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig(map[string]string{"config": writeFile(t, tc.file)}, env(nil))
			if !errors.Is(err, errInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want errInvalidConfig mentioning %q", err, tc.want)
			}
		})
	}
}
