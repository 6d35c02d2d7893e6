package schema_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/inboxd/inboxd/schema"
)

// A schema that is behind names only the migrations that would change it: a retired
// migration (comments only) is recorded when migrating, never asked for.
func TestSchemaBehindNamesNoRetiredMigration(t *testing.T) {
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var ve *schema.VersionError
	if err := schema.CheckNone(); !errors.As(err, &ve) || !errors.Is(err, schema.ErrSchemaBehind) {
		t.Fatalf("Check on an empty database: %v, want ErrSchemaBehind", err)
	}
	for _, m := range ms {
		if named := slices.Contains(ve.Missing, m.Name); named == m.Retired() {
			t.Errorf("%s: retired %v, named missing %v", m.Name, m.Retired(), named)
		}
	}
}
