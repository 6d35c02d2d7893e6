package inboxd_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/certs"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/testenv/stomptest"
	"github.com/inboxd/inboxd/internal/webhook"
	"github.com/inboxd/inboxd/internal/webhook/sinktest"
)

// workload is what the end-to-end tests publish: registrations, each sent 1 to 3
// times, some invalid as business input, one email registered twice under two ids,
// and bodies that are not events at all.
type workload struct {
	messages  [][]byte
	valid     int // distinct registrations that must become customers
	rejected  int // distinct registrations the handler must reject
	malformed int
}

func newWorkload(n int) workload {
	var w workload
	r := rand.New(rand.NewPCG(7, 11))
	add := func(body []byte, copies int) {
		for range copies {
			w.messages = append(w.messages, body)
		}
	}
	reg := func(id, email string) []byte {
		b, _ := json.Marshal(map[string]string{
			"id": id, "name": "Customer " + id[:8], "email": email, "jurisdiction": "mga",
			"createdAt": "2026-11-22T10:00:00Z", "aggregateId": "mga:" + email,
		})
		return b
	}
	for i := range n {
		id := message.SeededID(r)
		switch {
		case i%25 == 0: // invalid business input
			add(reg(id, "not-an-email"), 1+r.IntN(3))
			w.rejected++
		case i%40 == 1: // not an event at all
			add([]byte(fmt.Sprintf("garbage %d", i)), 1)
			w.malformed++
		default:
			add(reg(id, fmt.Sprintf("user%d@example.com", i)), 1+r.IntN(3))
			w.valid++
		}
	}
	// The same email under a second id: the first one wins, the second is rejected.
	add(reg(message.SeededID(r), "user2@example.com"), 1)
	w.rejected++
	r.Shuffle(len(w.messages), func(i, j int) { w.messages[i], w.messages[j] = w.messages[j], w.messages[i] })
	return w
}

// startService runs a whole inboxd against the test database and queue, with the demo
// wired as the command line's -demo does. Its webhook is off unless edit turns it on.
func startService(t *testing.T, db *testenv.DB, queue string, edit func(*inboxd.Config)) {
	t.Helper()
	cfg := &inboxd.Config{
		StompAddr: testenv.Broker(t), Destinations: []string{queue},
		HTTPAddr: testenv.FreeAddr(t), BatchSize: 200, BatchLinger: 10 * time.Millisecond, Prefetch: 1000,
		AckMode: "client", Concurrency: 8, MaxAttempts: 3,
		// ShutdownTimeout is left at its default (30 s): these tests check exactly-once
		// under CI's load, where a stop's three stages can each use much of their share;
		// the bound itself is TestDependencyOutagesAndFreezes's and lifecycle's to test.
		SweepInterval: 50 * time.Millisecond, DisableWebhook: true,
		CertDir: t.TempDir(), CertHosts: []string{"127.0.0.1", "localhost"}, WebhookURL: "webhook-https://127.0.0.1/changefeed",
	}
	if edit != nil {
		edit(cfg)
	}
	if err := registration.Migrate(context.Background(), db.Pool); err != nil {
		t.Fatal(err)
	}
	registration.Configure(cfg)
	c := newClient(t, db, *cfg)
	withDemo := registration.Wire(c)
	testenv.Start(t, 2*time.Minute, func(ctx context.Context) error { return c.Run(withDemo(ctx)) }) // the end of the test stops it, and checks it returned nil
}

// newClient is a Client over db's pool, its logs kept for the test's failure.
func newClient(t *testing.T, db *testenv.DB, cfg inboxd.Config) *inboxd.Client {
	t.Helper()
	cfg.Logger = testenv.Logger(t)
	c, err := inboxd.New(db.Pool, cfg)
	if err != nil {
		t.Fatalf("starting inboxd: %v", err)
	}
	return c
}

func publishAll(t *testing.T, queue string, msgs [][]byte) {
	t.Helper()
	publishAllTo(t, stompx.Config{Addr: testenv.Broker(t)}, queue, msgs)
}

func publishAllTo(t *testing.T, broker stompx.Config, queue string, msgs [][]byte) {
	t.Helper()
	pub := stompx.NewPublisher(broker, 2)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, m := range msgs {
		if err := pub.Publish(ctx, queue, m, map[string]string{"event-type": registration.EventType}); err != nil {
			t.Fatalf("publishing: %v", err)
		}
	}
}

func countOf(t *testing.T, db *testenv.DB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// checkExactlyOnce waits until no event is pending and checks every outcome.
func checkExactlyOnce(t *testing.T, db *testenv.DB, w workload) {
	t.Helper()
	distinct := w.valid + w.rejected
	testenv.Eventually(t, 90*time.Second, "every event journaled and settled", func() bool {
		return countOf(t, db, `SELECT count(*) FROM journal`) == distinct &&
			countOf(t, db, `SELECT count(*) FROM journal_state WHERE status IN ('RECEIVED','FAILED')`) == 0
	})
	if got := countOf(t, db, `SELECT count(*) FROM customers`); got != w.valid {
		t.Errorf("customers = %d, want exactly one per valid registration: %d", got, w.valid)
	}
	if got := countOf(t, db, `SELECT count(*) FROM journal_state WHERE status = 'PROCESSED'`); got != w.valid {
		t.Errorf("PROCESSED = %d, want %d", got, w.valid)
	}
	if got := countOf(t, db, `SELECT count(*) FROM journal_state WHERE status = 'REJECTED'`); got != w.rejected {
		t.Errorf("REJECTED = %d, want %d", got, w.rejected)
	}
	if got := countOf(t, db, `SELECT count(*) FROM quarantine`); got != w.malformed {
		t.Errorf("quarantine = %d, want %d", got, w.malformed)
	}
	// Every customer belongs to a PROCESSED event: no effect without its status, and back.
	if got := countOf(t, db, `SELECT count(*) FROM customers c JOIN journal_state s ON s.id = c.id WHERE s.status = 'PROCESSED'`); got != w.valid {
		t.Errorf("customers with a PROCESSED event = %d, want %d", got, w.valid)
	}
	t.Logf("published %d messages: %d customers, %d rejected, %d quarantined", len(w.messages), w.valid, w.rejected, w.malformed)
}

// The PostgreSQL path: ActiveMQ → ingest → journal → sweeper → customers.
func TestEndToEndSweeperPath(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	queue := testenv.Queue(t)
	w := newWorkload(400)
	startService(t, db, queue, func(c *inboxd.Config) { c.DisableWebhook = true })
	publishAll(t, queue, w.messages)
	checkExactlyOnce(t, db, w)
}

// The demo's path through RabbitMQ's STOMP plugin: ingest, the registration handler,
// and its customer-registered events through the outbox relay (persistent SENDs with
// receipts) to RabbitMQ. The broker is set by configuration, as INBOXD_BROKER and
// INBOXD_STOMP_HOST would.
func TestEndToEndRabbitMQ(t *testing.T) {
	r := testenv.Rabbit(t)
	db := testenv.NewDB(t)
	queue := testenv.Queue(t)
	w := newWorkload(200)
	startService(t, db, queue, func(c *inboxd.Config) {
		c.StompAddr, c.Broker, c.StompHost, c.StompLogin, c.StompPasscode = r.Addr, "rabbitmq", r.Host, r.Login, r.Passcode
	})
	publishAllTo(t, stomptest.Config(r.Addr), queue, w.messages)
	checkExactlyOnce(t, db, w)
	testenv.Eventually(t, 30*time.Second, "every customer-registered event relayed", func() bool {
		return countOf(t, db, `SELECT count(*) FROM outbox WHERE sent_at IS NOT NULL`) == w.valid &&
			countOf(t, db, `SELECT count(*) FROM outbox WHERE sent_at IS NULL`) == 0
	})
}

// The CockroachDB path, with the test sink standing in for the changefeed: journal rows
// reach the HTTPS webhook in batches, several in flight, redelivered in storms.
func TestEndToEndWebhookPath(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	queue := testenv.Queue(t)
	w := newWorkload(400)
	hookAddr := testenv.FreeAddr(t)
	certDir := t.TempDir()
	startService(t, db, queue, func(c *inboxd.Config) {
		c.WebhookAddr, c.DisableWebhook = hookAddr, false
		c.WebhookToken = "s3cret"
		c.CertDir = certDir
		c.SweepGrace = time.Hour // the sweeper must leave RECEIVED rows to the feed
	})
	publishAll(t, queue, w.messages)
	testenv.Eventually(t, 60*time.Second, "ingest", func() bool {
		return countOf(t, db, `SELECT count(*) FROM journal`) == w.valid+w.rejected
	})

	ca, err := os.ReadFile(filepath.Join(certDir, certs.CAFile))
	if err != nil {
		t.Fatalf("reading the generated CA: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	sink := &sinktest.Sink{
		URLs:       []string{"https://" + hookAddr + webhook.Path},
		Client:     &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
		AuthHeader: "Bearer s3cret", InFlight: 4,
	}
	ctx := context.Background()
	clock := &sinktest.Clock{}
	rows, err := sinktest.FromJournal(ctx, db.Pool, nil, clock)
	if err != nil {
		t.Fatal(err)
	}
	// The first emission, then a storm: every row twice more, shuffled, three senders at once.
	if err := sink.Send(ctx, rows, 50); err != nil {
		t.Fatal(err)
	}
	storm := append(append([]json.RawMessage{}, rows...), rows...)
	rand.Shuffle(len(storm), func(i, j int) { storm[i], storm[j] = storm[j], storm[i] })
	errs := make(chan error, 3)
	for i := range 3 {
		go func() { errs <- sink.Send(ctx, storm[i*len(storm)/3:(i+1)*len(storm)/3], 37) }()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.Resolved(ctx, clock.Now()); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, db, w)

	// A replay after everything settled changes nothing.
	if err := sink.Send(ctx, rows, 100); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, db, w)
	st := sink.Stats()
	t.Logf("sink: %d posts, %d rows delivered (%d distinct events), answers %v", st.Posts, st.Rows, len(rows), st.ByStatus)
	wm, found, err := webhook.ReadWatermark(ctx, db.Pool, "webhook-https://127.0.0.1/changefeed")
	if err != nil || !found {
		t.Errorf("watermark not stored: found=%v err=%v", found, err)
	} else {
		t.Logf("watermark %v", wm)
	}
}

// The tutorial's producer publishes to a topic; with a virtual topic, POST /registration
// publishes to /topic/VirtualTopic.X and inboxd consumes /queue/Consumer.inboxd.VirtualTopic.X.
func TestRegistrationThroughVirtualTopic(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	name := "VirtualTopic.inboxd-test." + testenv.Suffix()
	api := testenv.FreeAddr(t)
	startService(t, db, "/queue/Consumer.inboxd."+name, func(c *inboxd.Config) {
		c.DisableWebhook = true
		c.HTTPAddr = api
		c.PublishDestination = "/topic/" + name
	})
	// Ready means subscribed: the consumer queue exists, so the topic copies to it.
	testenv.Eventually(t, 30*time.Second, "inboxd ready", func() bool {
		resp, err := http.Get("http://" + api + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	const n = 5
	for i := range n {
		body := fmt.Sprintf(`{"name":"VT %d","email":"vt%d-%s@example.com","jurisdiction":"mga","createdAt":"2026-11-22T10:00:00Z"}`,
			i, i, testenv.Suffix())
		resp, err := http.Post("http://"+api+"/registration", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST /registration: %d", resp.StatusCode)
		}
	}
	testenv.Eventually(t, 30*time.Second, "registrations processed", func() bool {
		return countOf(t, db, `SELECT count(*) FROM journal j JOIN journal_state s ON s.id = j.id WHERE s.status = 'PROCESSED' AND j.tag = $1`, "/queue/Consumer.inboxd."+name) == n
	})
}
