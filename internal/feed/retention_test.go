package feed

import (
	"strings"
	"testing"
	"time"
)

// The row-level TTL statements inboxd migrate runs on CockroachDB, pinned byte for byte.
// https://www.cockroachlabs.com/docs/stable/row-level-ttl
func TestRetentionStatements(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		r    Retention
		want []string
	}{
		{"defaults", Retention{Journal: 168 * time.Hour, Quarantine: 720 * time.Hour}, []string{
			`ALTER TABLE journal RESET (ttl)`,
			`ALTER TABLE journal_state RESET (ttl)`,
			`ALTER TABLE journal_attempt SET (ttl_expiration_expression = '((recorded_at AT TIME ZONE ''UTC'') + ''604800 seconds''::INTERVAL) AT TIME ZONE ''UTC''', ttl_job_cron = '@hourly', ttl_disable_changefeed_replication = true)`,
			`ALTER TABLE quarantine SET (ttl_expiration_expression = '((received_at AT TIME ZONE ''UTC'') + ''2592000 seconds''::INTERVAL) AT TIME ZONE ''UTC''', ttl_job_cron = '@hourly', ttl_disable_changefeed_replication = true)`,
		}},
		{"an embedder's", Retention{Journal: 72 * time.Hour, Quarantine: 14 * 24 * time.Hour}, []string{
			`ALTER TABLE journal RESET (ttl)`,
			`ALTER TABLE journal_state RESET (ttl)`,
			`ALTER TABLE journal_attempt SET (ttl_expiration_expression = '((recorded_at AT TIME ZONE ''UTC'') + ''259200 seconds''::INTERVAL) AT TIME ZONE ''UTC''', ttl_job_cron = '@hourly', ttl_disable_changefeed_replication = true)`,
			`ALTER TABLE quarantine SET (ttl_expiration_expression = '((received_at AT TIME ZONE ''UTC'') + ''1209600 seconds''::INTERVAL) AT TIME ZONE ''UTC''', ttl_job_cron = '@hourly', ttl_disable_changefeed_replication = true)`,
		}},
		{"disabled", Retention{}, []string{`ALTER TABLE journal RESET (ttl)`, `ALTER TABLE journal_state RESET (ttl)`, `ALTER TABLE journal_attempt RESET (ttl)`, `ALTER TABLE quarantine RESET (ttl)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RetentionStatements(tt.r)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
	// No statement sets a TTL on the journal or its state, nor reads a status: the
	// journal's state is in journal_state, which a TTL expression on the journal cannot
	// read, and the pruner deletes expired entries with their state (v0.3.0).
	for _, r := range []Retention{{Journal: time.Hour}, {Journal: time.Hour, Quarantine: time.Hour}} {
		got, _ := RetentionStatements(r)
		for _, stmt := range got {
			if strings.HasPrefix(stmt, "ALTER TABLE journal SET") || strings.HasPrefix(stmt, "ALTER TABLE journal_state SET") || strings.Contains(stmt, "status") {
				t.Errorf("%+v: %s", r, stmt)
			}
		}
	}
	if _, err := RetentionStatements(Retention{Journal: 1500 * time.Millisecond}); err == nil {
		t.Error("a retention of 1.5s was accepted; TTL takes whole seconds")
	}
}

// Finding 2 of issue 9: the webhook's body cap follows from Flush.Bytes.
func TestWebhookBodyCapCoversFlushBytes(t *testing.T) {
	t.Parallel()
	f := DefaultOptions("webhook-https://x/y", "", "").Flush
	if f.Bytes == 0 {
		t.Fatal("no Flush.Bytes: batches of large rows are unbounded")
	}
	cap := WebhookBodyCap(f, 256<<10)
	if min := 6*int64(f.Bytes) + 12*(256<<10); cap < min {
		t.Errorf("cap %d is below six times Flush.Bytes plus one worst row (%d)", cap, min)
	}
}

// TestParseTTL reads the TTL in force from SHOW CREATE TABLE as CockroachDB prints it,
// the interval as inboxd sets it or reformatted, and compares it with a configuration.
func TestParseTTL(t *testing.T) {
	set, err := RetentionStatements(Retention{Journal: 72 * time.Hour, Quarantine: 14 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// What inboxd sends, as the statement's WITH clause would show it back.
	asShown := func(stmt string) string {
		_, with, _ := strings.Cut(stmt, "SET (")
		return "CREATE TABLE public.journal (\n\tid UUID NOT NULL\n) WITH (ttl = 'on', " + strings.TrimSuffix(with, ")") + ")"
	}
	tests := []struct {
		name string
		def  string
		want TTLInForce
	}{
		{"none", "CREATE TABLE public.journal (\n\tid UUID NOT NULL\n)", TTLInForce{}},
		{"as set", asShown(set[2]), TTLInForce{Set: true, Known: true, Retention: 72 * time.Hour}},
		{"e-string, days", `CREATE TABLE q (x INT8) WITH (ttl = 'on', ttl_expiration_expression = e'((received_at AT TIME ZONE \'UTC\') + \'14 days\':::INTERVAL) AT TIME ZONE \'UTC\'', ttl_job_cron = '@hourly')`,
			TTLInForce{Set: true, Known: true, Retention: 14 * 24 * time.Hour}},
		{"clock", `CREATE TABLE q (x INT8) WITH (ttl = 'on', ttl_expiration_expression = e'(received_at + \'72:00:00\':::INTERVAL)')`,
			TTLInForce{Set: true, Known: true, Retention: 72 * time.Hour}},
		{"days and clock", `CREATE TABLE q (x INT8) WITH (ttl = 'on', ttl_expiration_expression = e'(received_at + \'1 day 12:00:00\':::INTERVAL)')`,
			TTLInForce{Set: true, Known: true, Retention: 36 * time.Hour}},
		{"unreadable", `CREATE TABLE q (x INT8) WITH (ttl = 'on', ttl_expiration_expression = 'expires_at')`, TTLInForce{Set: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseTTL(tt.def); got != tt.want {
				t.Errorf("ParseTTL = %+v, want %+v", got, tt.want)
			}
		})
	}
	week, month := TTLInForce{Set: true, Known: true, Retention: 168 * time.Hour}, TTLInForce{Set: true, Known: true, Retention: 720 * time.Hour}
	// The journal has no TTL (the pruner keeps its retention), whatever the configuration.
	if d := RetentionDrift(Retention{Journal: 168 * time.Hour, Quarantine: 720 * time.Hour}, TTLInForce{}, month); len(d) != 0 {
		t.Errorf("the defaults in force: drift %q", d)
	}
	// A TTL set on the journal before v0.3.0 is drift, whatever its interval.
	d := RetentionDrift(Retention{Journal: 168 * time.Hour}, week, month)
	if len(d) != 2 || !strings.Contains(d[0], "journal: a row-level TTL is in force") ||
		!strings.Contains(d[1], "quarantine: a TTL is in force") {
		t.Errorf("drift %q", d)
	}
	if d := RetentionDrift(Retention{Journal: time.Hour, Quarantine: time.Hour}, TTLInForce{}, TTLInForce{}); len(d) != 1 || !strings.Contains(d[0], "quarantine: no TTL is in force") {
		t.Errorf("drift %q", d)
	}
}
