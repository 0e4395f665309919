package testenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hotcount/hotcount/internal/rediscluster"
)

// TLSFiles are PEM files of a certificate authority made for one test, a
// server certificate it signed for 127.0.0.1 and localhost, and a client
// certificate it signed.
type TLSFiles struct {
	Dir                   string
	CA                    string // the CA's certificate
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// WriteTLSFiles makes a fresh CA (ECDSA P-256, valid for a day) and the
// server and client certificates it signs, and writes them as PEM files
// into dir.
func WriteTLSFiles(dir string) (TLSFiles, error) {
	f := TLSFiles{Dir: dir, CA: filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem")}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, fmt.Errorf("testenv: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hotcount test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return f, fmt.Errorf("testenv: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return f, fmt.Errorf("testenv: %w", err)
	}
	if err := writePEM(f.CA, "CERTIFICATE", caDER); err != nil {
		return f, err
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, certPath, keyPath string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return fmt.Errorf("testenv: %w", err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("testenv: %w", err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return fmt.Errorf("testenv: %w", err)
		}
		if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(keyPath, "EC PRIVATE KEY", kder)
	}
	if err := leaf(2, "hotcount test server", x509.ExtKeyUsageServerAuth, f.ServerCert, f.ServerKey); err != nil {
		return f, err
	}
	if err := leaf(3, "hotcount test client", x509.ExtKeyUsageClientAuth, f.ClientCert, f.ClientKey); err != nil {
		return f, err
	}
	return f, nil
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	return nil
}

// SecureOptions configures StartSecureNode.
type SecureOptions struct {
	// Password is the default user's password (requirepass); required.
	Password string
	// User and UserPassword, when set, add an ACL user with every
	// permission.
	User, UserPassword string
	// TLS also serves TLS on a second port, with certificates from
	// WriteTLSFiles; clients may present the client certificate.
	TLS bool
}

// SecureNode is a standalone redis-server that asks for a password and,
// with SecureOptions.TLS, also speaks TLS.
type SecureNode struct {
	*Node
	// TLSAddr is "127.0.0.1:port" of the TLS port; "" without TLS.
	TLSAddr string
	// Files are the CA and certificates of the TLS port.
	Files    TLSFiles
	password string
	certDir  string
}

// StartSecureNode starts a standalone redis-server with requirepass (and an
// ACL user, and a TLS port, as o says). The password is set once the node
// answers, so that the readiness check needs none; the node cannot be
// restarted with it. Stop removes the certificates too.
func StartSecureNode(ctx context.Context, o SecureOptions) (*SecureNode, error) {
	if o.Password == "" {
		return nil, fmt.Errorf("%w: a password is required", ErrInvalidOptions)
	}
	s := &SecureNode{password: o.Password}
	var args []string
	if o.TLS {
		dir, err := os.MkdirTemp("", "hotcount-tls-")
		if err != nil {
			return nil, fmt.Errorf("testenv: %w", err)
		}
		s.certDir = dir
		if s.Files, err = WriteTLSFiles(dir); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		port, err := rediscluster.FreePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s.TLSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		args = []string{"--tls-port", strconv.Itoa(port), "--tls-cert-file", s.Files.ServerCert, "--tls-key-file", s.Files.ServerKey,
			"--tls-ca-cert-file", s.Files.CA, "--tls-auth-clients", "optional"}
	}
	n, err := StartNode(ctx, NodeOptions{Args: args})
	if err != nil {
		if s.certDir != "" {
			os.RemoveAll(s.certDir)
		}
		return nil, err
	}
	s.Node = n
	cmds := [][]string{}
	if o.User != "" {
		cmds = append(cmds, []string{"ACL", "SETUSER", o.User, "on", ">" + o.UserPassword, "~*", "&*", "+@all"})
	}
	cmds = append(cmds, []string{"CONFIG", "SET", "requirepass", o.Password})
	for _, c := range cmds {
		if _, err := Do(ctx, n.Addr, c...); err != nil {
			s.Stop()
			return nil, err
		}
	}
	return s, nil
}

// Do runs one command on the plain port after AUTH with the default
// user's password.
func (s *SecureNode) Do(ctx context.Context, args ...string) (string, error) {
	rs, err := rediscluster.DoAll(ctx, s.Addr, []string{"AUTH", s.password}, args)
	if err != nil {
		return "", err
	}
	return rs[1], nil
}

// Stop stops the node and removes its certificates.
func (s *SecureNode) Stop() error {
	err := s.Node.Stop()
	if s.certDir != "" {
		os.RemoveAll(s.certDir)
	}
	return err
}

// StartTLSCluster starts a Redis Cluster whose nodes serve TLS with fresh
// certificates from WriteTLSFiles, in a temporary directory (Files.Dir)
// that the caller removes after Cluster.Stop. The nodes speak TLS to each
// other on the cluster bus and for replication; Cluster.TLSSeeds are
// their TLS addresses, and their plain ports stay open for the harness's
// own commands.
func StartTLSCluster(ctx context.Context, o ClusterOptions) (*Cluster, TLSFiles, error) {
	dir, err := os.MkdirTemp("", "hotcount-tls-")
	if err != nil {
		return nil, TLSFiles{}, fmt.Errorf("testenv: %w", err)
	}
	files, err := WriteTLSFiles(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, files, err
	}
	o.TLS = &rediscluster.TLS{CertFile: files.ServerCert, KeyFile: files.ServerKey,
		ClientCertFile: files.ClientCert, ClientKeyFile: files.ClientKey, CAFile: files.CA}
	c, err := rediscluster.StartCluster(ctx, o)
	if err != nil {
		os.RemoveAll(dir)
		return nil, files, err
	}
	return c, files, nil
}
