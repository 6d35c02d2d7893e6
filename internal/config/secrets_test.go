package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// secretFile writes content to a file of mode perm in a fresh directory.
func secretFile(t *testing.T, content string, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil { // umask
		t.Fatal(err)
	}
	return p
}

func TestSecretsFromFiles(t *testing.T) {
	tests := []struct {
		name    string
		env     func(t *testing.T) map[string]string
		args    func(t *testing.T) []string
		check   func(t *testing.T, c *Config)
		wantErr []string
	}{
		{name: "passcode file, newline trimmed",
			env: func(t *testing.T) map[string]string {
				return map[string]string{"INBOXD_STOMP_PASSCODE_FILE": secretFile(t, "s3cret\n", 0o600)}
			},
			check: func(t *testing.T, c *Config) {
				if c.StompPasscode != "s3cret" || c.Stomp(nil).Passcode != "s3cret" {
					t.Errorf("passcode = %q", c.StompPasscode)
				}
			}},
		{name: "CRLF trimmed, inner whitespace kept",
			args: func(t *testing.T) []string {
				return []string{"-admin-token-file", secretFile(t, " a b \r\n", 0o400)}
			},
			check: func(t *testing.T, c *Config) {
				if c.AdminToken != " a b " {
					t.Errorf("admin token = %q", c.AdminToken)
				}
			}},
		{name: "group-readable is fine",
			env: func(t *testing.T) map[string]string {
				return map[string]string{"INBOXD_WEBHOOK_TOKEN_FILE": secretFile(t, "hook", 0o640)}
			},
			check: func(t *testing.T, c *Config) {
				if c.WebhookToken != "hook" {
					t.Errorf("webhook token = %q", c.WebhookToken)
				}
			}},
		{name: "database password applied to the pgx config",
			env: func(t *testing.T) map[string]string {
				return map[string]string{"INBOXD_DATABASE_PASSWORD_FILE": secretFile(t, "pw\n", 0o600)}
			},
			check: func(t *testing.T, c *Config) {
				pc, err := c.PoolConfig()
				if err != nil {
					t.Fatal(err)
				}
				cc, err := c.ConnConfig()
				if err != nil {
					t.Fatal(err)
				}
				if pc.ConnConfig.Password != "pw" || cc.Password != "pw" {
					t.Errorf("passwords = %q, %q; want pw", pc.ConnConfig.Password, cc.Password)
				}
				if strings.Contains(c.DatabaseURL, "pw") {
					t.Errorf("the password leaked into the URL %q", c.DatabaseURL)
				}
			}},
		{name: "world-readable refused",
			env: func(t *testing.T) map[string]string {
				return map[string]string{"INBOXD_STOMP_PASSCODE_FILE": secretFile(t, "s3cret", 0o644)}
			},
			wantErr: []string{"stomp-passcode-file", "readable by every user", "mode 0644", "chmod 600"}},
		{name: "both value and file",
			env: func(t *testing.T) map[string]string {
				return map[string]string{"INBOXD_ADMIN_TOKEN": "x", "INBOXD_ADMIN_TOKEN_FILE": secretFile(t, "y", 0o600)}
			},
			wantErr: []string{"admin-token and admin-token-file are both set"}},
		// Issue 28, item 6: the read token had no _FILE variant, unlike every other secret.
		{name: "read token file",
			env: func(t *testing.T) map[string]string {
				return map[string]string{"INBOXD_READ_TOKEN_FILE": secretFile(t, "r34d\n", 0o600)}
			},
			check: func(t *testing.T, c *Config) {
				if c.ReadToken != "r34d" {
					t.Errorf("read token = %q", c.ReadToken)
				}
			}},
		{name: "read token file flag",
			args: func(t *testing.T) []string { return []string{"-read-token-file", secretFile(t, "r34d", 0o400)} },
			check: func(t *testing.T, c *Config) {
				if c.ReadToken != "r34d" {
					t.Errorf("read token = %q", c.ReadToken)
				}
			}},
		{name: "world-readable read token file",
			env: func(t *testing.T) map[string]string {
				return map[string]string{"INBOXD_READ_TOKEN_FILE": secretFile(t, "r34d", 0o644)}
			},
			wantErr: []string{"read-token-file", "readable by every user"}},
		{name: "read token value and file",
			env: func(t *testing.T) map[string]string {
				return map[string]string{"INBOXD_READ_TOKEN": "x", "INBOXD_READ_TOKEN_FILE": secretFile(t, "y", 0o600)}
			},
			wantErr: []string{"read-token and read-token-file are both set"}},
		{name: "empty file",
			env: func(t *testing.T) map[string]string {
				return map[string]string{"INBOXD_WEBHOOK_TOKEN_FILE": secretFile(t, "\n", 0o600)}
			},
			wantErr: []string{"webhook-token-file", "is empty"}},
		{name: "missing file",
			args:    func(t *testing.T) []string { return []string{"-stomp-passcode-file", "/nonexistent/passcode"} },
			wantErr: []string{"stomp-passcode-file", "/nonexistent/passcode", "no such file"}},
		{name: "directory",
			args:    func(t *testing.T) []string { return []string{"-stomp-passcode-file", t.TempDir()} },
			wantErr: []string{"not a regular file"}},
		{name: "too large",
			env: func(t *testing.T) map[string]string {
				return map[string]string{"INBOXD_STOMP_PASSCODE_FILE": secretFile(t, strings.Repeat("x", maxSecretBytes+1), 0o600)}
			},
			wantErr: []string{"larger than"}},
		{name: "password in the URL and a password file",
			env: func(t *testing.T) map[string]string {
				return map[string]string{
					"INBOXD_DATABASE_URL":           "postgres://u:inline@127.0.0.1/db",
					"INBOXD_DATABASE_PASSWORD_FILE": secretFile(t, "pw", 0o600),
				}
			},
			wantErr: []string{"database-url carries a password and database-password-file is set"}},
		{name: "password in a key=value DSN and a password file",
			env: func(t *testing.T) map[string]string {
				return map[string]string{
					"INBOXD_DATABASE_URL":           "host=127.0.0.1 password=inline dbname=db",
					"INBOXD_DATABASE_PASSWORD_FILE": secretFile(t, "pw", 0o600),
				}
			},
			wantErr: []string{"database-url carries a password"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var env map[string]string
			var args []string
			if tt.env != nil {
				env = tt.env(t)
			}
			if tt.args != nil {
				args = tt.args(t)
			}
			c, err := parse(t, env, args...)
			checkParsed(t, c, err, tt.wantErr, tt.check)
		})
	}
}

func TestStompTLSSettings(t *testing.T) {
	ca := "/nonexistent/missing-ca.pem"
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		check   func(t *testing.T, c *Config)
		wantErr []string
	}{
		{name: "off by default", check: func(t *testing.T, c *Config) {
			if c.StompTLS || c.StompTLSConfig != nil || c.Stomp(nil).TLS != nil {
				t.Error("TLS on by default")
			}
		}},
		{name: "flag alone turns it on, system pool", args: []string{"-stomp-tls"}, check: func(t *testing.T, c *Config) {
			if !c.StompTLS || c.Stomp(nil).TLS == nil {
				t.Error("-stomp-tls did not turn TLS on")
			}
		}},
		{name: "env turns it on", env: map[string]string{"INBOXD_STOMP_TLS": "true", "INBOXD_STOMP_SERVER_NAME": "broker.internal"},
			check: func(t *testing.T, c *Config) {
				if c.Stomp(nil).TLS.Files().ServerName != "broker.internal" {
					t.Errorf("server name = %q", c.Stomp(nil).TLS.Files().ServerName)
				}
			}},
		{name: "not a boolean", env: map[string]string{"INBOXD_STOMP_TLS": "yes please"}, wantErr: []string{"INBOXD_STOMP_TLS", "not a boolean"}},
		{name: "CA file without TLS is refused, not ignored", env: map[string]string{"INBOXD_STOMP_CA_FILE": "/etc/ca.pem"},
			wantErr: []string{"stomp-ca-file set but stomp-tls is off", "never falls back to plaintext"}},
		{name: "insecure without TLS", args: []string{"-stomp-tls-insecure-skip-verify"},
			wantErr: []string{"stomp-tls-insecure-skip-verify set but stomp-tls is off"}},
		{name: "insecure with a CA file", args: []string{"-stomp-tls", "-stomp-tls-insecure-skip-verify", "-stomp-ca-file", ca},
			wantErr: []string{"pointless"}},
		{name: "missing CA file named", args: []string{"-stomp-tls", "-stomp-ca-file", ca},
			wantErr: []string{"CA file", "missing-ca.pem", "no such file"}},
		{name: "certificate without key", args: []string{"-stomp-tls", "-stomp-cert-file", "c.pem"},
			wantErr: []string{"go together"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parse(t, tt.env, tt.args...)
			checkParsed(t, c, err, tt.wantErr, tt.check)
		})
	}
}

// A single connection (serve's wait for the database, migrate, changefeed) reads the
// URL as the pool does: the pool's own parameters are not sent to the server, where
// pool_max_conns would be an unknown setting.
func TestConnConfigDropsPoolParameters(t *testing.T) {
	c := &Config{DatabaseURL: "postgres://u@127.0.0.1:5432/db?pool_max_conns=5&application_name=x"}
	cc, err := c.ConnConfig()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cc.RuntimeParams["pool_max_conns"]; ok || cc.RuntimeParams["application_name"] != "x" || cc.Database != "db" {
		t.Fatalf("runtime params %v, database %q", cc.RuntimeParams, cc.Database)
	}
}

// checkParsed expects err to mention every part of wantErr, or, with none, no error
// and check to pass.
func checkParsed(t *testing.T, c *Config, err error, wantErr []string, check func(*testing.T, *Config)) {
	t.Helper()
	if wantErr != nil {
		if err == nil {
			t.Fatal("no error")
		}
		for _, w := range wantErr {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not mention %q", err, w)
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	check(t, c)
}

// TestStompCarriesEverySetting: the broker settings of the command lines that dial on
// their own (publish, subscriptions) are the ones serve uses, the heart-beat included
// (it was dropped: INBOXD_STOMP_HEART_BEAT=-1 still sent 10 s heart-beats there).
func TestStompCarriesEverySetting(t *testing.T) {
	c := &Config{}
	c.StompAddr, c.StompHost, c.Broker, c.StompHeartBeat = "broker:61613", "vhost", "rabbitmq", -1
	got := c.Stomp(nil)
	if got.Addr != c.StompAddr || got.Host != c.StompHost || string(got.Broker) != c.Broker || got.HeartBeat != c.StompHeartBeat {
		t.Errorf("Stomp() = addr %q host %q broker %q heart-beat %s, want the configured %q %q %q %s",
			got.Addr, got.Host, got.Broker, got.HeartBeat, c.StompAddr, c.StompHost, c.Broker, c.StompHeartBeat)
	}
}
