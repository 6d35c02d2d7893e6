// Package certs gives the webhook server its TLS configuration.
//
// Either the operator supplies a certificate and key (CertFile, KeyFile), or the package
// keeps a private CA and a server certificate in a directory: generated on first start,
// reused afterwards, the server certificate re-issued when it nears expiry or no longer
// covers the configured hosts. The CA is kept as long as it is valid, so a changefeed
// created with its base64 PEM (ca_cert=…) keeps trusting re-issued server certificates.
//
// Files in Dir: ca.pem, ca-key.pem (0600), server.pem, server-key.pem (0600), and ca.b64,
// the one-line base64 of ca.pem that CockroachDB's ca_cert sink parameter takes; beside
// them, generated secrets such as webhook-token (0600, see Secret).
//
// Permissions: Dir itself is tightened to 0700 when it is more open (Bundle.Tightened
// says so). A private key or secret in Dir that group or others may read is refused,
// not tightened or reused: inboxd wrote it 0600, so someone widened it and it may
// already have been copied; the operator decides (chmod 600 to keep it, or delete it
// to have a new one generated), as ssh does. An operator's KeyFile follows the rule of
// every secret file an operator names (secretfile.Read): refused when every user can
// read it.
package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/secretfile"
)

// File names inside Config.Dir.
const (
	CAFile        = "ca.pem"
	CAKeyFile     = "ca-key.pem"
	ServerFile    = "server.pem"
	ServerKeyFile = "server-key.pem"
	CABase64File  = "ca.b64"
)

// Config says where the certificates come from.
type Config struct {
	// CertFile and KeyFile, when both set, are used as they are (nothing is generated).
	CertFile, KeyFile string
	// CAFile, with CertFile/KeyFile, is the CA to hand to CockroachDB; optional.
	CAFile string
	// Dir keeps the generated CA and server certificate. Required unless CertFile is set.
	Dir string
	// Hosts are the server certificate's SANs (DNS names or IPs); default DefaultHosts().
	Hosts []string
	// ServerValidity defaults to 397 days, CAValidity to 10 years.
	ServerValidity, CAValidity time.Duration
	// RenewBefore re-issues a certificate this long before it expires; default 30 days.
	RenewBefore time.Duration
	// Now is the clock, for tests; default time.Now.
	Now func() time.Time
}

// Bundle is the result of Load.
type Bundle struct {
	// TLSConfig serves the webhook (TLS 1.2+).
	TLSConfig *tls.Config
	// Leaf is the server certificate.
	Leaf *x509.Certificate
	// CAPEM is the CA certificate in PEM (nil when an operator certificate came without CAFile).
	CAPEM []byte
	// CABase64 is base64(CAPEM): the value of the ca_cert sink parameter.
	CABase64 string
	// Generated reports which files this call (re)wrote: "ca", "server".
	Generated []string
	// Tightened reports the paths whose permissions this call narrowed (Dir to 0700).
	Tightened []string
}

// maxPEMBytes bounds an operator's key file: a PEM key is a few KiB.
const maxPEMBytes = 1 << 20

// ErrLoosePermissions is wrapped by the error for a key or secret file in Dir (files
// inboxd generated, 0600) that group or others can read.
var ErrLoosePermissions = errors.New("readable by group or others")

// DefaultHosts are localhost, 127.0.0.1, ::1 and the machine's host name (in Docker,
// the service's "hostname:").
func DefaultHosts() []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil && h != "" && !slices.Contains(hosts, h) {
		hosts = append(hosts, h)
	}
	return hosts
}

// Load returns the webhook's TLS material as Config describes.
func Load(cfg Config) (*Bundle, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ServerValidity == 0 {
		cfg.ServerValidity = 397 * 24 * time.Hour
	}
	if cfg.CAValidity == 0 {
		cfg.CAValidity = 10 * 365 * 24 * time.Hour
	}
	if cfg.RenewBefore == 0 {
		cfg.RenewBefore = 30 * 24 * time.Hour
	}
	if len(cfg.Hosts) == 0 {
		cfg.Hosts = DefaultHosts()
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" {
		return loadGiven(cfg)
	}
	if cfg.Dir == "" {
		return nil, errors.New("certs: either a certificate and key or a directory is required")
	}
	return loadOrGenerate(cfg)
}

func loadGiven(cfg Config) (*Bundle, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, errors.New("certs: certificate and key files go together")
	}
	// The operator's key follows the rule of every secret file an operator names
	// (secretfile.Read): a world-readable one is refused, as the broker's is.
	keyPEM, err := secretfile.Read(cfg.KeyFile, maxPEMBytes)
	if err != nil {
		return nil, fmt.Errorf("webhook TLS key: %w", err)
	}
	certPEM, err := os.ReadFile(cfg.CertFile)
	if err != nil {
		return nil, fmt.Errorf("reading certificate %s: %w", cfg.CertFile, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading certificate %s with key %s: %w", cfg.CertFile, cfg.KeyFile, err)
	}
	b := &Bundle{TLSConfig: serverConfig(pair), Leaf: pair.Leaf}
	if cfg.CAFile != "" {
		ca, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading CA %s: %w", cfg.CAFile, err)
		}
		if _, err := parseCert(ca); err != nil {
			return nil, fmt.Errorf("CA %s: %w", cfg.CAFile, err)
		}
		b.CAPEM, b.CABase64 = ca, base64.StdEncoding.EncodeToString(ca)
	}
	return b, nil
}

func loadOrGenerate(cfg Config) (*Bundle, error) {
	b := &Bundle{}
	tightened, err := privateDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if tightened {
		b.Tightened = append(b.Tightened, cfg.Dir)
	}
	for _, name := range []string{CAKeyFile, ServerKeyFile} {
		if err := checkPrivate(filepath.Join(cfg.Dir, name)); err != nil {
			return nil, err
		}
	}
	now := cfg.Now()

	ca, caKey, caPEM, err := readPair(cfg.Dir, CAFile, CAKeyFile)
	if err != nil || !fresh(ca, now, cfg.RenewBefore) || !ca.IsCA {
		ca, caKey, caPEM, err = newCA(cfg, now)
		if err != nil {
			return nil, err
		}
		b.Generated = append(b.Generated, "ca")
	}

	leaf, leafKey, leafPEM, err := readPair(cfg.Dir, ServerFile, ServerKeyFile)
	if err != nil || len(b.Generated) > 0 || !fresh(leaf, now, cfg.RenewBefore) ||
		!covers(leaf, cfg.Hosts) || leaf.CheckSignatureFrom(ca) != nil {
		leaf, leafKey, leafPEM, err = newServer(cfg, now, ca, caKey)
		if err != nil {
			return nil, err
		}
		b.Generated = append(b.Generated, "server")
	}

	b.CAPEM = caPEM
	b.CABase64 = base64.StdEncoding.EncodeToString(caPEM)
	// ca.b64 is rewritten when missing or stale, so it always matches ca.pem.
	if cur, err := os.ReadFile(filepath.Join(cfg.Dir, CABase64File)); err != nil || string(bytes.TrimSpace(cur)) != b.CABase64 {
		if err := writeFile(cfg.Dir, CABase64File, []byte(b.CABase64+"\n"), 0o644); err != nil {
			return nil, err
		}
	}
	keyDER, err := x509.MarshalECPrivateKey(leafKey)
	if err != nil {
		return nil, fmt.Errorf("encoding server key: %w", err)
	}
	pair, err := tls.X509KeyPair(leafPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		return nil, fmt.Errorf("assembling server certificate: %w", err)
	}
	b.TLSConfig, b.Leaf = serverConfig(pair), leaf
	return b, nil
}

// serverConfig allows TLS 1.3, and TLS 1.2 with forward-secret AEAD suites only (no
// CBC, no SHA-1 MACs, no static RSA key exchange). TLS 1.3 is not the floor: the sink's
// client (CockroachDB, pkg/ccl/changefeedccl/sink_webhook_v2.go, makeWebhookClient)
// sets no MinVersion/MaxVersion in its tls.Config, so Go's defaults (1.2 to 1.3) apply
// and it negotiates 1.3 with us; the 1.2 floor is kept for builds whose TLS stack is
// limited to 1.2 (FIPS-mode Go before 1.24) and for operators' health checkers.
func serverConfig(pair tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: AEADCipherSuites,
		Certificates: []tls.Certificate{pair},
	}
}

// AEADCipherSuites are the TLS 1.2 suites served (TLS 1.3 suites are all AEAD and not
// configurable in Go). RSA ones serve operator-supplied RSA certificates.
var AEADCipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// privateDir creates dir (0700), or narrows an existing one to 0700, reporting whether
// it had to: a directory others can write lets them swap the CA the feed trusts.
func privateDir(dir string) (tightened bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("creating certificate directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return false, fmt.Errorf("checking certificate directory: %w", err)
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return false, nil
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return false, fmt.Errorf("narrowing certificate directory %s (mode %04o) to 0700: %w", dir, fi.Mode().Perm(), err)
	}
	return true, nil
}

// checkPrivate refuses an existing file that group or others can read or write.
func checkPrivate(path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s has mode %04o, %w: it may have been copied; chmod 600 it to keep using it, or delete it to have a new one generated",
			path, perm, ErrLoosePermissions)
	}
	return nil
}

// WebhookTokenFile is the generated webhook token in the certificate directory.
const WebhookTokenFile = "webhook-token"

// Secret returns the secret kept in dir/name (0600), generating it (32 random bytes,
// hex) when the file is missing, with created true. A secret that group or others can
// read is refused, like a key.
func Secret(dir, name string) (value string, created bool, err error) {
	if _, err := privateDir(dir); err != nil {
		return "", false, err
	}
	path := filepath.Join(dir, name)
	if err := checkPrivate(path); err != nil {
		return "", false, err
	}
	b, err := os.ReadFile(path)
	if err == nil {
		if v := strings.TrimSpace(string(b)); v != "" {
			return v, false, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", false, fmt.Errorf("reading %s: %w", path, err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", false, fmt.Errorf("generating %s: %w", name, err)
	}
	v := hex.EncodeToString(raw)
	// Link, not rename: when serve and changefeed create start together, the first
	// secret written wins and the other process reads it instead of replacing it.
	tmp, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return "", false, fmt.Errorf("writing %s: %w", name, err)
	}
	defer os.Remove(tmp.Name())
	if err = tmp.Chmod(0o600); err == nil {
		_, err = tmp.WriteString(v + "\n")
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", false, fmt.Errorf("writing %s: %w", name, err)
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, os.ErrExist) {
		return Secret(dir, name)
	} else if err != nil {
		return "", false, fmt.Errorf("writing %s: %w", name, err)
	}
	return v, true, nil
}

// fresh reports whether c is valid now and for at least renewBefore more.
func fresh(c *x509.Certificate, now time.Time, renewBefore time.Duration) bool {
	return c != nil && !now.Before(c.NotBefore) && now.Add(renewBefore).Before(c.NotAfter)
}

// covers reports whether every host is in c's SANs.
func covers(c *x509.Certificate, hosts []string) bool {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
				return false
			}
		} else if !slices.Contains(c.DNSNames, strings.ToLower(h)) {
			return false
		}
	}
	return true
}

func newCA(cfg Config, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generating CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "inboxd webhook CA", Organization: []string{"inboxd"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(cfg.CAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	return issue(cfg.Dir, CAFile, CAKeyFile, tmpl, tmpl, key, key)
}

func newServer(cfg Config, now time.Time, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generating server key: %w", err)
	}
	notAfter := now.Add(cfg.ServerValidity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cfg.Hosts[0], Organization: []string{"inboxd"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range cfg.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, strings.ToLower(h))
		}
	}
	return issue(cfg.Dir, ServerFile, ServerKeyFile, tmpl, ca, key, caKey)
}

// issue signs tmpl with parentKey and writes the certificate (0644) and key (0600).
func issue(dir, certName, keyName string, tmpl, parent *x509.Certificate, key, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("signing %s: %w", certName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parsing %s: %w", certName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("encoding %s: %w", keyName, err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	// Key first: a certificate on disk without its key would be read back as broken anyway.
	if err := writeFile(dir, keyName, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, nil, nil, err
	}
	if err := writeFile(dir, certName, certPEM, 0o644); err != nil {
		return nil, nil, nil, err
	}
	return cert, key, certPEM, nil
}

// readPair reads a certificate and its EC key from dir; any problem is an error, which
// callers answer by generating a new pair.
func readPair(dir, certName, keyName string) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, certName))
	if err != nil {
		return nil, nil, nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, keyName))
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", certName, err)
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, nil, nil, fmt.Errorf("%s: no PEM block", keyName)
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", keyName, err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, nil, fmt.Errorf("%s does not match %s", keyName, certName)
	}
	return cert, key, certPEM, nil
}

func parseCert(pemBytes []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return x509.ParseCertificate(block.Bytes)
}

// writeFile replaces dir/name atomically with the given permissions.
func writeFile(dir, name string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err)) // crypto/rand never fails on supported platforms
	}
	return n
}

// WebhookToken is the token the webhook demands and the changefeed sends: token when
// set (INBOXD_WEBHOOK_TOKEN), else the secret kept in dir, generated on first use
// (created reports that). The webhook is never open.
func WebhookToken(token, dir string) (_ string, created bool, _ error) {
	if token != "" {
		return token, false, nil
	}
	token, created, err := Secret(dir, WebhookTokenFile)
	if err != nil {
		return "", false, fmt.Errorf("INBOXD_WEBHOOK_TOKEN is empty and the generated token in INBOXD_CERT_DIR is unusable (set the variable, or fix the file): %w", err)
	}
	return token, created, nil
}
