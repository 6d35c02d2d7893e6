package stompx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/inboxd/inboxd/internal/secretfile"
)

// ErrTLS marks a failed TLS setup or handshake with the broker (wrapped together with
// ErrUnavailable for handshakes): a certificate problem, which retrying will not fix
// until someone changes a certificate or a setting.
var ErrTLS = errors.New("broker TLS")

// TLSFiles says how to secure the broker connection (ActiveMQ's stomp+ssl connector).
// Verification of the broker's certificate is always on unless InsecureSkipVerify.
type TLSFiles struct {
	// CAFile is a PEM bundle of the CAs that sign the broker's certificate; empty means
	// the system pool.
	CAFile string
	// ServerName is the name the broker's certificate must carry; empty means the host
	// part of the broker address.
	ServerName string
	// CertFile and KeyFile are the client certificate and key (PEM) for mutual TLS
	// (ActiveMQ's transport.needClientAuth=true); both or neither.
	CertFile, KeyFile string
	// InsecureSkipVerify accepts any broker certificate. For experiments only: it lets
	// anyone on the path read and change every message.
	InsecureSkipVerify bool
}

// TLS is a loaded TLSFiles: the files are read once, by LoadTLS.
type TLS struct {
	files TLSFiles
	base  *tls.Config
}

// maxPEMBytes bounds what LoadTLS reads from one file: a CA bundle is a few hundred KiB
// at most (the Mozilla bundle is ~220 KiB).
const maxPEMBytes = 4 << 20

// LoadTLS reads and checks the files of f. Errors name the file that failed.
func LoadTLS(f TLSFiles) (*TLS, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: f.InsecureSkipVerify}
	if f.CAFile != "" {
		pem, err := secretfile.ReadBounded(f.CAFile, maxPEMBytes)
		if err != nil {
			return nil, fmt.Errorf("%w: reading CA file: %w", ErrTLS, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrTLS, f.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, fmt.Errorf("%w: client certificate and key go together (cert file %q, key file %q)", ErrTLS, f.CertFile, f.KeyFile)
	}
	if f.CertFile != "" {
		certPEM, err := secretfile.ReadBounded(f.CertFile, maxPEMBytes)
		if err != nil {
			return nil, fmt.Errorf("%w: reading client certificate: %w", ErrTLS, err)
		}
		keyPEM, err := secretfile.Read(f.KeyFile, maxPEMBytes)
		if err != nil {
			return nil, fmt.Errorf("%w: client key: %w", ErrTLS, err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate %s with key %s: %w", ErrTLS, f.CertFile, f.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return &TLS{files: f, base: cfg}, nil
}

// Files returns what t was loaded from.
func (t *TLS) Files() TLSFiles { return t.files }

// client returns the tls.Config for a connection to addr.
func (t *TLS) client(addr string) *tls.Config {
	c := t.base.Clone()
	c.ServerName = t.serverName(addr)
	return c
}

func (t *TLS) serverName(addr string) string {
	if t.files.ServerName != "" {
		return t.files.ServerName
	}
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// describe says what was verified against what, for error messages.
func (t *TLS) describe(addr string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server name %q", t.serverName(addr))
	if t.files.CAFile != "" {
		fmt.Fprintf(&b, ", CA file %s", t.files.CAFile)
	} else {
		b.WriteString(", system CA pool")
	}
	if t.files.CertFile != "" {
		fmt.Fprintf(&b, ", client certificate %s", t.files.CertFile)
	} else {
		b.WriteString(", no client certificate")
	}
	return b.String()
}

// handshakeError explains a failed handshake (or a CONNECT that failed because the
// broker rejected the client certificate after a TLS 1.3 handshake, when the alert only
// arrives on the first read).
func (t *TLS) handshakeError(addr string, err error) error {
	hint := ""
	var (
		unknownCA    x509.UnknownAuthorityError
		hostname     x509.HostnameError
		invalid      x509.CertificateInvalidError
		verification *tls.CertificateVerificationError
		rec          tls.RecordHeaderError
		op           *net.OpError
	)
	switch {
	case errors.As(err, &unknownCA):
		hint = "the broker's certificate is not signed by a trusted CA"
	case errors.As(err, &hostname):
		hint = "the broker's certificate does not carry the server name"
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		hint = "the broker's certificate has expired or is not yet valid"
	case errors.As(err, &verification):
		hint = "the broker's certificate failed verification"
	case errors.As(err, &rec):
		hint = "the broker did not answer with TLS: is this a plaintext stomp:// port?"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		// A plaintext STOMP connector waits for a frame and never answers a ClientHello.
		hint = "no TLS answer in time: is this a plaintext stomp:// port, or is the broker overloaded?"
	case errors.As(err, &op) && op.Op == "remote error":
		if t.files.CertFile == "" {
			hint = "the broker refused the connection; it may require a client certificate (mutual TLS)"
		} else {
			hint = "the broker refused the connection; it may not trust the client certificate"
		}
	}
	if hint != "" {
		hint = ": " + hint
	}
	return fmt.Errorf("%w: %w: TLS with %s failed (%s)%s: %w", ErrUnavailable, ErrTLS, addr, t.describe(addr), hint, err)
}
