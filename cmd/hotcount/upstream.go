package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/hotcount/hotcount"
)

// redisSecurity says how to log in to Redis (ACL user and password, or a
// password alone) and how to secure the connection with TLS. It is shared
// by serve (settings redis_username, redis_password, redis_password_file,
// redis_tls, redis_tls_ca, redis_tls_cert, redis_tls_key,
// redis_tls_server_name) and by the commands that reach Redis directly
// (flags of the same names, with dashes).
type redisSecurity struct {
	Username     string `yaml:"redis_username"`
	Password     string `yaml:"redis_password"`
	PasswordFile string `yaml:"redis_password_file"`
	TLS          bool   `yaml:"redis_tls"`
	CA           string `yaml:"redis_tls_ca"`
	Cert         string `yaml:"redis_tls_cert"`
	Key          string `yaml:"redis_tls_key"`
	ServerName   string `yaml:"redis_tls_server_name"`
}

// register adds the flags of a command that reaches Redis directly.
func (r *redisSecurity) register(fs *flagSet) {
	fs.StringVar(&r.Username, "redis-username", "", "Redis ACL user (with --redis-password-file or $HOTCOUNT_REDIS_PASSWORD)")
	fs.StringVar(&r.PasswordFile, "redis-password-file", "", "file holding the Redis password (default: $HOTCOUNT_REDIS_PASSWORD)")
	fs.BoolVar(&r.TLS, "redis-tls", false, "connect to Redis with TLS (system roots unless --redis-tls-ca)")
	fs.StringVar(&r.CA, "redis-tls-ca", "", "PEM file of the CA that signed the Redis certificates (implies --redis-tls)")
	fs.StringVar(&r.Cert, "redis-tls-cert", "", "PEM client certificate for Redis (with --redis-tls-key; implies --redis-tls)")
	fs.StringVar(&r.Key, "redis-tls-key", "", "PEM key of --redis-tls-cert")
	fs.StringVar(&r.ServerName, "redis-tls-server-name", "", "name the Redis certificates are checked against (default: the host of each address)")
}

// tlsOn reports whether the settings ask for TLS: --redis-tls, or a CA,
// a client certificate or a server name, which imply it.
func (r redisSecurity) tlsOn() bool {
	return r.TLS || r.CA != "" || r.Cert != "" || r.ServerName != ""
}

// set reports whether any setting is given.
func (r redisSecurity) set() bool { return r != redisSecurity{} }

// resolve returns the Redis login and TLS settings: the password read from
// its file (trailing newline dropped) and the TLS configuration built from
// the CA, the client certificate and the server name. Nothing is
// configured when no setting is given.
func (r redisSecurity) resolve(addrs []string) (hotcount.RedisConfig, error) {
	rc := hotcount.RedisConfig{Addrs: append([]string(nil), addrs...), Username: r.Username, Password: r.Password}
	if r.Password != "" && r.PasswordFile != "" {
		return rc, errors.New("redis_password and redis_password_file exclude each other")
	}
	if r.PasswordFile != "" {
		p, err := readSecret(r.PasswordFile)
		if err != nil {
			return rc, fmt.Errorf("redis_password_file: %w", err)
		}
		rc.Password = p
	}
	if r.Username != "" && rc.Password == "" {
		return rc, errors.New("redis_username needs a password (redis_password or redis_password_file)")
	}
	if (r.Cert == "") != (r.Key == "") {
		return rc, errors.New("redis_tls_cert and redis_tls_key go together")
	}
	if !r.tlsOn() {
		return rc, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: r.ServerName}
	if r.CA != "" {
		pem, err := os.ReadFile(r.CA)
		if err != nil {
			return rc, fmt.Errorf("redis_tls_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return rc, fmt.Errorf("redis_tls_ca: %s holds no PEM certificate", r.CA)
		}
		tc.RootCAs = pool
	}
	if r.Cert != "" {
		pair, err := tls.LoadX509KeyPair(r.Cert, r.Key)
		if err != nil {
			return rc, fmt.Errorf("redis_tls_cert and redis_tls_key: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	rc.TLS = tc
	return rc, nil
}

// forRedis returns the Redis settings of a command that reaches the Redis
// of addrs with these flags: without --redis-password-file the password
// comes from $HOTCOUNT_REDIS_PASSWORD. With no addrs (a command's
// embedded store) the flags are an error and the environment is not
// read.
func (r redisSecurity) forRedis(addrs []string) (hotcount.RedisConfig, error) {
	if len(addrs) == 0 {
		if r.set() {
			return hotcount.RedisConfig{}, errors.New("the --redis-* login and TLS flags need --redis")
		}
		return hotcount.RedisConfig{}, nil
	}
	if r.PasswordFile == "" {
		r.Password = os.Getenv(envRedisPass)
	}
	return r.resolve(addrs)
}

// benchmarkTLS returns redis-benchmark's arguments for the TLS these
// flags ask for: --tls, then --cacert, --cert and --key with the same
// files, and --sni with the server name; none without TLS.
func (r redisSecurity) benchmarkTLS() []string {
	if !r.tlsOn() {
		return nil
	}
	args := []string{"--tls"}
	if r.CA != "" {
		args = append(args, "--cacert", r.CA)
	}
	if r.Cert != "" {
		args = append(args, "--cert", r.Cert, "--key", r.Key)
	}
	if r.ServerName != "" {
		args = append(args, "--sni", r.ServerName)
	}
	return args
}

// readSecret reads a secret from a file: the whole file without the
// surrounding white space, never empty.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}
