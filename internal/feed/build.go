package feed

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Mode chooses which journal changes the feed emits.
type Mode string

const (
	// ModeFiltered emits the journal's inserts and updates but never its deletes, through
	// a CDC query. The default; see the package doc for why.
	ModeFiltered Mode = "filtered"
	// ModeTable emits every change of the journal table (deletes too).
	ModeTable Mode = "table"
)

// RetryForever is Retry.Max for "inf": the sink retries a batch without limit.
const RetryForever = -1

// SchemeWebhookHTTPS is the only sink scheme CockroachDB's webhook sink accepts
// ("this sink requires https").
// https://www.cockroachlabs.com/docs/stable/changefeed-sinks#webhook-sink
const SchemeWebhookHTTPS = "webhook-https"

// defaultCheckpoint is CockroachDB's default min_checkpoint_frequency.
// https://www.cockroachlabs.com/docs/stable/create-changefeed#min-checkpoint-frequency
const defaultCheckpoint = 30 * time.Second

// Flush is the Flush part of webhook_sink_config: a batch is sent when it holds Messages
// rows or Bytes bytes, or Frequency after its first row, whichever comes first.
// https://www.cockroachlabs.com/docs/stable/changefeed-sinks#webhook-sink-configuration
type Flush struct {
	Messages  int
	Bytes     int
	Frequency time.Duration
}

// Retry is the Retry part of webhook_sink_config: how often the sink retries one batch
// (Max, or RetryForever) and the first backoff (doubled up to 30s by CockroachDB).
// Whatever it says, the changefeed job itself keeps retrying a failing sink.
// https://www.cockroachlabs.com/docs/stable/changefeed-sinks#webhook-sink-configuration
type Retry struct {
	Max     int
	Backoff time.Duration
}

// Options describe one CREATE CHANGEFEED statement for the journal.
type Options struct {
	// Mode defaults to ModeFiltered.
	Mode Mode
	// Table defaults to "journal".
	Table string
	// SinkURL is where CockroachDB POSTs: "webhook-https://host:port/path", without query.
	SinkURL string
	// CACertBase64 is the base64 of the PEM CA that signed the webhook's certificate
	// (certs.Bundle.CABase64); CockroachDB adds it to its trust pool (URI param ca_cert).
	// https://www.cockroachlabs.com/docs/stable/create-changefeed#ca-cert
	CACertBase64 string
	// InsecureSkipVerify disables certificate verification (insecure_tls_skip_verify).
	// https://www.cockroachlabs.com/docs/stable/create-changefeed#insecure-tls-skip-verify
	InsecureSkipVerify bool
	// AuthHeader is sent verbatim as the Authorization header, e.g. "Bearer <token>".
	// https://www.cockroachlabs.com/docs/stable/create-changefeed#webhook-auth-header
	AuthHeader string
	// ClientTimeout bounds each POST. Required: the docs say 3s by default, but the current
	// sink uses no timeout when the option is unset.
	// https://www.cockroachlabs.com/docs/stable/create-changefeed#webhook-client-timeout
	ClientTimeout time.Duration
	// Flush and Retry become webhook_sink_config (omitted when both are zero).
	// https://www.cockroachlabs.com/docs/stable/create-changefeed#webhook-sink-config
	Flush Flush
	Retry Retry
	// Updated adds the "updated" HLC to every row.
	// https://www.cockroachlabs.com/docs/stable/create-changefeed#updated
	Updated bool
	// Resolved, when non-zero, emits {"resolved": HLC} at most this often.
	// https://www.cockroachlabs.com/docs/stable/create-changefeed#resolved
	Resolved time.Duration
	// MinCheckpointFrequency defaults to Resolved when Resolved is set; it must not exceed
	// Resolved, and it bounds how much is replayed after a restart.
	// https://www.cockroachlabs.com/docs/stable/create-changefeed#min-checkpoint-frequency
	MinCheckpointFrequency time.Duration
	// Cursor resumes from an HLC ("<wall nanos>.<logical>"), e.g. the last resolved
	// timestamp in feed_watermark; without InitialScan it skips the initial scan.
	// https://www.cockroachlabs.com/docs/stable/create-changefeed#cursor
	Cursor string
	// InitialScan is "", "yes", "no" or "only".
	// https://www.cockroachlabs.com/docs/stable/create-changefeed#initial-scan
	InitialScan string
	// Diff adds "before" to every row (whole previous row, null for an insert).
	// https://www.cockroachlabs.com/docs/stable/create-changefeed#diff
	Diff bool
}

// DefaultOptions are the settings inboxd recommends: filtered mode, updated, resolved
// every 10s with a matching checkpoint, 10s POST timeout, batches of up to 100 rows,
// 1 MiB (see WebhookBodyCap) or 200ms, and a sink that never gives up on a batch.
func DefaultOptions(sinkURL, caBase64, authHeader string) Options {
	return Options{
		Mode:                   ModeFiltered,
		Table:                  "journal",
		SinkURL:                sinkURL,
		CACertBase64:           caBase64,
		AuthHeader:             authHeader,
		ClientTimeout:          10 * time.Second,
		Flush:                  Flush{Messages: DefaultFlushMessages, Bytes: DefaultFlushBytes, Frequency: 200 * time.Millisecond},
		Retry:                  Retry{Max: RetryForever, Backoff: 500 * time.Millisecond},
		Updated:                true,
		Resolved:               10 * time.Second,
		MinCheckpointFrequency: 10 * time.Second,
	}
}

// ErrInvalidOptions wraps every validation error of BuildCreate.
var ErrInvalidOptions = errors.New("invalid changefeed options")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
}

// SinkURL is a parsed webhook sink address.
type SinkURL struct {
	Host string // host or host:port, lower-cased
	Path string // "/" when empty
}

// String is the canonical form, "webhook-https://host:port/path".
func (s SinkURL) String() string {
	return SchemeWebhookHTTPS + "://" + s.Host + s.Path
}

// ParseSinkURL parses a webhook sink address as given by an operator. It accepts only
// webhook-https://host[:port][/path]: no credentials, query (the builder adds ca_cert and
// friends itself) or fragment.
func ParseSinkURL(raw string) (SinkURL, error) {
	shown := RedactSinkURI(strings.TrimSpace(raw)) // errors are logged: no credentials in them
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // without the URL itself
		}
		return SinkURL{}, invalid("sink URL %q: %v", shown, err)
	}
	switch strings.ToLower(u.Scheme) {
	case SchemeWebhookHTTPS:
	case "https", "webhook-http", "http":
		return SinkURL{}, invalid("sink URL %q: scheme must be %s:// (CockroachDB's webhook sink requires https and its own scheme name)", shown, SchemeWebhookHTTPS)
	default:
		return SinkURL{}, invalid("sink URL %q: scheme must be %s://", shown, SchemeWebhookHTTPS)
	}
	if u.Opaque != "" || u.Host == "" {
		return SinkURL{}, invalid("sink URL %q: missing host", shown)
	}
	if u.User != nil {
		return SinkURL{}, invalid("sink URL %q: credentials in the URL are not allowed; use the auth header", shown)
	}
	if u.RawQuery != "" || u.ForceQuery {
		return SinkURL{}, invalid("sink URL %q: query parameters are not allowed; CA and TLS settings are separate options", shown)
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return SinkURL{}, invalid("sink URL %q: fragment not allowed", shown)
	}
	host := u.Hostname()
	if host == "" {
		return SinkURL{}, invalid("sink URL %q: missing host", shown)
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return SinkURL{}, invalid("sink URL %q: bad port %q", shown, p)
		}
	}
	if strings.ContainsAny(u.Host, " '\"\\") {
		return SinkURL{}, invalid("sink URL %q: bad host", shown)
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	return SinkURL{Host: strings.ToLower(u.Host), Path: path}, nil
}

var (
	identRe  = regexp.MustCompile(`^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*){0,2}$`)
	cursorRe = regexp.MustCompile(`^[0-9]{1,19}(\.[0-9]{1,10})?$`)
)

func (o Options) withDefaults() Options {
	if o.Mode == "" {
		o.Mode = ModeFiltered
	}
	if o.Table == "" {
		o.Table = "journal"
	}
	if o.Resolved > 0 && o.MinCheckpointFrequency == 0 && o.Resolved < defaultCheckpoint {
		o.MinCheckpointFrequency = o.Resolved
	}
	return o
}

// Validate reports the first problem with o, wrapped in ErrInvalidOptions.
func (o Options) Validate() error {
	o = o.withDefaults()
	_, err := o.validate()
	return err
}

func (o Options) validate() (SinkURL, error) {
	if o.Mode != ModeFiltered && o.Mode != ModeTable {
		return SinkURL{}, invalid("mode %q: want %q or %q", o.Mode, ModeFiltered, ModeTable)
	}
	if !identRe.MatchString(o.Table) {
		return SinkURL{}, invalid("table %q: want a lower-case SQL identifier", o.Table)
	}
	sink, err := ParseSinkURL(o.SinkURL)
	if err != nil {
		return SinkURL{}, err
	}
	if o.CACertBase64 != "" && o.InsecureSkipVerify {
		return SinkURL{}, invalid("ca_cert and insecure_tls_skip_verify are mutually exclusive: pass the CA (certs.Bundle.CABase64) and leave verification on")
	}
	if o.CACertBase64 != "" {
		if err := checkCA(o.CACertBase64); err != nil {
			return SinkURL{}, err
		}
	}
	if strings.ContainsAny(o.AuthHeader, "\x00\r\n") {
		return SinkURL{}, invalid("auth header must not contain NUL, CR or LF")
	}
	if o.ClientTimeout <= 0 {
		return SinkURL{}, invalid("client timeout must be set and positive: without it the current webhook sink waits forever on a hung server")
	}
	for name, d := range map[string]time.Duration{
		"client timeout": o.ClientTimeout, "resolved": o.Resolved,
		"min checkpoint frequency": o.MinCheckpointFrequency,
		"flush frequency":          o.Flush.Frequency, "retry backoff": o.Retry.Backoff,
	} {
		if d < 0 {
			return SinkURL{}, invalid("%s must not be negative (got %s)", name, d)
		}
		if d%time.Millisecond != 0 {
			return SinkURL{}, invalid("%s must be a whole number of milliseconds (got %s)", name, d)
		}
	}
	if o.Flush.Messages < 0 || o.Flush.Bytes < 0 {
		return SinkURL{}, invalid("flush messages and bytes must not be negative")
	}
	if (o.Flush.Messages > 0 || o.Flush.Bytes > 0) && o.Flush.Frequency == 0 {
		return SinkURL{}, invalid("flush frequency must be non-zero when flush messages or bytes is set (CockroachDB rejects the config otherwise)")
	}
	if o.Retry.Max < RetryForever {
		return SinkURL{}, invalid("retry max must be positive or RetryForever (got %d)", o.Retry.Max)
	}
	if o.Resolved > 0 {
		eff := o.MinCheckpointFrequency
		if eff == 0 {
			eff = defaultCheckpoint
		}
		if eff > o.Resolved {
			return SinkURL{}, invalid("resolved (%s) is below min_checkpoint_frequency (%s): resolved messages cannot be emitted more often than checkpoints; set min checkpoint frequency ≤ resolved", fmtDuration(o.Resolved), fmtDuration(eff))
		}
	}
	if o.Cursor != "" && !cursorRe.MatchString(o.Cursor) {
		return SinkURL{}, invalid("cursor %q: want an HLC timestamp like 1629813621680097993.0000000000", o.Cursor)
	}
	switch o.InitialScan {
	case "", "yes", "no":
	case "only":
		if o.Resolved > 0 {
			return SinkURL{}, invalid("initial_scan='only' ends after the scan; it does not combine with resolved")
		}
	default:
		return SinkURL{}, invalid("initial scan %q: want yes, no or only", o.InitialScan)
	}
	return sink, nil
}

func checkCA(b64 string) error {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return invalid("ca cert: not standard base64 of a PEM file: %v", err)
	}
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != "CERTIFICATE" {
		return invalid("ca cert: base64 does not decode to a PEM CERTIFICATE block")
	}
	return nil
}

// BuildCreate returns the CREATE CHANGEFEED statement for o.
// https://www.cockroachlabs.com/docs/stable/create-changefeed
func BuildCreate(o Options) (string, error) {
	o = o.withDefaults()
	sink, err := o.validate()
	if err != nil {
		return "", err
	}
	into := quote(sinkURI(sink, o))
	opts, err := o.withClause()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	switch o.Mode {
	case ModeTable:
		fmt.Fprintf(&b, "CREATE CHANGEFEED FOR TABLE %s INTO %s WITH %s", o.Table, into, opts)
	default:
		// CDC query: https://www.cockroachlabs.com/docs/stable/cdc-queries
		fmt.Fprintf(&b, "CREATE CHANGEFEED INTO %s WITH %s AS SELECT * FROM %s WHERE %s",
			into, opts, o.Table, journalPredicate)
	}
	return b.String(), nil
}

// sinkURI adds the TLS query parameters, URL-encoded as the docs require.
// https://www.cockroachlabs.com/docs/stable/create-changefeed#query-parameters
func sinkURI(s SinkURL, o Options) string {
	q := url.Values{}
	if o.CACertBase64 != "" {
		q.Set("ca_cert", o.CACertBase64)
	}
	if o.InsecureSkipVerify {
		q.Set("insecure_tls_skip_verify", "true")
	}
	u := s.String()
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

func (o Options) withClause() (string, error) {
	var opts []string
	if o.Mode == ModeFiltered {
		// CDC queries default to the bare envelope; wrapped keeps one shape for the webhook.
		// https://www.cockroachlabs.com/docs/stable/create-changefeed#envelope
		opts = append(opts, "envelope = 'wrapped'")
	}
	if o.Updated {
		opts = append(opts, "updated")
	}
	if o.Diff {
		opts = append(opts, "diff")
	}
	if o.Resolved > 0 {
		opts = append(opts, "resolved = "+quote(fmtDuration(o.Resolved)))
	}
	if o.MinCheckpointFrequency > 0 {
		opts = append(opts, "min_checkpoint_frequency = "+quote(fmtDuration(o.MinCheckpointFrequency)))
	}
	if o.Cursor != "" {
		opts = append(opts, "cursor = "+quote(o.Cursor))
	}
	if o.InitialScan != "" {
		opts = append(opts, "initial_scan = "+quote(o.InitialScan))
	}
	if o.AuthHeader != "" {
		opts = append(opts, "webhook_auth_header = "+quote(o.AuthHeader))
	}
	opts = append(opts, "webhook_client_timeout = "+quote(fmtDuration(o.ClientTimeout)))
	cfg, err := sinkConfig(o.Flush, o.Retry)
	if err != nil {
		return "", err
	}
	if cfg != "" {
		opts = append(opts, "webhook_sink_config = "+quote(cfg))
	}
	return strings.Join(opts, ", "), nil
}

// sinkConfig renders webhook_sink_config, or "" when nothing is configured.
// https://www.cockroachlabs.com/docs/stable/changefeed-sinks#webhook-sink-configuration
func sinkConfig(f Flush, r Retry) (string, error) {
	type flushJSON struct {
		Messages  int    `json:"Messages,omitempty"`
		Bytes     int    `json:"Bytes,omitempty"`
		Frequency string `json:"Frequency,omitempty"`
	}
	type retryJSON struct {
		Max     any    `json:"Max,omitempty"`
		Backoff string `json:"Backoff,omitempty"`
	}
	type configJSON struct {
		Flush *flushJSON `json:"Flush,omitempty"`
		Retry *retryJSON `json:"Retry,omitempty"`
	}
	var c configJSON
	if f != (Flush{}) {
		c.Flush = &flushJSON{Messages: f.Messages, Bytes: f.Bytes}
		if f.Frequency > 0 {
			c.Flush.Frequency = fmtDuration(f.Frequency)
		}
	}
	if r != (Retry{}) {
		c.Retry = &retryJSON{}
		switch {
		case r.Max == RetryForever:
			c.Retry.Max = "inf"
		case r.Max > 0:
			c.Retry.Max = r.Max
		}
		if r.Backoff > 0 {
			c.Retry.Backoff = fmtDuration(r.Backoff)
		}
	}
	if c.Flush == nil && c.Retry == nil {
		return "", nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encoding webhook_sink_config: %w", err)
	}
	return string(b), nil
}

// fmtDuration writes d in the largest whole unit, a form both Go's time.ParseDuration
// (webhook_sink_config) and CockroachDB's interval parser (resolved, …) accept.
func fmtDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	default:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	}
}

// quote renders s as an SQL string literal: single quotes doubled. CockroachDB and
// PostgreSQL (standard_conforming_strings) take backslashes literally inside '…'.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// OutboxSinkSuffix is appended to the journal webhook's path for the outbox feed: the
// same HTTPS webhook server, a route of its own (see outbox.WebhookHandler).
const OutboxSinkSuffix = "/outbox"

// BuildOutboxCreate returns the CREATE CHANGEFEED of the outbox table, CockroachDB's
// replacement for PostgreSQL's NOTIFY: a CDC query that emits the id of every outbox row
// written and not yet sent, to the outbox route of inboxd's webhook, which wakes the
// relay. o.SinkURL is that route's URL (the journal sink + OutboxSinkSuffix); o.Mode and
// o.Table are ignored.
//
// The WHERE clause sees the new version of a row only, so marking a row sent emits
// nothing; a lease update of an unsent row does emit again, which only wakes the relay
// once more. A delete is evaluated with every column but the primary key NULL
// (known-limitations/cdc-queries), so `sent_at IS NULL` alone would let the relay's
// cleanup deletes through as "after": null; event_op() != 'delete' drops them, as the
// docs' outbox example does ("Filter delete messages", "Queries and the outbox
// pattern"). The rows stay in the table until the broker has them, so the webhook
// answers 2xx at once and the feed never blocks on the broker.
// https://www.cockroachlabs.com/docs/stable/cdc-queries#filter-delete-messages
// https://www.cockroachlabs.com/docs/stable/cdc-queries#queries-and-the-outbox-pattern
// https://www.cockroachlabs.com/docs/stable/create-changefeed
func BuildOutboxCreate(o Options) (string, error) {
	o.Mode, o.Table = ModeFiltered, "outbox"
	o = o.withDefaults()
	sink, err := o.validate()
	if err != nil {
		return "", err
	}
	opts, err := o.withClause()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("CREATE CHANGEFEED INTO %s WITH %s AS SELECT id FROM outbox WHERE %s",
		quote(sinkURI(sink, o)), opts, outboxPredicate), nil
}

// journalPredicate selects the journal rows the feed emits: every version but deletes.
// Processing writes journal_state only, so a journal row is written once, by ingest
// (and again only by an operator's edit, which retries the entry): each event is
// emitted once, as it is journaled. The retention pruner's deletes are evaluated with
// every column but the primary key NULL and event_op() = 'delete' (docs cdc-queries,
// "Filter delete messages"); they are dropped here.
const journalPredicate = "event_op() != 'delete'"

// outboxPredicate selects the outbox rows the feed emits: new unsent rows, never deletes.
const outboxPredicate = "sent_at IS NULL AND event_op() != 'delete'"
