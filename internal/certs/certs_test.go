package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func load(t *testing.T, cfg Config) *Bundle {
	t.Helper()
	b, err := Load(cfg)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return b
}

func TestGenerateThenReuse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	cfg := Config{Dir: dir, Hosts: []string{"localhost", "127.0.0.1", "inboxd"}}

	first := load(t, cfg)
	if !slices.Equal(first.Generated, []string{"ca", "server"}) {
		t.Errorf("first Load generated %v, want [ca server]", first.Generated)
	}
	for name, want := range map[string]os.FileMode{
		CAFile: 0o644, CAKeyFile: 0o600, ServerFile: 0o644, ServerKeyFile: 0o600, CABase64File: 0o644,
	} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("stat %s: %v", name, err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", name, fi.Mode().Perm(), want)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("directory not created 0700: %v %v", fi.Mode().Perm(), err)
	}
	b64, err := os.ReadFile(filepath.Join(dir, CABase64File))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(b64)) != first.CABase64 {
		t.Error("ca.b64 differs from Bundle.CABase64")
	}
	pemBytes, err := base64.StdEncoding.DecodeString(first.CABase64)
	if err != nil || string(pemBytes) != string(first.CAPEM) {
		t.Fatalf("CABase64 does not decode to CAPEM: %v", err)
	}
	if got := first.Leaf.DNSNames; !slices.Equal(got, []string{"localhost", "inboxd"}) {
		t.Errorf("DNS SANs %v", got)
	}
	if len(first.Leaf.IPAddresses) != 1 || !first.Leaf.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("IP SANs %v", first.Leaf.IPAddresses)
	}

	second := load(t, cfg)
	if len(second.Generated) != 0 {
		t.Errorf("second Load regenerated %v", second.Generated)
	}
	if second.CABase64 != first.CABase64 || !second.Leaf.Equal(first.Leaf) {
		t.Error("second Load did not reuse the certificates")
	}
}

func TestHandshakeTrustsOnlyCA(t *testing.T) {
	b := load(t, Config{Dir: t.TempDir(), Hosts: []string{"localhost", "127.0.0.1"}})

	ln, err := tls.Listen("tcp", "127.0.0.1:0", b.TLSConfig)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b.CAPEM) {
		t.Fatal("CA PEM not accepted")
	}
	get := func(roots *x509.CertPool, url string) error {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
		defer c.CloseIdleConnections()
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if string(body) != "ok" {
			t.Errorf("body %q", body)
		}
		return nil
	}
	port := ln.Addr().(*net.TCPAddr).Port
	for _, host := range []string{"127.0.0.1", "localhost"} {
		url := "https://" + net.JoinHostPort(host, itoa(port)) + "/"
		if err := get(pool, url); err != nil {
			t.Errorf("GET %s trusting the CA: %v", url, err)
		}
	}
	// Without the CA (system roots only) the handshake must fail.
	if err := get(nil, "https://127.0.0.1:"+itoa(port)+"/"); err == nil {
		t.Error("handshake succeeded without trusting the CA")
	}
	// A name outside the SANs must fail too.
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "elsewhere"})
	if err == nil {
		conn.Close()
		t.Error("handshake succeeded for a host name outside the SANs")
	}
}

func TestExpiryRegeneration(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	cfg := Config{Dir: dir, Hosts: []string{"localhost"}, ServerValidity: 90 * 24 * time.Hour,
		CAValidity: 365 * 24 * time.Hour, RenewBefore: 10 * 24 * time.Hour, Now: func() time.Time { return now }}

	first := load(t, cfg)

	now = start.Add(70 * 24 * time.Hour) // 20 days left: still fresh
	if b := load(t, cfg); len(b.Generated) != 0 {
		t.Fatalf("regenerated too early: %v", b.Generated)
	}

	now = start.Add(85 * 24 * time.Hour) // 5 days left: server re-issued, CA kept
	b := load(t, cfg)
	if !slices.Equal(b.Generated, []string{"server"}) {
		t.Fatalf("near expiry generated %v, want [server]", b.Generated)
	}
	if b.CABase64 != first.CABase64 {
		t.Error("CA changed although it was still valid: existing changefeeds would stop trusting the webhook")
	}
	if !b.Leaf.NotAfter.After(now.Add(80 * 24 * time.Hour)) {
		t.Errorf("new server certificate expires %v", b.Leaf.NotAfter)
	}
	if err := b.Leaf.CheckSignatureFrom(mustParse(t, first.CAPEM)); err != nil {
		t.Errorf("new server certificate not signed by the kept CA: %v", err)
	}

	now = start.Add(360 * 24 * time.Hour) // CA near expiry: everything regenerated
	b = load(t, cfg)
	if !slices.Equal(b.Generated, []string{"ca", "server"}) {
		t.Fatalf("CA near expiry generated %v, want [ca server]", b.Generated)
	}
	if b.CABase64 == first.CABase64 {
		t.Error("CA not regenerated")
	}
}

func TestHostsChangeReissuesServer(t *testing.T) {
	dir := t.TempDir()
	first := load(t, Config{Dir: dir, Hosts: []string{"localhost"}})
	b := load(t, Config{Dir: dir, Hosts: []string{"localhost", "inboxd"}})
	if !slices.Equal(b.Generated, []string{"server"}) || b.CABase64 != first.CABase64 {
		t.Errorf("hosts change: generated %v, CA kept %v", b.Generated, b.CABase64 == first.CABase64)
	}
}

func TestCorruptFilesRegenerate(t *testing.T) {
	dir := t.TempDir()
	load(t, Config{Dir: dir, Hosts: []string{"localhost"}})
	if err := os.WriteFile(filepath.Join(dir, ServerKeyFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b := load(t, Config{Dir: dir, Hosts: []string{"localhost"}}); !slices.Equal(b.Generated, []string{"server"}) {
		t.Errorf("corrupt server key: generated %v", b.Generated)
	}
}

func TestGivenFiles(t *testing.T) {
	gen := t.TempDir()
	load(t, Config{Dir: gen, Hosts: []string{"localhost"}})
	b := load(t, Config{
		CertFile: filepath.Join(gen, ServerFile), KeyFile: filepath.Join(gen, ServerKeyFile),
		CAFile: filepath.Join(gen, CAFile),
	})
	if len(b.Generated) != 0 || b.CABase64 == "" || len(b.TLSConfig.Certificates) != 1 {
		t.Errorf("given files: %+v", b)
	}
	if _, err := Load(Config{CertFile: filepath.Join(gen, ServerFile)}); err == nil {
		t.Error("certificate without key accepted")
	}
	if _, err := Load(Config{}); err == nil {
		t.Error("empty config accepted")
	}
}

func mustParse(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	c, err := parseCert(pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func itoa(n int) string { return strconv.Itoa(n) }
