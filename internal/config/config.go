// Package config makes inboxd's settings (the table defaults.Settings) into
// command-line flags, each with an INBOXD_* environment variable as its fallback.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/certs"
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/stompx"
)

// Config is every setting of the command line: the library's (inboxd.Config, the same
// fields a program embedding inboxd sets) and the command line's own, which a library
// caller gives another way (a pool for the URL, a logger for the format and level,
// values for the secret files).
type Config struct {
	inboxd.Config

	DatabaseURL string

	// Secrets from files (Docker/Kubernetes *_FILE convention), read once by Validate
	// into StompPasscode, DatabasePassword, AdminToken, ReadToken and WebhookToken.
	StompPasscodeFile    string
	DatabasePasswordFile string
	DatabasePassword     string // from DatabasePasswordFile; applied by PoolConfig and ConnConfig
	AdminTokenFile       string
	// ReadTokenFile holds the read token (INBOXD_READ_TOKEN_FILE, -read-token-file;
	// default empty: none).
	ReadTokenFile    string
	WebhookTokenFile string
	secretsLoaded    bool

	// StompTLSConfig is what Validate loads from the Stomp* TLS files; nil when StompTLS
	// is off.
	StompTLSConfig *stompx.TLS

	// Demo wires in the demo (package registration): the command line's business, never
	// the library's.
	Demo bool

	LogFormat string
	LogLevel  string

	envErrs []string // environment values that did not parse, reported by Validate

	// The flags whose 0 means "none" or "forever", where the library's zero means the
	// default and a negative value "none" or "forever": toLibrary translates them.
	immediateRetries               int
	retention, quarantineRetention time.Duration
}

// toLibrary sets the library's fields from the flags that mean something else by 0
// (none or forever, like -1).
func (c *Config) toLibrary() {
	c.ImmediateRetries, c.Retention, c.QuarantineRetention = c.immediateRetries, c.retention, c.quarantineRetention
	if c.ImmediateRetries == 0 {
		c.ImmediateRetries = -1
	}
	for _, d := range []*time.Duration{&c.Retention, &c.QuarantineRetention} {
		if *d == 0 {
			*d = -1
		}
	}
}

// setting is one row of the table of settings (defaults.Settings) bound to its field
// of a Config, with what the row implies: the environment variable (INBOXD_ and the
// flag's name in capitals) and the default as the flag shows it.
type setting struct {
	defaults.Setting
	env, def string
	set      func(string) error
	boolFlag bool // "-flag" alone means true
}

// settings is every setting, each filling its field of c: by the field's type (a
// string, a comma-separated list, a whole number, a boolean or a duration), except
// the flags whose text means something else than the field's value (special).
func settings(c *Config) []setting {
	special := map[string]func(string) error{
		// An empty address turns the part off.
		"http-addr":    addr(&c.HTTPAddr, &c.DisableHTTP),
		"webhook-addr": addr(&c.WebhookAddr, &c.DisableWebhook),
		"migrate": func(v string) error {
			switch v {
			case "auto", "off":
				c.MigrateAtStart = v == "auto"
				return nil
			}
			return fmt.Errorf("want auto or off: %q", v)
		},
		// 0 means none or forever here; toLibrary translates them.
		"immediate-retries":    num(&c.immediateRetries),
		"retention":            dur(&c.retention),
		"quarantine-retention": dur(&c.quarantineRetention),
	}
	var out []setting
	for _, r := range defaults.Settings() {
		s := setting{Setting: r, env: "INBOXD_" + strings.ToUpper(strings.ReplaceAll(r.Flag, "-", "_")), def: defaultText(r.Default)}
		if s.set = special[r.Flag]; s.set == nil {
			f := reflect.ValueOf(c).Elem().FieldByName(r.Field)
			if !f.IsValid() || !f.CanSet() {
				panic("config: setting " + r.Flag + " names no field " + r.Field) // a bug in the table
			}
			s.set, s.boolFlag = setter(f.Addr().Interface()), f.Kind() == reflect.Bool
		}
		out = append(out, s)
	}
	return out
}

// setter parses a flag's text into the field p points to.
func setter(p any) func(string) error {
	switch p := p.(type) {
	case *string:
		return func(v string) error { *p = v; return nil }
	case *[]string:
		return func(v string) error {
			*p = nil
			for _, s := range strings.Split(v, ",") {
				if s = strings.TrimSpace(s); s != "" {
					*p = append(*p, s)
				}
			}
			return nil
		}
	case *int:
		return num(p)
	case *bool:
		return func(v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("not a boolean (true or false): %q", v)
			}
			*p = b
			return nil
		}
	case *time.Duration:
		return dur(p)
	}
	panic(fmt.Sprintf("config: a setting of type %T", p)) // a bug in the table
}

func num(p *int) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("not a whole number: %q", v)
		}
		*p = n
		return nil
	}
}

func dur(p *time.Duration) func(string) error {
	return func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("not a duration (e.g. 250ms, 5s): %q", v)
		}
		*p = d
		return nil
	}
}

// addr sets an address whose empty value turns its part off.
func addr(p *string, off *bool) func(string) error {
	return func(v string) error { *p, *off = v, v == ""; return nil }
}

// defaultText writes a built-in default as the flag takes it, a duration as an operator
// would ("168h", not "168h0m0s").
func defaultText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int:
		return strconv.Itoa(v)
	case bool:
		return strconv.FormatBool(v)
	case time.Duration:
		return short(v)
	}
	panic(fmt.Sprintf("config: a default of type %T", v)) // a bug in the table
}

// short writes a default duration as an operator would: "168h", not "168h0m0s".
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s") // "5m0s" → "5m"
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m") // "168h0m" → "168h"
	}
	return s
}

// libraryDecides are the settings whose default the library chooses at Run when they are
// left unset: the changefeed webhook is served, with its certificates, on CockroachDB
// only, whose changefeeds need it; on PostgreSQL only when the flag or variable asks.
var libraryDecides = map[string]bool{"webhook-addr": true}

// Register defines the flags on fs and returns the Config they fill. Defaults come from
// the environment when set. Call Validate after fs.Parse.
func Register(fs *flag.FlagSet) *Config { return RegisterOnly(fs, nil) }

// RegisterOnly is Register for a command that uses only the settings of want (group
// names, such as GroupDatabase, or single flags): every setting still takes its
// default or environment value, but only those are flags, so that the command's -h
// lists what it uses. A nil want defines every setting.
func RegisterOnly(fs *flag.FlagSet, want []string) *Config {
	c := &Config{}
	of := groupOf()
	for _, s := range settings(c) {
		def := s.def
		v, envSet := os.LookupEnv(s.env)
		if envSet {
			def = v
		}
		if !envSet && libraryDecides[s.Flag] {
			// Left zero: Run decides, as for a library program.
		} else if err := s.set(def); err != nil {
			// A bad environment value is reported by Validate; keep the built-in default.
			_ = s.set(s.def)
			c.envErrs = append(c.envErrs, fmt.Sprintf("%s: %v", s.env, err))
		}
		if !only(want, of, s.Flag) {
			continue
		}
		usage := fmt.Sprintf("%s (env %s, default %q)", s.Usage, s.env, s.def)
		if s.boolFlag {
			fs.BoolFunc(s.Flag, usage, s.set)
		} else {
			fs.Func(s.Flag, usage, s.set)
		}
	}
	return c
}

// Defaults returns a Config holding every setting's built-in default, from the table of
// flags, without reading the environment (TestDefaultsAgree holds it equal to the
// library's inboxd.Config{}.WithDefaults()).
func Defaults() *Config {
	c := &Config{}
	for _, s := range settings(c) {
		if err := s.set(s.def); err != nil {
			panic("config: bad built-in default of " + s.Flag + ": " + err.Error()) // a bug in the table
		}
	}
	c.toLibrary()
	return c
}

// Validate reports settings that cannot work: the command line's own, then the
// library's (inboxd.Config.Validate), in one error.
func (c *Config) Validate() error {
	var problems []string
	problems = append(problems, c.envErrs...)
	// Secrets first: checks below (and callers) see the values read from files.
	problems = append(problems, c.loadSecrets()...)
	if c.DatabaseURL == "" {
		problems = append(problems, "database-url is empty")
	}
	if len(c.Destinations) == 0 {
		problems = append(problems, "destination is empty")
	}
	// Zero means the default to the library; given as a flag it is a mistake.
	for _, v := range []struct {
		name  string
		value int64
	}{
		{"commits-in-flight", int64(c.CommitsInFlight)}, {"stall-after", int64(c.StallAfter)},
		{"shutdown-timeout", int64(c.ShutdownTimeout)}, {"concurrency", int64(c.Concurrency)},
		{"max-attempts", int64(c.MaxAttempts)}, {"outbox-poll-interval", int64(c.OutboxPollInterval)},
		{"outbox-batch-size", int64(c.OutboxBatchSize)}, {"outbox-retention", int64(c.OutboxRetention)},
		{"process-batch-size", int64(c.ProcessBatchSize)},
	} {
		if v.value <= 0 {
			problems = append(problems, v.name+" must be positive")
		}
	}
	// -1 (any negative value) means none or forever, as in the library; 0 says the same
	// here, as it always has on the command line.
	// The library takes an empty name for its default; given as a flag, it is a mistake.
	for _, d := range c.Destinations {
		if strings.HasPrefix(d, "/topic/") && !c.NonDurableTopics && (c.ClientID == "" || c.SubscriptionName == "") {
			problems = append(problems, fmt.Sprintf("destination %s is a topic and client-id or subscription-name is empty: "+
				"inboxd would subscribe non-durably and silently lose every event published while it is stopped or "+
				"reconnecting; set both (durable subscription), consume the virtual topic's queue "+
				"/queue/Consumer.<app>.VirtualTopic.<name>, or accept the loss with -non-durable-topics", d))
		}
	}
	c.toLibrary()
	if c.LogFormat != "text" && c.LogFormat != "json" {
		problems = append(problems, fmt.Sprintf("log-format %q: want text or json", c.LogFormat))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		problems = append(problems, err.Error())
	}
	if err := c.Config.Validate(); err != nil {
		var ce *inboxd.ConfigError
		if !errors.As(err, &ce) {
			return err
		}
		problems = append(problems, ce.Problems...)
	}
	if len(problems) == 0 && c.StompTLS && c.StompTLSConfig == nil {
		t, err := stompx.LoadTLS(c.stompTLSFiles())
		if err != nil {
			problems = append(problems, err.Error())
		}
		c.StompTLSConfig = t
	}
	if len(problems) > 0 {
		return &inboxd.ConfigError{Problems: problems}
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// WebhookAuthToken is the token the webhook demands and the changefeed sends
// (certs.WebhookToken).
func (c *Config) WebhookAuthToken() (token string, created bool, err error) {
	return certs.WebhookToken(c.WebhookToken, c.CertDir)
}

// Logger builds the logger the settings ask for.
func (c *Config) Logger(w io.Writer) *slog.Logger {
	level, _ := parseLevel(c.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
