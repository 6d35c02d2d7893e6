package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/message"
	demo "github.com/inboxd/inboxd/internal/registration"
)

// HeaderContentType is passed to the Publisher, which sets the frame's content type from it.
const HeaderContentType = "content-type"

// EventTypeRegistration is the event type POST /registration publishes.
const EventTypeRegistration = "registration"

// registration is the demo event. The field names are those of the registration
// handler's Registration struct; AggregateID is added by the API so that one customer's
// events are processed in order.
type registration struct {
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
func (r *registration) validate(newID func() string) map[string]string {
	problems := map[string]string{}
	if r.ID == "" {
		r.ID = newID()
	} else if id, ok := message.CanonicalUUID(r.ID); ok {
		r.ID = id
	} else {
		problems["id"] = "must be a UUID, or absent for the server to assign one"
	}

	reg := demo.Registration{Name: r.Name, Email: r.Email, Jurisdiction: r.Jurisdiction}
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
		if _, err := demo.Parse(payload); err != nil {
			problems["registration"] = err.Error()
		}
	}
	return problems
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// registrationForm returns a valid sample registration with fresh values, to POST back as is.
func (s *Server) registrationForm(c echo.Context) error {
	suffix := randomHex(4)
	return c.JSON(http.StatusOK, registration{
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
func (s *Server) postRegistration(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err // BodyLimit's 413, or the client went away
	}
	var r registration
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return badRequest("invalid JSON body", jsonProblem(err))
	}
	if dec.More() {
		return badRequest("invalid JSON body", "trailing data after the JSON object")
	}
	if problems := r.validate(message.NewID); len(problems) > 0 {
		return badRequest("invalid registration", problems)
	}
	payload, err := json.Marshal(r)
	if err != nil {
		return internal("encoding registration", err)
	}
	headers := map[string]string{
		HeaderContentType:         echo.MIMEApplicationJSON,
		message.HeaderEventType:   EventTypeRegistration,
		message.HeaderAggregateID: r.AggregateID,
		// ActiveMQ message groups: with competing consumers on the queue, one customer's
		// events still go to one consumer, in order.
		"JMSXGroupID": r.AggregateID,
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), s.cfg.PublishTimeout)
	defer cancel()
	if err := s.cfg.Publisher.Publish(ctx, s.cfg.Destination, payload, headers); err != nil {
		s.log.Warn("publishing registration failed", "err", err, "id", r.ID, "destination", s.cfg.Destination, "request_id", requestID(c))
		return unavailable("broker unavailable", map[string]string{
			"id":   r.ID,
			"hint": "the broker did not confirm the message; retry with this id, duplicates are dropped",
		}, nil)
	}
	c.Response().Header().Set(echo.HeaderLocation, "/journal/"+r.ID)
	return c.JSON(http.StatusAccepted, acceptedResponse{ID: r.ID, Status: "accepted"})
}
