package inboxd_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/certs"
	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/webhook"
)

// The reference tutorial's commands, verbatim but for the port.
var tutorial = []string{
	`curl http://localhost:8090/registration/form > form.json`,
	`curl -v -d "@form.json" -H "Content-Type:application/json" -X POST http://localhost:8090/registration/`,
	`curl -v -d '{"name":"User","email":"user@email.com","jurisdiction":"mga","createdAt":"2023-01-12T09:21:04.571+00:00"}' -H "Content-Type:application/json" -X POST http://localhost:8090/registration/`,
}

// statusLine finds curl -v's status line anywhere on a line: curl's progress meter
// shares stderr with it and can end without a newline just before it (CI:
// "… 500< HTTP/1.1 202 Accepted").
var statusLine = regexp.MustCompile(`< HTTP/[0-9.]+ (\d{3})`)

// TestTutorialVerbatim runs the tutorial's curl commands against a whole inboxd (real
// ActiveMQ and PostgreSQL): both registrations are accepted, become customers, and
// each emits one customer-registered message that the outbox relay publishes.
func TestTutorialVerbatim(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("curl is needed (scripts/services.sh installs it): %v", err)
	}
	db := testenv.NewDB(t)
	queue := testenv.Queue(t)
	addr := testenv.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	startService(t, db, queue, func(c *inboxd.Config) {
		c.DisableWebhook = true
		c.HTTPAddr = "localhost:" + port
	})
	base := "http://localhost:" + port
	testenv.Eventually(t, 30*time.Second, "the API", func() bool {
		r, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	})

	dir := t.TempDir()
	var ids []string
	for i, cmd := range tutorial {
		cmd = strings.ReplaceAll(cmd, "localhost:8090", "localhost:"+port)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c := exec.CommandContext(ctx, "bash", "-c", cmd)
		c.Dir = dir
		out, err := c.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("step %d: %s: %v\n%s", i+1, cmd, err, out)
		}
		if i == 0 {
			continue // its output went to form.json
		}
		m := statusLine.FindSubmatch(out)
		if m == nil || string(m[1]) != "202" {
			t.Fatalf("step %d: %s: want HTTP 202\n%s", i+1, cmd, out)
		}
		// The body is the last line of curl's output (-v writes the rest to stderr).
		var acc struct{ ID, Status string }
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		for j := len(lines) - 1; j >= 0; j-- {
			if strings.HasPrefix(lines[j], "{") {
				if err := json.Unmarshal([]byte(lines[j][:strings.LastIndexByte(lines[j], '}')+1]), &acc); err == nil {
					break
				}
			}
		}
		if acc.ID == "" || acc.Status != "accepted" {
			t.Fatalf("step %d: no accepted id in\n%s", i+1, out)
		}
		ids = append(ids, acc.ID)
	}

	// POST /registration publishes to the first destination, which inboxd consumes.
	ctx := context.Background()
	testenv.Eventually(t, 60*time.Second, "both registrations processed and their events relayed", func() bool {
		return countOf(t, db, `SELECT count(*) FROM journal_state WHERE status = 'PROCESSED' AND id = ANY($1::UUID[])`, ids) == 2 &&
			countOf(t, db, `SELECT count(*) FROM outbox WHERE sent_at IS NOT NULL`) == 2
	})
	if n := countOf(t, db, `SELECT count(*) FROM customers`); n != 2 {
		t.Errorf("customers = %d, want 2", n)
	}
	for _, id := range ids {
		row, ok, err := outbox.Get(ctx, db.Pool, outbox.DerivedID(registration.EventCustomerRegistered, id))
		if err != nil || !ok {
			t.Fatalf("no customer-registered outbox row for %s: %v", id, err)
		}
		var ev registration.CustomerRegistered
		if err := json.Unmarshal(row.Body, &ev); err != nil || ev.CustomerID != id || ev.ID != row.ID ||
			row.Destination != registration.CustomerEventsDestination || row.Headers["event-type"] != registration.EventCustomerRegistered {
			t.Errorf("outbox row %+v (body %s): %v", row, row.Body, err)
		}
	}

	// A browser exploring from GET / finds the form, the listings, the stats and the document.
	var idx struct {
		Links map[string]struct{ Href string } `json:"_links"`
	}
	getJSON(t, base+"/", &idx)
	for _, rel := range []string{"registration-form", "registration-events", "stats", "openapi"} {
		if idx.Links[rel].Href == "" {
			t.Errorf("GET / has no %s link", rel)
			continue
		}
		r, err := http.Get(base + idx.Links[rel].Href)
		if err != nil || r.StatusCode != 200 {
			t.Errorf("following %s: %v %v", rel, err, r)
		}
		if r != nil {
			r.Body.Close()
		}
	}
	var stats struct {
		Outbox struct{ Unsent, Sent int64 } `json:"outbox"`
	}
	getJSON(t, base+"/journal/stats", &stats)
	if stats.Outbox.Sent != 2 || stats.Outbox.Unsent != 0 {
		t.Errorf("stats outbox = %+v, want 2 sent", stats.Outbox)
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	if r.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, r.StatusCode)
	}
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// The outbox feed's route on the webhook server: authenticated like the journal's,
// 2xx for a valid changefeed message (which wakes the relay), 4xx otherwise.
func TestOutboxWebhookRoute(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	hookAddr := testenv.FreeAddr(t)
	certDir := t.TempDir()
	startService(t, db, testenv.Queue(t), func(c *inboxd.Config) {
		c.WebhookAddr, c.WebhookToken, c.CertDir = hookAddr, "s3cret", certDir
		c.DisableWebhook = false
	})
	roots := x509.NewCertPool()
	testenv.Eventually(t, 30*time.Second, "the generated webhook CA", func() bool {
		ca, err := os.ReadFile(filepath.Join(certDir, certs.CAFile))
		return err == nil && roots.AppendCertsFromPEM(ca)
	})
	testenv.Eventually(t, 30*time.Second, "the webhook listening", func() bool {
		c, err := net.DialTimeout("tcp", hookAddr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	url := "https://" + hookAddr + webhook.Path + feed.OutboxSinkSuffix
	post := func(auth, body string) int {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		r, err := client.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", url, err)
		}
		r.Body.Close()
		return r.StatusCode
	}
	row := `{"payload":[{"after":{"id":"6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01"},"updated":"1629813621680097993.0000000000"}],"length":1}`
	for _, tt := range []struct {
		auth, body string
		want       int
	}{
		{"Bearer s3cret", row, 200},
		{"Bearer s3cret", `{"resolved":"1629813621680097993.0000000000"}`, 200},
		{"", row, 401},
		{"Bearer s3cret", `not json`, 400},
	} {
		if got := post(tt.auth, tt.body); got != tt.want {
			t.Errorf("POST %q with %q: %d, want %d", tt.body, tt.auth, got, tt.want)
		}
	}
}
