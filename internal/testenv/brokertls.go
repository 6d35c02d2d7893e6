package testenv

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BrokerTLS is the TLS side of the shared broker: its stomp+ssl connectors and the
// material scripts/services.sh generated for them with scripts/broker-tls.sh.
type BrokerTLS struct {
	Addr       string // stomp+ssl, server-authenticated (127.0.0.1:61612)
	MutualAddr string // stomp+ssl with transport.needClientAuth=true (127.0.0.1:61611)

	Dir             string
	CAFile          string // the CA of every certificate below (PEM)
	CertFile        string // a client certificate signed by the CA (PEM)
	KeyFile         string // its key (PEM, mode 0600)
	Keystore        string // the broker's keystore (PKCS12, password inboxd-dev)
	ExpiredKeystore string // the same key with a certificate that expired two days ago
	Truststore      string // the broker's truststore: the CA
}

// BrokerTLSDir is where scripts/services.sh puts the shared broker's TLS material:
// $INBOXD_TEST_BROKER_TLS_DIR, else /var/lib/inboxd-activemq/conf/tls (AMQ_BASE/conf/tls).
func BrokerTLSDir() string {
	if d := os.Getenv("INBOXD_TEST_BROKER_TLS_DIR"); d != "" {
		return d
	}
	return "/var/lib/inboxd-activemq/conf/tls"
}

// SharedBrokerTLS checks that the shared broker's TLS connectors answer and its TLS
// material is readable, and returns them. Override the addresses with
// INBOXD_TEST_STOMP_TLS_ADDR and INBOXD_TEST_STOMP_MTLS_ADDR.
func SharedBrokerTLS(t testing.TB) BrokerTLS {
	t.Helper()
	b := BrokerTLSMaterial(t)
	for _, a := range []string{b.Addr, b.MutualAddr} {
		c, err := net.DialTimeout("tcp", a, 3*time.Second)
		if err != nil {
			unavailable(t, "activemq stomp+ssl at %s: %v (scripts/services.sh up restarts a broker without it)", a, err)
		}
		c.Close()
	}
	return b
}

// BrokerTLSMaterial is SharedBrokerTLS without checking the connectors: for tests that
// start a private broker with these stores.
func BrokerTLSMaterial(t testing.TB) BrokerTLS {
	t.Helper()
	Integration(t)
	dir := BrokerTLSDir()
	b := BrokerTLS{
		Addr: brokerTLSEnv("INBOXD_TEST_STOMP_TLS_ADDR", "127.0.0.1:61612"), MutualAddr: brokerTLSEnv("INBOXD_TEST_STOMP_MTLS_ADDR", "127.0.0.1:61611"),
		Dir:    dir,
		CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client-key.pem"),
		Keystore: filepath.Join(dir, "broker.ks"), ExpiredKeystore: filepath.Join(dir, "expired.ks"), Truststore: filepath.Join(dir, "broker.ts"),
	}
	for _, f := range []string{b.CAFile, b.CertFile, b.KeyFile, b.Keystore, b.ExpiredKeystore, b.Truststore} {
		fh, err := os.Open(f)
		if err != nil {
			unavailable(t, "shared broker TLS material: %v (scripts/services.sh up generates it)", err)
		}
		fh.Close()
	}
	return b
}

func brokerTLSEnv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
