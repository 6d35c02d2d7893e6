package cli

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/certs"
)

// create -dry-run prints the exact statements, secrets redacted, and never connects:
// the database URL points nowhere.
func TestChangefeedCreateDryRun(t *testing.T) {
	dir := t.TempDir()
	ca := base64.StdEncoding.EncodeToString([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	if err := os.WriteFile(filepath.Join(dir, certs.CABase64File), []byte(ca+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("INBOXD_WEBHOOK_TOKEN", "topsecret")
	code, out, errOut := run(t, "changefeed", "create", "-dry-run", "-cert-dir", dir,
		"-database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1",
		"-webhook-url", "webhook-https://inboxd:8443/changefeed")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	want := "SET CLUSTER SETTING kv.rangefeed.enabled = true;\n" +
		"CREATE CHANGEFEED INTO 'webhook-https://inboxd:8443/changefeed?ca_cert=redacted' WITH envelope = 'wrapped', updated, " +
		"resolved = '10s', min_checkpoint_frequency = '10s', webhook_auth_header = 'redacted', webhook_client_timeout = '10s', " +
		`webhook_sink_config = '{"Flush":{"Messages":100,"Bytes":1048576,"Frequency":"200ms"},"Retry":{"Max":"inf","Backoff":"500ms"}}' ` +
		"AS SELECT * FROM journal WHERE status = 'RECEIVED';\n"
	if out != want {
		t.Errorf("dry run printed\n%s\nwant\n%s", out, want)
	}
	if strings.Contains(out+errOut, "topsecret") || strings.Contains(out+errOut, ca) {
		t.Error("dry run printed a secret")
	}
	code, _, errOut = run(t, "changefeed", "pause", "-dry-run", "-database-url", "postgres://nobody@127.0.0.1:1/none")
	if code == 0 || !strings.Contains(errOut, "create only") {
		t.Errorf("pause -dry-run: exit %d, %q; want an error", code, errOut)
	}
}
