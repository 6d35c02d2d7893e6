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
		"AS SELECT * FROM journal WHERE event_op() != 'delete';\n"
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

// create says how the sink's client timeout, the batch size and the handler timeout
// relate, and refuses values that cannot work together, saying why (issue 19 item 1).
func TestChangefeedCreateChecksTimeouts(t *testing.T) {
	dir := t.TempDir()
	ca := base64.StdEncoding.EncodeToString([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	if err := os.WriteFile(filepath.Join(dir, certs.CABase64File), []byte(ca+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("INBOXD_WEBHOOK_TOKEN", "topsecret")
	args := []string{"changefeed", "create", "-dry-run", "-cert-dir", dir, "-concurrency", "2",
		"-database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{name: "defaults", code: 0, stderr: []string{"A batch of up to 100 events runs on 2 worker(s), 50 events in sequence",
			"The sink waits 10s", "under 200ms", "handlers still run once", "One handler may run 30s"}},
		{name: "short client timeout", args: []string{"-client-timeout", "3s"}, code: 0, stderr: []string{"The sink waits 3s", "under 60ms"}},
		{name: "handler timeout over the process timeout", args: []string{"-handler-timeout", "10m"}, code: 1,
			stderr: []string{"webhook-process-timeout (5m0s) must be at least handler-timeout (10m0s)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := run(t, append(append([]string{}, args...), tt.args...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d: %s", code, tt.code, errOut)
			}
			for _, want := range tt.stderr {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut)
				}
			}
		})
	}
}
