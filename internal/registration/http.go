package registration

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/api"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/process"
)

//go:embed openapi.json
var openAPI []byte

// Routes is the demo's part of the REST API: GET /registration/form, a valid sample,
// and POST /registration (and /registration/, as the reference tutorial writes it),
// which publishes the registration to the API's destination once it passes the
// handler's own rules. The core API knows none of it; the command line adds it with
// -demo.
func Routes() api.Extension {
	return api.Extension{
		Name: "registration",
		Links: api.Links{
			"registration-form":   {Href: "/registration/form", Title: "a sample registration; POST it back to /registration"},
			"registration":        {Href: "/registration", Title: "POST a registration (JSON)"},
			"registration-events": {Href: api.EventsPath(EventType)},
		},
		OpenAPI: openAPI,
		Mount: func(m api.Mount) {
			r := routes{m}
			m.GET("/registration/form", r.form)
			m.GET("/registration", r.index)
			m.POST("/registration", r.post)
			// The reference tutorial posts to /registration/, with the slash.
			m.POST("/registration/", r.post)
		},
	}
}

type routes struct{ api.Mount }

// index is GET /registration: how to register, rather than a bare 405.
func (routes) index(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]any{
		"description": "POST a registration as JSON here; GET the form for a valid sample",
		"_links": api.Links{
			"self":   {Href: "/registration"},
			"form":   {Href: "/registration/form"},
			"events": {Href: api.EventsPath(EventType)},
		},
	})
}

// request is the body of POST /registration. The field names are those of the registration
// handler's Registration struct; AggregateID is added by the API so that one customer's
// events are processed in order.
type request struct {
	ID           string `json:"id,omitempty"`
	Name         string `json:"name"`
	Email        string `json:"email"`
	Jurisdiction string `json:"jurisdiction"`
	CreatedAt    string `json:"createdAt"`
	AggregateID  string `json:"aggregateId,omitempty"`
}

// aggregateID keys a customer: one jurisdiction, one email address (both normalised).
func aggregateID(jurisdiction, email string) string {
	return jurisdiction + ":" + email
}

// validate normalises r in place (canonicalises or assigns the id, applies the
// registration handler's own rules, computes the aggregate id) and returns one message
// per bad field. The rules are registration.Check itself, and the payload is then run
// through registration.Parse, what the handler calls: the API accepts exactly what the
// handler will.
func (r *request) validate(newID func() string) map[string]string {
	problems := map[string]string{}
	if r.ID == "" {
		r.ID = newID()
	} else if id, ok := message.CanonicalUUID(r.ID); ok {
		r.ID = id
	} else {
		problems["id"] = "must be a UUID, or absent for the server to assign one"
	}

	reg := Registration{Name: r.Name, Email: r.Email, Jurisdiction: r.Jurisdiction}
	r.CreatedAt = strings.TrimSpace(r.CreatedAt)
	badTime := false
	if r.CreatedAt != "" {
		t, err := time.Parse(time.RFC3339Nano, r.CreatedAt)
		if err != nil {
			problems["createdAt"] = "must be an RFC 3339 timestamp, e.g. 2025-01-31T12:00:00Z"
			badTime = true
		}
		reg.CreatedAt = t
	}
	for field, msg := range reg.Check() {
		if field == "createdAt" && badTime {
			continue
		}
		problems[field] = msg
	}
	r.Name, r.Email, r.Jurisdiction = reg.Name, reg.Email, reg.Jurisdiction
	if !badTime && !reg.CreatedAt.IsZero() {
		r.CreatedAt = reg.CreatedAt.Format(time.RFC3339Nano) // the form the handler reads back
	}

	if problems["email"] == "" && problems["jurisdiction"] == "" {
		agg := aggregateID(r.Jurisdiction, r.Email)
		if r.AggregateID != "" && r.AggregateID != agg {
			problems["aggregateId"] = fmt.Sprintf("is computed by the server (%s); omit it", agg)
		}
		r.AggregateID = agg
	}
	if len(problems) == 0 {
		// Belt and braces: the exact function the handler runs.
		payload, _ := json.Marshal(r)
		if _, err := Parse(payload); err != nil {
			problems["registration"] = err.Error()
		}
	}
	return problems
}

// form returns a valid sample registration with fresh values, to POST back as is.
func (routes) form(c echo.Context) error {
	suffix := message.NewID()[:8] // 32 random bits: a UUID v4 starts with them
	return c.JSON(http.StatusOK, request{
		Name:         "Test Customer " + suffix,
		Email:        "customer-" + suffix + "@example.com",
		Jurisdiction: "mga",
		CreatedAt:    time.Now().UTC().Truncate(time.Second).Format(time.RFC3339),
	})
}

// acceptedResponse is the body of 202 Accepted.
type acceptedResponse struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// postRegistration validates a registration and publishes it as a persistent message,
// answering 202 only once the broker has confirmed it.
func (m routes) post(c echo.Context) error {
	body, err := api.ReadBody(c)
	if err != nil {
		return err // BodyLimit's 413, or the client went away
	}
	var r request
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return api.BadRequest("invalid JSON body", api.JSONProblem(err))
	}
	if dec.More() {
		return api.BadRequest("invalid JSON body", "trailing data after the JSON object")
	}
	if problems := r.validate(message.NewID); len(problems) > 0 {
		return api.BadRequest("invalid registration", problems)
	}
	payload, err := json.Marshal(r)
	if err != nil {
		return api.Internal("encoding registration", err)
	}
	headers := map[string]string{
		api.HeaderContentType:     echo.MIMEApplicationJSON,
		message.HeaderEventType:   EventType,
		message.HeaderAggregateID: r.AggregateID,
		// ActiveMQ message groups: with competing consumers on the queue, one customer's
		// events still go to one consumer, in order.
		"JMSXGroupID": r.AggregateID,
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), m.PublishTimeout)
	defer cancel()
	if err := m.Publisher.Publish(ctx, m.Destination, payload, headers); err != nil {
		m.Log.Warn("publishing registration failed", "err", err, "id", r.ID, "destination", m.Destination, "request_id", api.RequestID(c))
		return api.Unavailable("broker unavailable", map[string]string{
			"id":   r.ID,
			"hint": "the broker did not confirm the message; retry with this id, duplicates are dropped",
		}, nil)
	}
	c.Response().Header().Set(echo.HeaderLocation, "/journal/"+r.ID)
	return c.JSON(http.StatusAccepted, acceptedResponse{ID: r.ID, Status: "accepted"})
}

// Configure makes EventType the type of messages that name none, unless cfg names one,
// as the command line's -demo does. Call it before inboxd.New.
func Configure(cfg *inboxd.Config) {
	if cfg.DefaultEventType == "" {
		cfg.DefaultEventType = EventType
	}
}

// Wire adds the demo to a Client about to run, as the command line's -demo does: its
// handler, unless c has one for EventType, and its API routes, which the returned
// function puts on the context given to c.Run. The caller runs Migrate too.
func Wire(c *inboxd.Client) func(context.Context) context.Context {
	if !c.Handles(EventType) {
		c.Handle(EventType, publicHandler{})
	}
	return func(ctx context.Context) context.Context { return api.WithExtensions(ctx, Routes()) }
}

// publicHandler is Handler as the Client takes it (inboxd.BatchHandler). Handler itself
// stays the engine's (process.Handler), which the benchmark and the engine's tests
// register directly.
type publicHandler struct{}

func (publicHandler) Handle(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
	return Handle(ctx, tx, engineEvent(ev))
}

func (publicHandler) HandleBatch(ctx context.Context, tx pgx.Tx, evs []inboxd.Event) ([]error, error) {
	in := make([]process.Event, len(evs))
	for i, ev := range evs {
		in[i] = engineEvent(ev)
	}
	return batchHandler{}.HandleBatch(ctx, tx, in)
}

func engineEvent(ev inboxd.Event) process.Event {
	return process.Event{ID: ev.ID, Type: ev.Type, AggregateID: ev.AggregateID, SequenceNo: ev.SequenceNo,
		Tag: ev.Tag, Payload: ev.Payload, Attempt: ev.Attempt}
}
