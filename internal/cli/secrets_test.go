package cli

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/testenv"
)

func writeSecret(t *testing.T, content string, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
	return p
}

// migrate with a password file goes through the pgx config (the URL carries no
// password), including the path that creates a missing database. The local server
// trusts loopback, so this proves the wiring, and config's tests prove the password.
func TestMigrateWithPasswordFile(t *testing.T) {
	t.Parallel()
	_ = testenv.NewDB(t) // skips, or fails in CI, when PostgreSQL is missing
	name := "inboxd_test_pwfile_" + testenv.Suffix()
	u, _ := url.Parse(testenv.AdminURL())
	u.Path = "/" + name
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), testenv.AdminURL())
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	code, out, errOut := run(t, "migrate", "-database-url", u.String(), "-database-password-file", writeSecret(t, "pw\n", 0o600))
	if code != 0 || !strings.Contains(out, "applied") {
		t.Fatalf("migrate: exit %d, %q %q", code, out, errOut)
	}
}

func TestSecretAndTLSSettingsRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"world-readable password file", []string{"migrate", "-database-password-file", writeSecret(t, "pw", 0o644)}, "readable by every user"},
		{"CA file without TLS", []string{"publish", "-stomp-ca-file", "/etc/ssl/certs/ca-certificates.crt"}, "stomp-tls is off"},
		{"missing CA file", []string{"publish", "-stomp-tls", "-stomp-ca-file", "/nonexistent/ca.pem"}, "/nonexistent/ca.pem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := run(t, tt.args...)
			if code != 1 || !strings.Contains(out+errOut, tt.want) {
				t.Errorf("exit %d, %q %q; want exit 1 mentioning %q", code, out, errOut, tt.want)
			}
		})
	}
}

func TestSecretFlagsWarn(t *testing.T) {
	t.Parallel()
	// "ca" only writes a certificate, and "migrate -print-grants" prints without a
	// database: the warning is printed before any connection.
	_, _, errCA := run(t, "ca", "-webhook-token", "t0ken", "-cert-dir", t.TempDir())
	_, _, errMigrate := run(t, "migrate", "-print-grants", "app", "-database-url", "postgres://u:pw@127.0.0.1:1/x")
	errOut := errCA + errMigrate
	for _, want := range []string{"-webhook-token", "-database-url (with a password)", "every local user"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q does not mention %q", errOut, want)
		}
	}
	if strings.Contains(errOut, "t0ken") || strings.Contains(errOut, "pw@") {
		t.Errorf("the warning repeats the secret: %q", errOut)
	}
}
