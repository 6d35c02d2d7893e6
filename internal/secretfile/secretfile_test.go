package secretfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, perm os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, perm); err != nil { // umask
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name    string
		path    string
		wantErr string
	}{
		{"owner only", write("a", "s3cret", 0o600), ""},
		{"read-only", write("b", "s3cret", 0o400), ""},
		{"group-readable", write("c", "s3cret", 0o640), ""},
		{"world-readable", write("d", "s3cret", 0o644), "readable by every user"},
		{"world-readable only", write("e", "s3cret", 0o604), "chmod 600"},
		{"too large", write("f", strings.Repeat("x", 11), 0o600), "larger than 10 bytes"},
		{"directory", dir, "not a regular file"},
		{"missing", filepath.Join(dir, "none"), "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Read(tc.path, 10)
			switch {
			case tc.wantErr == "" && (err != nil || string(b) != "s3cret"):
				t.Errorf("Read = %q, %v", b, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("err %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
	if _, err := Read(filepath.Join(dir, "d"), 10); !errors.Is(err, ErrReadableByAll) {
		t.Errorf("world-readable: %v does not wrap ErrReadableByAll", err)
	}
}
