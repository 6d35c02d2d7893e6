package feed

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// testCA is base64 of a minimal PEM CERTIFICATE block; testCAQ is its URL-encoded form.
const (
	testCA  = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCkFBQUEKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="
	testCAQ = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCkFBQUEKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo%3D"
)

func TestBuildCreate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{
			name: "defaults filtered",
			opts: DefaultOptions("webhook-https://inboxd:8443/changefeed", testCA, "Bearer s3cret"),
			want: "CREATE CHANGEFEED INTO 'webhook-https://inboxd:8443/changefeed?ca_cert=" + testCAQ + "' " +
				"WITH envelope = 'wrapped', updated, resolved = '10s', min_checkpoint_frequency = '10s', " +
				"webhook_auth_header = 'Bearer s3cret', webhook_client_timeout = '10s', " +
				`webhook_sink_config = '{"Flush":{"Messages":100,"Bytes":1048576,"Frequency":"200ms"},"Retry":{"Max":"inf","Backoff":"500ms"}}' ` +
				"AS SELECT * FROM journal WHERE event_op() != 'delete'",
		},
		{
			name: "table mode",
			opts: func() Options {
				o := DefaultOptions("webhook-https://inboxd:8443/changefeed", testCA, "Bearer s3cret")
				o.Mode = ModeTable
				return o
			}(),
			want: "CREATE CHANGEFEED FOR TABLE journal INTO 'webhook-https://inboxd:8443/changefeed?ca_cert=" + testCAQ + "' " +
				"WITH updated, resolved = '10s', min_checkpoint_frequency = '10s', " +
				"webhook_auth_header = 'Bearer s3cret', webhook_client_timeout = '10s', " +
				`webhook_sink_config = '{"Flush":{"Messages":100,"Bytes":1048576,"Frequency":"200ms"},"Retry":{"Max":"inf","Backoff":"500ms"}}'`,
		},
		{
			name: "minimal, insecure, no path",
			opts: Options{SinkURL: "webhook-https://127.0.0.1:8443", InsecureSkipVerify: true, ClientTimeout: 3 * time.Second},
			want: "CREATE CHANGEFEED INTO 'webhook-https://127.0.0.1:8443/?insecure_tls_skip_verify=true' " +
				"WITH envelope = 'wrapped', webhook_client_timeout = '3s' AS SELECT * FROM journal WHERE event_op() != 'delete'",
		},
		{
			name: "quotes doubled, cursor, scan, diff, resolved defaults checkpoint",
			opts: Options{
				Mode: ModeTable, SinkURL: "WEBHOOK-HTTPS://Sink.Example:9443/a/b", AuthHeader: "Basic it's",
				ClientTimeout: 90 * time.Second, Updated: true, Diff: true, Resolved: 5 * time.Second,
				Cursor: "1629813621680097993.0000000001", InitialScan: "yes",
				Flush: Flush{Bytes: 1 << 20, Frequency: time.Second}, Retry: Retry{Max: 5},
			},
			want: "CREATE CHANGEFEED FOR TABLE journal INTO 'webhook-https://sink.example:9443/a/b' " +
				"WITH updated, diff, resolved = '5s', min_checkpoint_frequency = '5s', " +
				"cursor = '1629813621680097993.0000000001', initial_scan = 'yes', " +
				"webhook_auth_header = 'Basic it''s', webhook_client_timeout = '90s', " +
				`webhook_sink_config = '{"Flush":{"Bytes":1048576,"Frequency":"1s"},"Retry":{"Max":5}}'`,
		},
		{
			name: "resolved at 30s needs no explicit checkpoint",
			opts: Options{SinkURL: "webhook-https://h/p", ClientTimeout: time.Minute, Resolved: 2 * time.Minute, Table: "public.journal"},
			want: "CREATE CHANGEFEED INTO 'webhook-https://h/p' WITH envelope = 'wrapped', resolved = '2m', " +
				"webhook_client_timeout = '1m' AS SELECT * FROM public.journal WHERE event_op() != 'delete'",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := BuildCreate(tt.opts)
			if err != nil {
				t.Fatalf("BuildCreate: %v", err)
			}
			if got != tt.want {
				t.Errorf("BuildCreate:\n got  %s\n want %s", got, tt.want)
			}
		})
	}
}

func TestBuildCreateRejects(t *testing.T) {
	t.Parallel()
	ok := func() Options { return DefaultOptions("webhook-https://inboxd:8443/changefeed", testCA, "Bearer t") }
	tests := []struct {
		name   string
		mutate func(*Options)
		want   string // substring of the error
	}{
		{"https scheme", func(o *Options) { o.SinkURL = "https://inboxd:8443/x" }, "scheme must be webhook-https"},
		{"http webhook", func(o *Options) { o.SinkURL = "webhook-http://inboxd:8443/x" }, "requires https"},
		{"no host", func(o *Options) { o.SinkURL = "webhook-https:///x" }, "missing host"},
		{"credentials", func(o *Options) { o.SinkURL = "webhook-https://u:p@inboxd/x" }, "credentials"},
		{"query", func(o *Options) { o.SinkURL = "webhook-https://inboxd/x?ca_cert=abc" }, "query parameters"},
		{"bad port", func(o *Options) { o.SinkURL = "webhook-https://inboxd:0/x" }, "bad port"},
		{"quote in host", func(o *Options) { o.SinkURL = "webhook-https://in'boxd/x" }, ""},
		{"ca and insecure", func(o *Options) { o.InsecureSkipVerify = true }, "mutually exclusive"},
		{"ca not base64", func(o *Options) { o.CACertBase64 = "not base64!" }, "base64"},
		{"ca not pem", func(o *Options) { o.CACertBase64 = "aGVsbG8=" }, "PEM CERTIFICATE"},
		{"no timeout", func(o *Options) { o.ClientTimeout = 0 }, "client timeout must be set"},
		{"sub-ms duration", func(o *Options) { o.ClientTimeout = time.Second + time.Microsecond }, "whole number of milliseconds"},
		{"flush without frequency", func(o *Options) { o.Flush.Frequency = 0 }, "flush frequency must be non-zero"},
		{"negative flush", func(o *Options) { o.Flush.Messages = -1 }, "must not be negative"},
		{"retry max", func(o *Options) { o.Retry.Max = -2 }, "retry max"},
		{"resolved below checkpoint", func(o *Options) { o.MinCheckpointFrequency = 20 * time.Second }, "below min_checkpoint_frequency"},
		{"bad cursor", func(o *Options) { o.Cursor = "yesterday" }, "cursor"},
		{"cursor injection", func(o *Options) { o.Cursor = "1' , x = '1" }, "cursor"},
		{"bad scan", func(o *Options) { o.InitialScan = "maybe" }, "initial scan"},
		{"scan only with resolved", func(o *Options) { o.InitialScan = "only" }, "only"},
		{"bad mode", func(o *Options) { o.Mode = "all" }, "mode"},
		{"bad table", func(o *Options) { o.Table = "journal; DROP TABLE x" }, "table"},
		{"header newline", func(o *Options) { o.AuthHeader = "Bearer a\r\nX: y" }, "auth header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ok()
			tt.mutate(&o)
			_, err := BuildCreate(o)
			if err == nil {
				t.Fatal("BuildCreate accepted invalid options")
			}
			if !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("error %v does not wrap ErrInvalidOptions", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
			if o.Validate() == nil {
				t.Error("Validate accepted what BuildCreate refused")
			}
		})
	}
}

func TestManagementSQL(t *testing.T) {
	t.Parallel()
	tests := []struct{ got, want string }{
		{EnableRangefeedsSQL, "SET CLUSTER SETTING kv.rangefeed.enabled = true"},
		{PauseJobSQL(123), "PAUSE JOB 123"},
		{ResumeJobSQL(123), "RESUME JOB 123"},
		{CancelJobSQL(9007199254740993), "CANCEL JOB 9007199254740993"},
		{showJobsSQL, "SELECT job_id, COALESCE(description, ''), COALESCE(status, ''), COALESCE(running_status, ''), " +
			"COALESCE(high_water_timestamp::STRING, ''), COALESCE(error, ''), COALESCE(sink_uri, '') FROM [SHOW CHANGEFEED JOBS]"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got  %s\nwant %s", tt.got, tt.want)
		}
	}
}

func TestParseHLC(t *testing.T) {
	t.Parallel()
	got, err := ParseHLC("1629813621680097993.0000000000")
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Unix(0, 1629813621680097993).UTC(); !got.Equal(want) {
		t.Errorf("ParseHLC = %v, want %v", got, want)
	}
	for _, bad := range []string{"", ".5", "abc", "-1.0", "99999999999999999999.0"} {
		if _, err := ParseHLC(bad); err == nil {
			t.Errorf("ParseHLC(%q) accepted", bad)
		}
	}
}

func TestFmtDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0s", 200 * time.Millisecond: "200ms", 1500 * time.Millisecond: "1500ms", 10 * time.Second: "10s",
		90 * time.Second: "90s", 2 * time.Minute: "2m", 3 * time.Hour: "3h",
	} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestJob(t *testing.T) {
	t.Parallel()
	j := Job{Status: "running", HighWater: "1629813621680097993.0000000000"}
	if j.Terminal() || !j.HighWaterTime().Equal(time.Unix(0, 1629813621680097993)) {
		t.Errorf("running job: terminal=%v hw=%v", j.Terminal(), j.HighWaterTime())
	}
	for _, s := range []string{"canceled", "failed", "succeeded"} {
		if !(Job{Status: s}).Terminal() {
			t.Errorf("%s not terminal", s)
		}
	}
	if !(Job{}).HighWaterTime().IsZero() {
		t.Error("empty high-water not zero")
	}
}

// The outbox feed: a CDC query on unsent rows, to the outbox route of the same webhook.
func TestBuildOutboxCreate(t *testing.T) {
	t.Parallel()
	o := DefaultOptions("webhook-https://inboxd:8443/changefeed"+OutboxSinkSuffix, testCA, "Bearer s3cret")
	o.Mode = ModeTable // ignored: the outbox feed is always a CDC query
	got, err := BuildOutboxCreate(o)
	if err != nil {
		t.Fatal(err)
	}
	want := "CREATE CHANGEFEED INTO 'webhook-https://inboxd:8443/changefeed/outbox?ca_cert=" + testCAQ + "' " +
		"WITH envelope = 'wrapped', updated, resolved = '10s', min_checkpoint_frequency = '10s', " +
		"webhook_auth_header = 'Bearer s3cret', webhook_client_timeout = '10s', " +
		`webhook_sink_config = '{"Flush":{"Messages":100,"Bytes":1048576,"Frequency":"200ms"},"Retry":{"Max":"inf","Backoff":"500ms"}}' ` +
		"AS SELECT id FROM outbox WHERE sent_at IS NULL AND event_op() != 'delete'"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := BuildOutboxCreate(Options{SinkURL: "http://inboxd/changefeed/outbox"}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("a non-webhook-https sink: %v", err)
	}
}
