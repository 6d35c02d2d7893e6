// Package registration is the demo business handler: a registration event creates a
// customer. It owns the SQL of the customers table.
package registration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/process"
)

// EventType is the event type this package handles.
const EventType = "registration"

// Registration is the payload of a registration event.
type Registration struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	Email        string    `json:"email"`
	Jurisdiction string    `json:"jurisdiction"`
	CreatedAt    time.Time `json:"createdAt"`
}

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid registration")

// ErrEmailTaken is the rejection for an email already registered in the jurisdiction
// by another event.
var ErrEmailTaken = errors.New("email already registered in jurisdiction")

// Parse decodes and validates a payload, and normalizes it (see Check). The error
// wraps ErrInvalid.
func Parse(payload []byte) (Registration, error) {
	var r Registration
	if err := json.Unmarshal(payload, &r); err != nil {
		return Registration{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := r.Normalize(); err != nil {
		return Registration{}, err
	}
	return r, nil
}

// Normalize validates r and puts it in canonical form (see Check). The error wraps
// ErrInvalid and names every bad field, never its value.
func (r *Registration) Normalize() error { return r.Check().Err() }

func validJurisdiction(s string) bool {
	if len(s) < 2 || len(s) > 10 {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// EventCustomerRegistered is the type of the event Handle emits for a new customer.
const EventCustomerRegistered = "customer-registered"

// CustomerEventsDestination is where Handle emits customer-registered events.
const CustomerEventsDestination = "/queue/customer-events"

// CustomerRegistered is the payload of a customer-registered event. ID is the outbox id,
// so an inbox downstream (inboxd included) journals it once.
type CustomerRegistered struct {
	ID           string    `json:"id"`
	Type         string    `json:"type"`
	CustomerID   string    `json:"customerId"`
	Jurisdiction string    `json:"jurisdiction"`
	Email        string    `json:"email"`
	Name         string    `json:"name"`
	RegisteredAt time.Time `json:"registeredAt"`
	AggregateID  string    `json:"aggregateId"`
}

// Handler creates the customer of a registration event. Invalid input and an email
// already taken in the jurisdiction are business rejections. It is a
// process.BatchHandler: a batch's registrations are inserted with one statement.
var Handler process.Handler = batchHandler{}

type batchHandler struct{}

func (batchHandler) Handle(ctx context.Context, tx pgx.Tx, ev process.Event) error {
	return Handle(ctx, tx, ev)
}

// errNotClean makes the engine fall back to one Handle call per event, which tells the
// rejected ones apart.
var errNotClean = errors.New("a registration of the batch is invalid")

// HandleBatch inserts every registration with one statement, and emits each one's
// customer-registered event. Any invalid one, or any
// conflict (an email taken, within the batch or before), fails the whole call, and the
// engine then runs each event through Handle.
func (batchHandler) HandleBatch(ctx context.Context, tx pgx.Tx, evs []process.Event) ([]error, error) {
	ids := make([]string, len(evs))
	jurisdictions := make([]string, len(evs))
	emails := make([]string, len(evs))
	names := make([]string, len(evs))
	created := make([]time.Time, len(evs))
	for i, ev := range evs {
		r, err := Parse(ev.Payload)
		if err != nil {
			return nil, errNotClean
		}
		ids[i], jurisdictions[i], emails[i], names[i], created[i] = ev.ID, r.Jurisdiction, r.Email, r.Name, r.CreatedAt
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO customers (id, jurisdiction, email, name, registered_at)
		SELECT * FROM unnest($1::UUID[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TIMESTAMPTZ[])
		ON CONFLICT (id) DO NOTHING`, ids, jurisdictions, emails, names, created)
	if err != nil {
		return nil, fmt.Errorf("inserting %d customers: %w", len(evs), err)
	}
	// Each customer's customer-registered event, as Handle emits it, with one statement
	// for the batch; one emitted before (a replay) is a duplicate, not an error.
	msgs := make([]outbox.Outgoing, len(evs))
	for i := range evs {
		r := Registration{ID: ids[i], Name: names[i], Email: emails[i], Jurisdiction: jurisdictions[i], CreatedAt: created[i]}
		if msgs[i], err = registered(r); err != nil {
			return nil, err
		}
	}
	if _, err := outbox.EmitBatch(ctx, tx, msgs); err != nil {
		return nil, fmt.Errorf("emitting %d %s events: %w", len(msgs), EventCustomerRegistered, err)
	}
	return make([]error, len(evs)), nil
}

// Handle is Handler as a function.
func Handle(ctx context.Context, tx pgx.Tx, ev process.Event) error {
	r, err := Parse(ev.Payload)
	if err != nil {
		return process.Reject(err)
	}
	// The customer is keyed by the event, not by the payload's own id field (they are
	// equal in the journal, but the event id is what makes a replay a no-op).
	r.ID = ev.ID
	if err := Insert(ctx, tx, r); err != nil {
		return err
	}
	return emitRegistered(ctx, tx, r)
}

// emitRegistered writes the customer-registered event to the outbox, in the same
// transaction as the customer: it is published if and only if the customer exists.
// Its id derives from the registration, so a replay emits nothing new.
func emitRegistered(ctx context.Context, tx pgx.Tx, r Registration) error {
	o, err := registered(r)
	if err != nil {
		return err
	}
	_, err = outbox.Emit(ctx, tx, o)
	if errors.Is(err, outbox.ErrDuplicateID) {
		return nil // emitted by an earlier run of this event
	}
	return err
}

// registered is r's customer-registered message, grouped by the customer's aggregate.
func registered(r Registration) (outbox.Outgoing, error) {
	id := outbox.DerivedID(EventCustomerRegistered, r.ID)
	agg := aggregateID(r.Jurisdiction, r.Email)
	body, err := json.Marshal(CustomerRegistered{
		ID: id, Type: EventCustomerRegistered, CustomerID: r.ID, Jurisdiction: r.Jurisdiction,
		Email: r.Email, Name: r.Name, RegisteredAt: r.CreatedAt.UTC(), AggregateID: agg,
	})
	if err != nil {
		return outbox.Outgoing{}, fmt.Errorf("encoding %s: %w", EventCustomerRegistered, err)
	}
	return outbox.Outgoing{
		ID: id, Destination: CustomerEventsDestination, Body: body,
		Headers: map[string]string{"content-type": "application/json", "event-type": EventCustomerRegistered, "aggregate-id": agg, "JMSXGroupID": agg},
	}, nil
}

// Insert creates the customer. A replay of the same event is a no-op; the same email
// in the same jurisdiction from another event is a rejection wrapping ErrEmailTaken.
func Insert(ctx context.Context, tx pgx.Tx, r Registration) error {
	// ON CONFLICT names only the primary key: the (jurisdiction, email) constraint
	// must still fire for another event, and a statement that hits both for the same
	// event is a replay, which the arbiter (id) turns into nothing.
	_, err := tx.Exec(ctx, `
		INSERT INTO customers (id, jurisdiction, email, name, registered_at)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (id) DO NOTHING`, r.ID, r.Jurisdiction, r.Email, r.Name, r.CreatedAt)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		// No address in the message: it goes to last_error and to logs.
		return process.Reject(fmt.Errorf("%w %s", ErrEmailTaken, r.Jurisdiction))
	}
	if err != nil {
		return fmt.Errorf("inserting customer %s: %w", r.ID, err)
	}
	return nil
}

// Customer is a row of customers.
type Customer struct {
	ID           string    `json:"id"`
	Jurisdiction string    `json:"jurisdiction"`
	Email        string    `json:"email"`
	Name         string    `json:"name"`
	RegisteredAt time.Time `json:"registeredAt"`
	CreatedAt    time.Time `json:"createdAt"`
}

// Get returns a customer by id (the registration event id).
func Get(ctx context.Context, db database.DB, id string) (Customer, bool, error) {
	var c Customer
	err := db.QueryRow(ctx, `
		SELECT id::TEXT, jurisdiction, email, name, registered_at, created_at FROM customers WHERE id = $1`, id).
		Scan(&c.ID, &c.Jurisdiction, &c.Email, &c.Name, &c.RegisteredAt, &c.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Customer{}, false, nil
	}
	if err != nil {
		return Customer{}, false, fmt.Errorf("reading customer %s: %w", id, err)
	}
	return c, true, nil
}

// Count returns the number of customers.
func Count(ctx context.Context, db database.DB) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM customers`).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting customers: %w", err)
	}
	return n, nil
}

// Migrate creates the customers table, the demo's own; inboxd's schema knows nothing
// of it. The statement is idempotent (IF NOT EXISTS), so it runs at every start of the
// demo, and from two instances at once, without a migrations record; PostgreSQL and
// CockroachDB accept it alike.
func Migrate(ctx context.Context, db database.DB) error {
	_, err := db.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS customers (
		    -- The registration event id: the business effect is keyed by the event that caused it.
		    id            UUID        PRIMARY KEY,
		    jurisdiction  TEXT        NOT NULL,
		    email         TEXT        NOT NULL,
		    name          TEXT        NOT NULL,
		    registered_at TIMESTAMPTZ NOT NULL,
		    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
		    CONSTRAINT customers_jurisdiction_email UNIQUE (jurisdiction, email)
		)`)
	if err != nil {
		return fmt.Errorf("creating the customers table: %w", err)
	}
	return nil
}
