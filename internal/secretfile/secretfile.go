// Package secretfile reads the files that hold inboxd's secrets: private keys
// (the webhook's INBOXD_KEY_FILE, the broker client's INBOXD_STOMP_KEY_FILE) and the
// *_FILE settings (tokens, passwords). One rule holds for all of them: Read.
// ReadBounded reads the public files beside them (certificates, CA bundles) with the
// same bounds and no rule on the mode.
package secretfile

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrReadableByAll is wrapped by the error for a secret file every local user can read.
var ErrReadableByAll = errors.New("readable by every user")

// Read returns the content of the secret file at path. It refuses a file every local
// user can read (mode o+r: whatever it protects is no secret then; group-readable is
// fine, as for a Kubernetes secret volume with fsGroup or Debian's ssl-cert group),
// anything but a regular file (a FIFO would block start forever), and a file larger
// than limit bytes. The mode is checked on the file opened, not on its path.
func Read(path string, limit int64) ([]byte, error) { return read(path, limit, true) }

// ReadBounded is Read for a file that is not secret (a certificate, a CA bundle): a
// regular file of at most limit bytes, whatever its mode.
func ReadBounded(path string, limit int64) ([]byte, error) { return read(path, limit, false) }

func read(path string, limit int64, secret bool) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		// A FIFO or a device could block forever or never end.
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); secret && perm&0o004 != 0 {
		return nil, fmt.Errorf("%s is %w (mode %04o); restrict it, e.g. chmod 600 %s (Kubernetes: defaultMode 0400)",
			path, ErrReadableByAll, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		if !secret {
			return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
		}
		return nil, fmt.Errorf("%s is larger than %d bytes: not a secret", path, limit)
	}
	return b, nil
}
