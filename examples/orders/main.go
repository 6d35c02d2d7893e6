// Command orders is a program that embeds inboxd: it consumes "order.placed" events
// from ActiveMQ, records each order exactly once in its own table, and emits an
// "order.accepted" event through the transactional outbox.
//
//	INBOXD_DATABASE_URL=postgres://postgres@127.0.0.1:5432/orders?sslmode=disable \
//	INBOXD_STOMP_ADDR=127.0.0.1:61613 go run ./examples/orders
//
// The database must exist (createdb -h 127.0.0.1 -U postgres orders); the program
// creates inboxd's tables and its own in it. Publish an order (a JSON object with an "id"
// such as "ord-0001"; it is an order.placed event, the DefaultEventType below) to
// /queue/orders, e.g. with the broker's web console, and find it in the orders table.
// Ctrl-C stops it gracefully. The README's quick start is a smaller program that creates
// its database and publishes its own order.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, os.Getenv, logger); err != nil {
		logger.Error("orders stopped", "err", err)
		os.Exit(1)
	}
}

// run is main without the process: the test runs it against its own database and queues.
func run(ctx context.Context, getenv func(string) string, logger *slog.Logger) error {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	cfg := inboxd.Config{
		StompAddr:    env("INBOXD_STOMP_ADDR", "127.0.0.1:61613"),
		Destinations: []string{env("ORDERS_QUEUE", "/queue/orders")},
		// A message with no event-type header and no "type" field is an order.
		DefaultEventType: "order.placed",
		Logger:           logger,
		// inboxd's metrics join the program's own (here the default registry).
		MetricsRegisterer: prometheus.DefaultRegisterer,
		// inboxd's REST API and console; the webhook is for CockroachDB changefeeds only.
		HTTPAddr:       env("ORDERS_HTTP_ADDR", "127.0.0.1:8091"),
		DisableWebhook: true,
		// Every other setting keeps its default (inboxd.Config.WithDefaults).
	}
	pcfg, err := pgxpool.ParseConfig(env("INBOXD_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/orders?sslmode=disable"))
	if err != nil {
		return fmt.Errorf("parsing the database URL: %w", err)
	}
	// inboxd's parts hold up to cfg.MinPoolSize() connections at once; pgxpool's default
	// is max(4, CPUs), which works, slower.
	pcfg.MaxConns = max(pcfg.MaxConns, cfg.MinPoolSize())
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connecting to the database: %w", err)
	}
	defer pool.Close()
	if err := migrate(ctx, pool); err != nil {
		return err
	}

	c, err := inboxd.New(pool, cfg)
	if err != nil {
		return err
	}
	c.Handle("order.placed", placeOrder(env("ORDERS_EVENTS_QUEUE", "/queue/order-events")))
	return c.Run(ctx) // nil after a graceful shutdown on Ctrl-C
}

// migrate creates inboxd's tables and the program's own, whose rows commit with the
// event's PROCESSED status.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if err := inboxd.Migrate(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (
		order_id TEXT PRIMARY KEY,
		customer TEXT NOT NULL,
		total    INT8 NOT NULL)`); err != nil {
		return fmt.Errorf("creating the orders table: %w", err)
	}
	return nil
}

type order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Total    int64  `json:"total"`
}

// placeOrder records an order and emits order.accepted, both in the processing
// transaction: either both happen, with the PROCESSED status, or neither. The order is
// keyed by ev.Key, its own id ("ord-0001"); ev.ID is its journal id.
func placeOrder(events string) inboxd.Handler {
	return inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		var o order
		if err := json.Unmarshal(ev.Payload, &o); err != nil {
			return inboxd.Reject(fmt.Errorf("order %s: %w", ev.Key, err))
		}
		if o.Customer == "" || o.Total <= 0 {
			// Retrying cannot fix it: REJECTED, not retried.
			return inboxd.Reject(errors.New("an order needs a customer and a positive total"))
		}
		if _, err := tx.Exec(ctx, `INSERT INTO orders (order_id, customer, total) VALUES ($1, $2, $3) ON CONFLICT (order_id) DO NOTHING`,
			ev.Key, o.Customer, o.Total); err != nil {
			return fmt.Errorf("recording order %s: %w", ev.Key, err)
		}
		body, err := json.Marshal(map[string]any{"orderId": ev.Key, "customer": o.Customer, "total": o.Total})
		if err != nil {
			return err
		}
		_, err = inboxd.Emit(ctx, tx, inboxd.Outgoing{Destination: events, Body: body,
			Headers: map[string]string{"content-type": "application/json", "event-type": "order.accepted"}})
		return err
	})
}
