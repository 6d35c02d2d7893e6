package sqlcheck

import "testing"

func TestProbe(t *testing.T) {
	c, err := newChecker([]string{`CREATE TABLE journal (id UUID PRIMARY KEY, status TEXT, next_attempt_at TIMESTAMPTZ, last_error TEXT, updated_at TIMESTAMPTZ, attempts INT)`})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		`UPDATE journal SET status = 'FAILED', attempts = attempts + 1, last_error = $2,
		       next_attempt_at = now() + $3 * INTERVAL '1 millisecond', updated_at = now()
		WHERE id = $1`,
		`UPDATE journal SET status = 'FAILED', attempts = attempts + 1, last_error = $2,
		       next_attempt_at = now() + $3::INT8 * INTERVAL '1 millisecond', updated_at = now()
		WHERE id = $1`,
		`SELECT $1`,
		`SELECT id FROM journal WHERE status = ANY ($1::TEXT[]) ORDER BY id LIMIT $2`,
	} {
		r, err := c.check(s)
		t.Log(r, err)
	}
}
