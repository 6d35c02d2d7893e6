package feed

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Retention is what inboxd keeps on CockroachDB, where row-level TTL deletes the expired
// quarantine rows and attempt history; a zero duration keeps that table's rows forever
// (and removes a TTL set before). The journal itself has no TTL: an entry's status and
// last update are in journal_state, and a TTL expression reads only the columns of its
// own row (CockroachDB validates it like a computed column's, without subqueries:
// ValidateTTLExpirationExpression, pkg/sql/catalog/schemaexpr/expr.go), so the
// retention pruner (internal/retention) deletes settled entries, with their state and
// history, on CockroachDB as on PostgreSQL.
// https://www.cockroachlabs.com/docs/stable/row-level-ttl
type Retention struct {
	Journal    time.Duration // PROCESSED and REJECTED entries' attempt history (journal_attempt)
	Quarantine time.Duration // quarantine rows, after they were received
}

// ttlCron runs the TTL job hourly rather than at the default daily, so that rows do not
// outlive their retention by up to a day.
// https://www.cockroachlabs.com/docs/stable/row-level-ttl#ttl-storage-parameters
const ttlCron = "@hourly"

// ResetTTLSQL removes row-level TTL from a table: RESET (ttl) drops every TTL storage
// parameter (cockroachdb/cockroach#110746).
// https://www.cockroachlabs.com/docs/stable/row-level-ttl#remove-row-level-ttl-from-a-table
func ResetTTLSQL(table string) string { return fmt.Sprintf("ALTER TABLE %s RESET (ttl)", table) }

// showCreateSQL reads a table's definition, which lists its TTL storage parameters.
// https://www.cockroachlabs.com/docs/stable/show-create
func showCreateSQL(table string) string {
	return fmt.Sprintf("SELECT create_statement FROM [SHOW CREATE TABLE %s]", table)
}

// BuildQuarantineTTL returns the ALTER TABLE that expires quarantine rows retention after
// received_at. It converts through UTC, so that no session time zone moves
// an expiry (CockroachDB itself accepts any expression that is at most stable), and keeps
// the TTL job's deletes out of changefeeds.
func BuildQuarantineTTL(retention time.Duration) (string, error) {
	if retention < time.Second || retention%time.Second != 0 {
		return "", invalid("quarantine ttl retention must be a positive whole number of seconds (got %s)", retention)
	}
	expr := fmt.Sprintf(`((received_at AT TIME ZONE 'UTC') + '%d seconds'::INTERVAL) AT TIME ZONE 'UTC'`, int64(retention/time.Second))
	return fmt.Sprintf("ALTER TABLE quarantine SET (ttl_expiration_expression = %s, ttl_job_cron = %s, ttl_disable_changefeed_replication = true)",
		quote(expr), quote(ttlCron)), nil
}

// BuildAttemptTTL returns the ALTER TABLE that expires the attempt history
// (journal_attempt) retention after an attempt was recorded: the journal's retention,
// so that the history of a PROCESSED entry lasts as long as the entry.
func BuildAttemptTTL(retention time.Duration) (string, error) {
	if retention < time.Second || retention%time.Second != 0 {
		return "", invalid("attempt history ttl retention must be a positive whole number of seconds (got %s)", retention)
	}
	expr := fmt.Sprintf(`((recorded_at AT TIME ZONE 'UTC') + '%d seconds'::INTERVAL) AT TIME ZONE 'UTC'`, int64(retention/time.Second))
	return fmt.Sprintf("ALTER TABLE journal_attempt SET (ttl_expiration_expression = %s, ttl_job_cron = %s, ttl_disable_changefeed_replication = true)",
		quote(expr), quote(ttlCron)), nil
}

// RetentionStatements returns the statements that set r: a TTL per table with a
// retention, and a RESET for a table without one (ApplyRetention sends the RESET only
// where a TTL is set). The journal's TTL is always reset: the TTL an inboxd before v0.3.0
// set read journal.status and updated_at, which v0.3.0 moved to journal_state, and the
// retention pruner deletes expired entries instead (see Retention). So is journal_state's,
// which v0.2.0 set beside it: the pruner finds an entry through its state row, so a state
// row the TTL deleted first would leave its entry behind for good.
func RetentionStatements(r Retention) ([]string, error) {
	out := []string{ResetTTLSQL("journal"), ResetTTLSQL("journal_state")}
	if r.Journal > 0 {
		s, err := BuildAttemptTTL(r.Journal)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	} else {
		out = append(out, ResetTTLSQL("journal_attempt"))
	}
	if r.Quarantine > 0 {
		s, err := BuildQuarantineTTL(r.Quarantine)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	} else {
		out = append(out, ResetTTLSQL("quarantine"))
	}
	return out, nil
}

// ApplyRetention sets row-level TTL on the journal's attempt history and the quarantine
// as r says, removes the journal's, and returns the statements it ran. A RESET is sent
// only to a table that has a TTL.
func (m *Manager) ApplyRetention(ctx context.Context, r Retention) ([]string, error) {
	stmts, err := RetentionStatements(r)
	if err != nil {
		return nil, err
	}
	if !m.dialect.RowTTL() {
		return nil, ErrNeedsCockroachDB
	}
	var ran []string
	for _, stmt := range stmts {
		if strings.HasSuffix(stmt, "RESET (ttl)") {
			table := strings.Fields(stmt)[2]
			var def string
			if err := m.db.QueryRow(ctx, showCreateSQL(table), simple).Scan(&def); err != nil {
				return ran, fmt.Errorf("reading the definition of %s: %w", table, err)
			}
			if !strings.Contains(def, "ttl") {
				continue
			}
		}
		if _, err := m.db.Exec(ctx, stmt, simple); err != nil {
			return ran, fmt.Errorf("setting row-level TTL (%s): %w", stmt, err)
		}
		ran = append(ran, stmt)
	}
	return ran, nil
}

// TTLInForce is the row-level TTL a table has, as its definition shows it.
type TTLInForce struct {
	Set bool // the table has a TTL
	// Retention is the interval its expiration expression adds, when Known: CockroachDB
	// may print the expression reformatted (the interval as '604800 seconds', '7 days'
	// or '168:00:00'), so an interval in none of those forms is left unknown rather than
	// misread.
	Retention time.Duration
	Known     bool
}

// ttlExpression finds the ttl_expiration_expression storage parameter in a SHOW CREATE
// TABLE statement (WITH (ttl = 'on', ttl_expiration_expression = e'…', …)).
// https://www.cockroachlabs.com/docs/stable/row-level-ttl#view-ttl-storage-parameters-on-a-table
var ttlExpression = regexp.MustCompile(`ttl_expiration_expression\s*=\s*e?'((?:[^'\\]|\\.|'')*)'`)

// The interval literal of an expiration expression, in the forms CockroachDB prints.
var (
	intervalSeconds = regexp.MustCompile(`'(\d+) seconds?'`)
	intervalDays    = regexp.MustCompile(`'(\d+) days?(?: (\d+):(\d\d):(\d\d))?'`)
	intervalClock   = regexp.MustCompile(`'(\d+):(\d\d):(\d\d)'`)
)

// ParseTTL reads the TTL in force from a table's SHOW CREATE TABLE statement.
func ParseTTL(createStatement string) TTLInForce {
	m := ttlExpression.FindStringSubmatch(createStatement)
	if m == nil {
		return TTLInForce{}
	}
	expr := strings.NewReplacer(`\'`, `'`, `''`, `'`).Replace(m[1])
	num := func(s string) time.Duration { n, _ := strconv.ParseInt(s, 10, 64); return time.Duration(n) }
	clock := func(h, mi, s string) time.Duration {
		return num(h)*time.Hour + num(mi)*time.Minute + num(s)*time.Second
	}
	switch {
	case intervalSeconds.MatchString(expr):
		return TTLInForce{Set: true, Known: true, Retention: num(intervalSeconds.FindStringSubmatch(expr)[1]) * time.Second}
	case intervalDays.MatchString(expr):
		d := intervalDays.FindStringSubmatch(expr)
		r := num(d[1]) * 24 * time.Hour
		if d[2] != "" {
			r += clock(d[2], d[3], d[4])
		}
		return TTLInForce{Set: true, Known: true, Retention: r}
	case intervalClock.MatchString(expr):
		c := intervalClock.FindStringSubmatch(expr)
		return TTLInForce{Set: true, Known: true, Retention: clock(c[1], c[2], c[3])}
	}
	return TTLInForce{Set: true}
}

// RetentionDrift compares the TTL in force on the journal and the quarantine with want,
// and describes each difference; none when they agree (or an interval cannot be read).
// The journal should have no TTL at all whatever want says: the retention pruner keeps
// want.Journal (see Retention).
func RetentionDrift(want Retention, journal, quarantine TTLInForce) []string {
	var out []string
	check := func(table string, want time.Duration, got TTLInForce) {
		switch {
		case want == 0 && got.Set:
			out = append(out, fmt.Sprintf("%s: a TTL is in force, the configuration keeps its rows forever", table))
		case want > 0 && !got.Set:
			out = append(out, fmt.Sprintf("%s: no TTL is in force, the configuration keeps its rows %s", table, want))
		case want > 0 && got.Known && got.Retention != want:
			out = append(out, fmt.Sprintf("%s: the TTL in force keeps rows %s, the configuration %s", table, got.Retention, want))
		}
	}
	if journal.Set {
		out = append(out, "journal: a row-level TTL is in force, set before v0.3.0; the retention pruner deletes expired entries now, and the migrating step removes it")
	}
	check("quarantine", want.Quarantine, quarantine)
	return out
}

// RetentionInForce reads the TTL in force on the journal and the quarantine. It needs
// no privilege beyond reading the tables' definitions, so a runtime role without DDL
// rights can compare it with its configuration.
func (m *Manager) RetentionInForce(ctx context.Context) (journal, quarantine TTLInForce, err error) {
	if !m.dialect.RowTTL() {
		return TTLInForce{}, TTLInForce{}, ErrNeedsCockroachDB
	}
	read := func(table string) (TTLInForce, error) {
		var def string
		if err := m.db.QueryRow(ctx, showCreateSQL(table), simple).Scan(&def); err != nil {
			return TTLInForce{}, fmt.Errorf("reading the definition of %s: %w", table, err)
		}
		return ParseTTL(def), nil
	}
	if journal, err = read("journal"); err != nil {
		return
	}
	quarantine, err = read("quarantine")
	return
}
