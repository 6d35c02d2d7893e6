package certs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 28, item 5: a world-readable INBOXD_KEY_FILE (the webhook's own TLS key, given
// by the operator) was used, while a world-readable broker key or _FILE secret is
// refused. Every private key and secret file an operator names follows one rule: not
// readable by every user (group-readable is fine, as for a Kubernetes secret with
// fsGroup or Debian's ssl-cert group).
func TestGivenKeyFileFollowsTheSecretFileRule(t *testing.T) {
	gen := filepath.Join(t.TempDir(), "gen")
	load(t, Config{Dir: gen, Hosts: []string{"localhost"}})
	for _, tc := range []struct {
		perm    os.FileMode
		wantErr string
	}{
		{0o600, ""},
		{0o400, ""},
		{0o640, ""},
		{0o644, "readable by every user"},
		{0o604, "readable by every user"},
	} {
		dir := t.TempDir()
		cert, key := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
		copyFile(t, filepath.Join(gen, ServerFile), cert, 0o644)
		copyFile(t, filepath.Join(gen, ServerKeyFile), key, tc.perm)
		_, err := Load(Config{CertFile: cert, KeyFile: key})
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("key at %04o: %v", tc.perm, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), key)):
			t.Errorf("key at %04o: err %v, want one naming %s and saying %q", tc.perm, err, key, tc.wantErr)
		}
	}
}

func copyFile(t *testing.T, from, to string, perm os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(to, perm); err != nil {
		t.Fatal(err)
	}
}
