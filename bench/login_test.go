package bench

import (
	"crypto/tls"
	"errors"
	"slices"
	"testing"

	"github.com/hotcount/hotcount"
)

// TestBenchmarkLogin: redis-benchmark's direct cases log in as the Go
// clients do (--user only with a password, which -a gives), take the TLS
// arguments they are given, and messages hide the password.
func TestBenchmarkLogin(t *testing.T) {
	for _, tc := range []struct {
		cfg  LongTailConfig
		want []string
	}{
		{LongTailConfig{}, nil},
		{LongTailConfig{Login: hotcount.RedisConfig{Password: "pw"}}, []string{"-a", "pw"}},
		{LongTailConfig{Login: hotcount.RedisConfig{Username: "hc", Password: "pw"}}, []string{"--user", "hc", "-a", "pw"}},
		{LongTailConfig{Login: hotcount.RedisConfig{Username: "hc", Password: "pw", TLS: &tls.Config{}}, BenchmarkTLS: []string{"--tls", "--cacert", "ca.pem"}},
			[]string{"--user", "hc", "-a", "pw", "--tls", "--cacert", "ca.pem"}},
	} {
		if got := tc.cfg.benchmarkLogin(); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.cfg.Login, got, tc.want)
		}
	}
	got := redactPassword([]string{"-h", "h", "--user", "hc", "-a", "pw", "-q"})
	if want := []string{"-h", "h", "--user", "hc", "-a", "***", "-q"}; !slices.Equal(got, want) {
		t.Errorf("redactPassword: %q, want %q", got, want)
	}
}

// TestLoginConfig: login and TLS settings need seeds, and the long tail
// over TLS needs redis-benchmark's TLS arguments on the proxy path (and
// only with TLS).
func TestLoginConfig(t *testing.T) {
	login := hotcount.RedisConfig{Password: "pw"}
	if err := (Config{Key: "k", Login: login}).Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("login without seeds: %v", err)
	}
	if err := (Config{Key: "k", Redis: []string{"127.0.0.1:1"}, Login: login}).Validate(); err != nil {
		t.Errorf("login with seeds: %v", err)
	}
	seeds := []string{"127.0.0.1:1"}
	tlsLogin := hotcount.RedisConfig{TLS: &tls.Config{}}
	for _, tc := range []struct {
		cfg LongTailConfig
		ok  bool
	}{
		{LongTailConfig{Redis: seeds, Login: tlsLogin}, false},
		{LongTailConfig{Redis: seeds, Login: tlsLogin, Paths: []string{"library"}}, true},
		{LongTailConfig{Redis: seeds, Login: tlsLogin, BenchmarkTLS: []string{"--tls"}}, true},
		{LongTailConfig{Redis: seeds, BenchmarkTLS: []string{"--tls"}}, false},
		{LongTailConfig{Redis: seeds, Login: login}, true},
	} {
		_, err := tc.cfg.withDefaults()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("%+v: %v, want ok=%v", tc.cfg, err, tc.ok)
		}
	}
}
