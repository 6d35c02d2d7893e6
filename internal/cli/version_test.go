package cli

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/inboxd/inboxd/internal/testenv"
)

// Issue 19: migrate and changefeed create ran on any CockroachDB; on v23.2 migrate
// failed halfway (ttl_disable_changefeed_replication). PostgreSQL stands in for the
// server, behind a proxy that reports the crdb_version an old CockroachDB would.
func TestOldCockroachDBRefused(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	tests := []struct {
		name, version string
		args          []string
		wantCode      int
		want          string // in stderr
	}{
		{"migrate on v23.2", "CockroachDB CCL v23.2.15 (x86_64-pc-linux-gnu, built 2024/11/01 00:00:00, go1.22.5)",
			[]string{"migrate"}, 1, "the server runs v23.2.15, inboxd needs v24.1 or later"},
		{"changefeed create on v23.1", "CockroachDB CCL v23.1.29 (x86_64-pc-linux-gnu, built 2024/11/01 00:00:00, go1.22.5)",
			[]string{"changefeed", "create"}, 1, "inboxd needs v24.1 or later"},
		{"migrate on an unreadable version", "CockroachDB CCL (custom build)",
			[]string{"migrate"}, 1, "unreadable CockroachDB version"},
		{"migrate on v24.1.3 notes the license", "CockroachDB CCL v24.1.3 (x86_64-pc-linux-gnu, built 2024/08/01 00:00:00, go1.22.5)",
			[]string{"migrate"}, 0, "needs an Enterprise license key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(db.URL)
			if err != nil {
				t.Fatal(err)
			}
			u.Host = versionProxy(t, u.Host, tt.version)
			code, out, errOut := run(t, append(tt.args, "-database-url", u.String())...)
			if code != tt.wantCode || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d mentioning %q", code, out, errOut, tt.wantCode, tt.want)
			}
		})
	}
}

// versionProxy forwards connections to upstream and adds a ParameterStatus
// crdb_version=version before the server's first ReadyForQuery, as CockroachDB's
// startup does. It returns its address.
func versionProxy(t *testing.T, upstream, version string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	status := []byte{'S', 0, 0, 0, 0}
	status = append(status, "crdb_version\x00"+version+"\x00"...)
	binary.BigEndian.PutUint32(status[1:], uint32(len(status)-1))
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", upstream)
			if err != nil {
				client.Close()
				continue
			}
			track(client)
			track(server)
			wg.Go(func() {
				_, _ = io.Copy(server, client)
				server.Close()
			})
			wg.Go(func() {
				defer client.Close()
				if err := injectStatus(client, server, status); err != nil {
					return
				}
				_, _ = io.Copy(client, server)
			})
		}
	})
	return ln.Addr().String()
}

// injectStatus copies backend messages from src to dst until the first ReadyForQuery,
// writing status just before it.
func injectStatus(dst io.Writer, src io.Reader, status []byte) error {
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(src, hdr[:]); err != nil {
			return err
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n < 4 || n > 1<<20 {
			return errors.New("bad message length")
		}
		body := make([]byte, n-4)
		if _, err := io.ReadFull(src, body); err != nil {
			return err
		}
		if hdr[0] == 'Z' {
			if _, err := dst.Write(status); err != nil {
				return err
			}
		}
		if _, err := dst.Write(append(hdr[:], body...)); err != nil {
			return err
		}
		if hdr[0] == 'Z' {
			return nil
		}
	}
}
