package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 10: TLS 1.2 still offered CBC-SHA1 suites. The attack is a client that offers
// only weak suites or old versions: the handshake must fail.
func TestTLSOffersOnlyAEAD(t *testing.T) {
	b := load(t, Config{Dir: t.TempDir(), Hosts: []string{"127.0.0.1"}})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", b.TLSConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b.CAPEM)
	dial := func(cfg *tls.Config) error {
		cfg.RootCAs, cfg.ServerName = pool, "127.0.0.1"
		c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err == nil {
			c.Close()
		}
		return err
	}
	for name, cfg := range map[string]*tls.Config{
		"CBC-SHA1 only": {MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA}},
		"CBC-SHA256":    {MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256}},
		"TLS 1.1":       {MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11},
	} {
		if err := dial(cfg); err == nil {
			t.Errorf("%s: handshake succeeded", name)
		}
	}
	for name, cfg := range map[string]*tls.Config{
		"TLS 1.2 AES-GCM": {MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}},
		"TLS 1.3":         {MinVersion: tls.VersionTLS13},
		"Go defaults, as CockroachDB's sink client": {},
	} {
		if err := dial(cfg); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Issue 10: an existing certificate directory kept mode 0777, and a 0644 key was reused
// without a word. The directory is narrowed to 0700; a readable key is refused.
func TestPermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Dir: dir, Hosts: []string{"localhost"}}
	b := load(t, cfg)
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 || len(b.Tightened) != 1 {
		t.Errorf("directory mode %04o, tightened %v; want 0700 and reported", fi.Mode().Perm(), b.Tightened)
	}
	if b = load(t, cfg); len(b.Tightened) != 0 {
		t.Errorf("tightened again: %v", b.Tightened)
	}
	for _, key := range []string{CAKeyFile, ServerKeyFile} {
		path := filepath.Join(dir, key)
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(cfg)
		if !errors.Is(err, ErrLoosePermissions) || !strings.Contains(err.Error(), "chmod 600") || !strings.Contains(err.Error(), key) {
			t.Errorf("%s at 0644: %v", key, err)
		}
		if err := os.Chmod(path, 0o600); err != nil {
			t.Fatal(err)
		}
		if b := load(t, cfg); len(b.Generated) != 0 {
			t.Errorf("after chmod 600 the pair was regenerated: %v", b.Generated)
		}
	}
}

func TestSecret(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	v, created, err := Secret(dir, WebhookTokenFile)
	if err != nil || !created || len(v) != 64 {
		t.Fatalf("Secret = %q, %v, %v", v, created, err)
	}
	fi, err := os.Stat(filepath.Join(dir, WebhookTokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v %v", fi, err)
	}
	again, created, err := Secret(dir, WebhookTokenFile)
	if err != nil || created || again != v {
		t.Fatalf("second Secret = %q, %v, %v; want the same, not created", again, created, err)
	}
	if err := os.Chmod(filepath.Join(dir, WebhookTokenFile), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Secret(dir, WebhookTokenFile); !errors.Is(err, ErrLoosePermissions) {
		t.Fatalf("a group-readable secret was used: %v", err)
	}
}
