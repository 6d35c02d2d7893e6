package stompx

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/testenv"
)

// strangerCA writes a CA unrelated to the broker's, and a client certificate it signed,
// into dir: ca.pem, client.pem, client-key.pem (0600).
func strangerCA(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "a stranger's CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "inboxd-test-client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	writePEM(t, caFile, "CERTIFICATE", caDER, 0o644)
	writePEM(t, certFile, "CERTIFICATE", leafDER, 0o644)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER, 0o600)
	return caFile, certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // umask
		t.Fatal(err)
	}
}

func TestLoadTLSRefusesBadFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, cert, key := strangerCA(t, dir)
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	openKey := filepath.Join(dir, "open-key.pem")
	b, _ := os.ReadFile(key)
	if err := os.WriteFile(openKey, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(openKey, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		files TLSFiles
		want  []string // substrings of the error, "" for success
	}{
		{"system pool", TLSFiles{}, nil},
		{"CA and client certificate", TLSFiles{CAFile: ca, CertFile: cert, KeyFile: key}, nil},
		{"missing CA file", TLSFiles{CAFile: filepath.Join(dir, "nope.pem")}, []string{"CA file", "nope.pem", "no such file"}},
		{"CA file without certificates", TLSFiles{CAFile: notPEM}, []string{"CA file", notPEM, "no PEM certificate"}},
		{"CA file is a directory", TLSFiles{CAFile: dir}, []string{"not a regular file"}},
		{"certificate without key", TLSFiles{CertFile: cert}, []string{"go together"}},
		{"world-readable key", TLSFiles{CertFile: cert, KeyFile: openKey}, []string{"client key", openKey, "readable by every user", "chmod 600"}},
		{"key of another certificate", TLSFiles{CertFile: ca, KeyFile: key}, []string{"client certificate " + ca, "key " + key}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadTLS(tt.files)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("LoadTLS: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrTLS) {
				t.Fatalf("LoadTLS = %v, want an ErrTLS", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// tlsCase is one connection attempt and what it must answer.
type tlsCase struct {
	name  string
	addr  string
	files TLSFiles
	want  []string // error substrings; nil means the connection must work
	// timeout is the DialTimeout (default 20s).
	timeout time.Duration
}

func runTLSCases(t *testing.T, cases []tlsCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tl, err := LoadTLS(tc.files)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if tc.timeout == 0 {
				tc.timeout = 20 * time.Second
			}
			cfg := Config{Addr: tc.addr, TLS: tl, DialTimeout: tc.timeout}
			if tc.want == nil {
				// Works: a persistent message confirmed by a RECEIPT, over TLS.
				p := NewPublisher(cfg, 1)
				defer p.Close()
				if err := p.Publish(ctx, testenv.Queue(t), []byte(`{"id":"x"}`), nil); err != nil {
					t.Fatalf("publish over TLS: %v", err)
				}
				return
			}
			c, err := DialConn(ctx, cfg)
			if err == nil {
				_ = c.Close()
				t.Fatal("connected; want a refusal")
			}
			t.Logf("%s answered: %v", tc.name, err)
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrTLS) {
				t.Errorf("error %v does not wrap ErrUnavailable and ErrTLS", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// The shared broker's stomp+ssl connectors (scripts/activemq.xml, material from
// scripts/broker-tls.sh): the right CA works, anything else is refused with an error
// that names the file and the name that failed.
func TestTLSSharedBroker(t *testing.T) {
	t.Parallel()
	tlsBrokerCases(t, testenv.SharedBrokerTLS(t), testenv.Broker(t))
}

func tlsBrokerCases(t *testing.T, b testenv.BrokerTLS, plainAddr string) {
	t.Run("plaintext to the TLS port", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := DialConn(ctx, Config{Addr: b.Addr, DialTimeout: 5 * time.Second})
		if err == nil {
			_ = c.Close()
			t.Fatal("a plaintext CONNECT worked on the stomp+ssl port")
		}
		t.Logf("plaintext to the TLS port answered: %v", err)
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "is this a stomp+ssl port") {
			t.Errorf("error %v does not wrap ErrUnavailable or does not point at TLS", err)
		}
	})
	strangerCAFile, strangerCert, strangerKey := strangerCA(t, t.TempDir())
	right := TLSFiles{CAFile: b.CAFile}
	mutual := TLSFiles{CAFile: b.CAFile, CertFile: b.CertFile, KeyFile: b.KeyFile}
	runTLSCases(t, []tlsCase{
		{name: "right CA", addr: b.Addr, files: right},
		{name: "right CA, server name localhost", addr: b.Addr, files: TLSFiles{CAFile: b.CAFile, ServerName: "localhost"}},
		{name: "wrong CA", addr: b.Addr, files: TLSFiles{CAFile: strangerCAFile},
			want: []string{"CA file " + strangerCAFile, `server name "127.0.0.1"`, "not signed by a trusted CA", "unknown authority"}},
		{name: "system pool", addr: b.Addr, files: TLSFiles{},
			want: []string{"system CA pool", "not signed by a trusted CA"}},
		{name: "name mismatch", addr: b.Addr, files: TLSFiles{CAFile: b.CAFile, ServerName: "broker.example.com"},
			want: []string{`server name "broker.example.com"`, "CA file " + b.CAFile, "does not carry the server name", "not broker.example.com"}},
		{name: "TLS to the plaintext port", addr: plainAddr, files: right, timeout: 3 * time.Second,
			// ActiveMQ either waits for a frame (the handshake times out) or answers the
			// ClientHello with a plaintext ERROR frame: both hints name the likely cause.
			want: []string{"is this a plaintext stomp:// port"}},
		{name: "insecure skip verify accepts a stranger", addr: b.Addr, files: TLSFiles{InsecureSkipVerify: true}},
		{name: "mutual TLS", addr: b.MutualAddr, files: mutual},
		{name: "mutual TLS without a client certificate", addr: b.MutualAddr, files: right,
			want: []string{"no client certificate", "may require a client certificate"}},
		{name: "mutual TLS with a stranger's client certificate", addr: b.MutualAddr,
			files: TLSFiles{CAFile: b.CAFile, CertFile: strangerCert, KeyFile: strangerKey},
			want:  []string{"client certificate " + strangerCert, "may not trust the client certificate"}},
	})
}

// A broker whose certificate expired is refused. The shared broker's certificate is
// valid, so this one runs a private broker with the expired keystore.
func TestTLSExpiredBrokerCertificate(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a private broker")
	}
	shared := testenv.BrokerTLSMaterial(t)
	b := testenv.StartPrivateTLSBroker(t, shared.ExpiredKeystore, shared.Truststore)
	runTLSCases(t, []tlsCase{
		{name: "expired certificate", addr: b.TLSAddr, files: TLSFiles{CAFile: shared.CAFile},
			want: []string{"CA file " + shared.CAFile, `server name "127.0.0.1"`, "has expired or is not yet valid", "x509: certificate has expired"}},
	})
}
