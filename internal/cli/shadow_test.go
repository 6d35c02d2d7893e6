package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/inboxdtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

// "inboxd shadow" runs the program's own handlers (Options.Handle, as inboxdcli passes
// them) over the recorded history: the unchanged handler passes a -max-differences 0
// gate, the changed one fails it with exit 1, and the report is written in the format
// asked for.
func TestShadowCommand(t *testing.T) {
	db := testenv.NewDB(t)
	handler := func(rejectAll bool) inboxd.HandlerFunc {
		return func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
			if rejectAll {
				return inboxd.Reject(fmt.Errorf("closed"))
			}
			body, _ := json.Marshal(map[string]any{"order": ev.Key, "at": time.Now().UnixNano()})
			_, err := inboxd.Emit(ctx, tx, inboxd.Outgoing{Destination: "/queue/cli-out", Body: body})
			return err
		}
	}
	inboxdtest.Run(t, db.Pool, "order.placed", handler(false),
		inboxdtest.Message{Body: []byte(`{"id":"a-1"}`)}, inboxdtest.Message{Body: []byte(`{"id":"a-2"}`)})
	shadow := func(rejectAll bool, args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"shadow", "-database-url", db.URL, "-ignore", "body.$.at"}, args...), &out, &errOut,
			Options{Handle: func(c *inboxd.Client) { c.Handle("order.placed", handler(rejectAll)) }})
		return code, out.String(), errOut.String()
	}
	code, out, errOut := shadow(false, "-max-differences", "0")
	if code != 0 || !strings.Contains(out, `"same": 2`) {
		t.Fatalf("unchanged handler: exit %d, %s %s", code, out, errOut)
	}
	file := filepath.Join(t.TempDir(), "report.md")
	code, _, errOut = shadow(true, "-max-differences", "1", "-format", "markdown", "-out", file)
	if code != 1 || !strings.Contains(errOut, "2 events differ, more than -max-differences 1") {
		t.Fatalf("changed handler: exit %d, %s", code, errOut)
	}
	md, err := os.ReadFile(file)
	if err != nil || !strings.Contains(string(md), "outcome changed") || !strings.Contains(string(md), "| differing | 2 |") {
		t.Fatalf("markdown report: %v\n%s", err, md)
	}
	if code, _, errOut = shadow(false, "-format", "pdf"); code != 1 || !strings.Contains(errOut, "json, markdown or html") {
		t.Fatalf("-format pdf: exit %d, %s", code, errOut)
	}
	if code, _, errOut = shadow(false, "-ignore", "body.x"); code != 1 || !strings.Contains(errOut, "invalid ignore path") {
		t.Fatalf("bad -ignore: exit %d, %s", code, errOut)
	}
}
