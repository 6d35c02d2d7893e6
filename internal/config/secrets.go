package config

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/secretfile"
	"github.com/inboxd/inboxd/internal/stompx"
)

// maxSecretBytes bounds a secret file: a token or a password, never a megabyte.
const maxSecretBytes = 64 << 10

// ReadSecretFile reads a secret from path, after the Docker and Kubernetes convention
// (INBOXD_X_FILE next to INBOXD_X): one trailing newline (\n or \r\n) is trimmed. It
// refuses what secretfile.Read refuses (a file every local user can read, anything but
// a regular file, one larger than 64 KiB), and an empty secret.
func ReadSecretFile(path string) (string, error) {
	b, err := secretfile.Read(path, maxSecretBytes)
	if err != nil {
		return "", err
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// loadSecrets reads every *_FILE setting once; later calls do nothing. It returns the
// problems found.
func (c *Config) loadSecrets() []string {
	if c.secretsLoaded {
		return nil
	}
	c.secretsLoaded = true
	var problems []string
	for _, s := range []struct {
		name, file string
		value      *string
	}{
		{"stomp-passcode", c.StompPasscodeFile, &c.StompPasscode},
		{"admin-token", c.AdminTokenFile, &c.AdminToken},
		{"read-token", c.ReadTokenFile, &c.ReadToken},
		{"webhook-token", c.WebhookTokenFile, &c.WebhookToken},
		{"database-password", c.DatabasePasswordFile, &c.DatabasePassword},
	} {
		if s.file == "" {
			continue
		}
		if *s.value != "" {
			problems = append(problems, fmt.Sprintf("%s and %s-file are both set; use one", s.name, s.name))
			continue
		}
		v, err := ReadSecretFile(s.file)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s-file: %v", s.name, err))
			continue
		}
		*s.value = v
	}
	if c.DatabasePasswordFile != "" && urlHasPassword(c.DatabaseURL) {
		problems = append(problems, "database-url carries a password and database-password-file is set; use one")
	}
	return problems
}

var dsnPassword = regexp.MustCompile(`(^|\s)password\s*=`)

// urlHasPassword reports whether a database URL (or key=value DSN) names a password.
func urlHasPassword(dsn string) bool {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return false // ParseConfig reports it
		}
		_, ok := u.User.Password()
		return ok || u.Query().Has("password")
	}
	return dsnPassword.MatchString(dsn)
}

// stompTLSFiles are the broker TLS settings (inboxd.Config.Validate checks them).
func (c *Config) stompTLSFiles() stompx.TLSFiles {
	return stompx.TLSFiles{
		CAFile: c.StompCAFile, ServerName: c.StompServerName,
		CertFile: c.StompCertFile, KeyFile: c.StompKeyFile, InsecureSkipVerify: c.StompTLSInsecureSkip,
	}
}

// Stomp is how every part of inboxd reaches the broker (ingest, the publisher, the
// readiness check, publish): one stompx.Config, dialed by stompx.DialConn. Call it
// after Validate.
func (c *Config) Stomp(log *slog.Logger) stompx.Config {
	if c.StompTLSInsecureSkip && log != nil {
		log.Warn("INSECURE: broker TLS certificate verification is off (stomp-tls-insecure-skip-verify)")
	}
	return stompx.Config{Addr: c.StompAddr, Login: c.StompLogin, Passcode: c.StompPasscode, Host: c.StompHost,
		Broker: stompx.Broker(c.Broker), TLS: c.StompTLSConfig, HeartBeat: c.StompHeartBeat, Logger: log}
}

// ErrNoDatabaseURL is returned by PoolConfig and ConnConfig when database-url is empty.
var ErrNoDatabaseURL = errors.New("database-url is empty")

// PoolConfig parses database-url and applies database-password-file. Call it after
// Validate.
func (c *Config) PoolConfig() (*pgxpool.Config, error) {
	if c.DatabaseURL == "" {
		return nil, ErrNoDatabaseURL
	}
	pc, err := pgxpool.ParseConfig(c.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("parsing database-url: %w", err)
	}
	c.applyPassword(pc.ConnConfig)
	return pc, nil
}

// ConnConfig is PoolConfig's connection settings, for a single connection (the
// pool's own parameters, pool_max_conns and the like, are not sent to the server).
func (c *Config) ConnConfig() (*pgx.ConnConfig, error) {
	pc, err := c.PoolConfig()
	if err != nil {
		return nil, err
	}
	return pc.ConnConfig, nil
}

func (c *Config) applyPassword(cc *pgx.ConnConfig) {
	if c.DatabasePassword == "" {
		return
	}
	cc.Password = c.DatabasePassword // fallbacks (host lists, sslmode=prefer) share it
}

// SecretsOnCommandLine names the flags set on fs that carry a secret, which every local
// user can read in ps and /proc/<pid>/cmdline. Callers warn about them.
func (c *Config) SecretsOnCommandLine(fs *flag.FlagSet) []string {
	var names []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "stomp-passcode", "admin-token", "read-token", "webhook-token":
			names = append(names, "-"+f.Name)
		case "database-url":
			if urlHasPassword(c.DatabaseURL) {
				names = append(names, "-"+f.Name+" (with a password)")
			}
		}
	})
	return names
}
