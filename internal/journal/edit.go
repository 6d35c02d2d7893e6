package journal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
)

// Edit and retry (issue 22, item 5): an operator corrects the payload of a DEAD entry
// and retries it. The entry keeps its id, type and aggregate; the payload as it was is
// kept in the entry's attempt history (journal_attempt, outcome EDITED, migration 0015)
// with who edited it, from where and when.

// OutcomeEdited is the outcome of an attempt-history row that records an operator's
// edit (Attempt.Original holds the payload as it was).
const OutcomeEdited = "EDITED"

// Edit is one operator edit of an entry's payload.
type Edit struct {
	EditedAt   time.Time
	EditedBy   string
	EditedFrom string // the client address of the request
	// Original is the payload as it was before this edit.
	Original json.RawMessage
}

// ErrNotEditable is returned by EditAndRetry for an entry that is not DEAD.
var ErrNotEditable = errors.New("entry is not DEAD")

// Refusal reasons of an edited payload (EditRefusal.Reason).
const (
	EditTooLarge        = "too_large"
	EditNotJSON         = "not_json"
	EditNotObject       = "not_object"
	EditIdentityChanged = "identity_changed"
	EditUnchanged       = "unchanged"
)

// EditRefusal is the error for an edited payload that cannot replace the entry's.
type EditRefusal struct {
	Reason string
	Field  string // for EditIdentityChanged: the payload field that changed
	Detail string
}

func (e *EditRefusal) Error() string { return "edited payload refused: " + e.Reason + ": " + e.Detail }

// identityFields are the payload fields an edit must leave as they are: they decide the
// entry's id (its primary key, derived from "id"; CloudEvents' source+id), its event
// type, hence its handler, and its aggregate, hence its order. An edit corrects the
// data an event carries, never which event it is.
var identityFields = []string{"id", "type", "aggregateId"}

// cloudEventFields are fixed as well when the original is a CloudEvent (it has a
// "specversion"): its dedup key is source + id.
var cloudEventFields = []string{"specversion", "source"}

// CheckEdit says whether payload may replace old's payload: at most maxBytes of valid
// UTF-8 JSON, an object that JSONB can store (no NUL), different from the original, and
// with the same identity fields (identityFields, and idField, the payload field ingest
// reads the event id from when it is not "id"), present or absent alike and equal in
// value. It returns nil or an *EditRefusal.
func CheckEdit(old json.RawMessage, payload []byte, maxBytes int, idField string) error {
	if len(payload) > maxBytes {
		return &EditRefusal{Reason: EditTooLarge, Detail: fmt.Sprintf("payload is %d bytes, the limit is %d (the ingest limit)", len(payload), maxBytes)}
	}
	// JSONB refuses invalid UTF-8 and \u0000, which encoding/json accepts.
	if !utf8.Valid(payload) {
		return &EditRefusal{Reason: EditNotJSON, Detail: "payload is not valid UTF-8"}
	}
	newDoc, err := decodeDoc(payload)
	if err != nil {
		return err
	}
	oldDoc, err := decodeDoc(old)
	if err != nil {
		return fmt.Errorf("decoding the stored payload: %w", err)
	}
	fields := append([]string(nil), identityFields...)
	if _, ok := oldDoc["specversion"]; ok {
		fields = append(fields, cloudEventFields...)
	}
	if idField != "" && !slices.Contains(fields, idField) {
		fields = append(fields, idField)
	}
	for _, f := range fields {
		ov, oldHas := oldDoc[f]
		nv, newHas := newDoc[f]
		switch {
		case oldHas && !newHas:
			return &EditRefusal{Reason: EditIdentityChanged, Field: f, Detail: fmt.Sprintf("%q must stay as it is; the edit removes it", f)}
		case !oldHas && newHas:
			return &EditRefusal{Reason: EditIdentityChanged, Field: f, Detail: fmt.Sprintf("%q must stay absent; the edit adds it", f)}
		case oldHas && !reflect.DeepEqual(ov, nv):
			return &EditRefusal{Reason: EditIdentityChanged, Field: f, Detail: fmt.Sprintf("%q must stay as it is", f)}
		}
	}
	if reflect.DeepEqual(oldDoc, newDoc) {
		return &EditRefusal{Reason: EditUnchanged, Detail: "the payload is unchanged: retry the entry instead"}
	}
	return nil
}

// decodeDoc decodes a JSON object, numbers kept as written, and refuses NUL in any key
// or string, which JSONB cannot store.
func decodeDoc(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &EditRefusal{Reason: EditNotJSON, Detail: "payload is not JSON: " + err.Error()}
	}
	if _, err := dec.Token(); err == nil {
		return nil, &EditRefusal{Reason: EditNotJSON, Detail: "payload has data after its JSON value"}
	}
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, &EditRefusal{Reason: EditNotObject, Detail: "payload must be a JSON object"}
	}
	if hasNUL(doc) {
		return nil, &EditRefusal{Reason: EditNotJSON, Detail: `payload contains \u0000, which JSONB cannot store`}
	}
	return doc, nil
}

func hasNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, 0)
	case []any:
		for _, x := range v {
			if hasNUL(x) {
				return true
			}
		}
	case map[string]any:
		for k, x := range v {
			if strings.ContainsRune(k, 0) || hasNUL(x) {
				return true
			}
		}
	}
	return false
}

// EditRequest is an operator's edit of a DEAD entry.
type EditRequest struct {
	Payload []byte // the corrected payload
	By      string // the operator
	From    string // the client address of the request
	// MaxBytes bounds Payload: the ingest's body limit.
	MaxBytes int
	// IDField is the payload field ingest reads event ids from (message.IDSource), kept
	// by the edit like "id"; "" when ids come from "id" or a header.
	IDField string
}

// EditAndRetry replaces the payload of the DEAD entry id with req.Payload, keeps the
// original in journal_edit with who, from where and when, and retries the entry the way
// RetryOne does (retryInTx), all in one transaction. The payload must pass CheckEdit.
// The entry's id is never touched: ingest computed it (migration 0013), and the edit
// keeps the fields it came from. It returns the entry as it is afterwards and the edit;
// ErrNotFound; the entry and ErrNotEditable when it is not DEAD; or an *EditRefusal.
//
// The entry's row is locked first (SELECT … FOR UPDATE, which CockroachDB supports:
// https://www.cockroachlabs.com/docs/stable/select-for-update), so the payload checked is
// the payload replaced, and a concurrent retry or second edit waits, then finds the
// entry no longer DEAD.
func EditAndRetry(ctx context.Context, db database.DB, id string, req EditRequest) (Record, Edit, error) {
	var r Record
	var ed Edit
	err := inTx(ctx, db, func(tx pgx.Tx) error {
		// Both rows are locked: the payload is the journal's, the status journal_state's.
		old, err := scanRecord(tx.QueryRow(ctx, `SELECT `+recordColumns+` FROM `+recordFrom+` WHERE j.id = $1::UUID FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("reading journal entry %s: %w", id, err)
		}
		if old.Status != StatusDead {
			r = old
			return ErrNotEditable
		}
		if err := CheckEdit(old.Payload, req.Payload, req.MaxBytes, req.IDField); err != nil {
			return err
		}
		// The payload stays on the journal row, the one column of it an operator changes;
		// retryInTx below writes the state (updated_at too).
		tag, err := tx.Exec(ctx, `UPDATE journal SET payload = $2::JSONB
			WHERE id = $1::UUID AND EXISTS (SELECT 1 FROM journal_state AS s WHERE s.id = $1::UUID AND s.status = 'DEAD')`,
			id, string(req.Payload))
		if err != nil {
			return fmt.Errorf("replacing the payload of %s: %w", id, err)
		}
		if tag.RowsAffected() != 1 { // cannot happen under the row lock; never record an edit that did not happen
			r = old
			return ErrNotEditable
		}
		ed = Edit{EditedBy: req.By, EditedFrom: req.From, Original: old.Payload}
		// A row of the history, after the attempts that ended DEAD and before the retry's:
		// attempt is the count so far, no handler ran (0 runs, 0 ms).
		if err := tx.QueryRow(ctx, `INSERT INTO journal_attempt
			(journal_id, attempt, started_at, duration_ms, runs, outcome, original_payload, edited_by, edited_from)
			VALUES ($1::UUID, $2::INT8, now(), 0, 0, 'EDITED', $3::JSONB, $4::TEXT, $5::TEXT) RETURNING recorded_at`,
			id, old.Attempts, string(old.Payload), req.By, req.From).Scan(&ed.EditedAt); err != nil {
			return fmt.Errorf("keeping the original payload of %s: %w", id, err)
		}
		r, err = retryInTx(ctx, tx, id)
		if err != nil {
			return fmt.Errorf("retrying %s: %w", id, err)
		}
		return nil
	})
	switch {
	case errors.Is(err, ErrNotEditable):
		return r, Edit{}, err
	case err != nil:
		var refusal *EditRefusal
		if errors.As(err, &refusal) || errors.Is(err, ErrNotFound) {
			return Record{}, Edit{}, err
		}
		return Record{}, Edit{}, fmt.Errorf("editing journal entry %s: %w", id, err)
	}
	return r, ed, nil
}
