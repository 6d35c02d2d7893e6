package loadgen

import (
	"context"
	"fmt"
	"strings"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
)

// Verify checks that the journal rows tagged with exp.Destination are exactly the
// unique valid ids (none missing, none extra, none twice), and that the quarantine rows
// of that destination are exactly the malformed messages.
func Verify(ctx context.Context, db database.DB, exp Expected) error {
	var problems []string
	got, err := journal.IDsByTag(ctx, db, exp.Destination)
	if err != nil {
		return err
	}
	problems = append(problems, compare("journal", exp.IDs, got)...)
	got, err = journal.QuarantineIDsByDestination(ctx, db, exp.Destination)
	if err != nil {
		return err
	}
	problems = append(problems, compare("quarantine", exp.QuarantineIDs, got)...)
	if len(problems) > 0 {
		return fmt.Errorf("ingest of %s is not exact: %s", exp.Destination, strings.Join(problems, "; "))
	}
	return nil
}

func compare(table string, want []string, got map[string]int) []string {
	var missing, twice []string
	wanted := make(map[string]bool, len(want))
	for _, id := range want {
		wanted[id] = true
		switch n := got[id]; {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			twice = append(twice, id)
		}
	}
	extra := 0
	for id := range got {
		if !wanted[id] {
			extra++
		}
	}
	var out []string
	if len(missing) > 0 {
		out = append(out, fmt.Sprintf("%s lacks %d of %d rows (e.g. %s)", table, len(missing), len(wanted), sample(missing)))
	}
	if len(twice) > 0 {
		out = append(out, fmt.Sprintf("%s holds %d ids more than once (e.g. %s)", table, len(twice), sample(twice)))
	}
	if extra > 0 {
		out = append(out, fmt.Sprintf("%s holds %d unexpected rows", table, extra))
	}
	return out
}

func sample(ids []string) string {
	if len(ids) > 3 {
		ids = ids[:3]
	}
	return strings.Join(ids, ", ")
}
