package journal

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/sqlbound"
)

// Every statement Ingest sends stays under Batch.MaxStatementBytes (see package
// sqlbound: CockroachDB refuses a client message over 16 MiB, and a batch's bodies are
// all parameters of one statement). A batch is split into consecutive runs that fit, in
// arrival order, each its own statement and sequence block, so sequence numbers keep
// arrival order. A quarantine row is bounded field by field, so that one row always fits
// in a statement of its own: headers, detail and short texts are capped, and a body
// larger than MaxQuarantineBody keeps its first bytes and a SHA-256 of all of them.
const (
	maxQuarantineHeaders = 64 << 10 // marshalled JSON
	maxQuarantineDetail  = 4 << 10
	maxQuarantineText    = 1 << 10 // destination, message id
	maxHeaderValue       = 1 << 10 // each value, once headers are over their cap
	// lastResortBody is what a row keeps of its body when the database refused it as too
	// large although it was under the bound (the server's limit was set lower than
	// Batch.MaxStatementBytes); it fits CockroachDB's smallest setting, 16 KiB, with the
	// statement text.
	lastResortBody = 4 << 10
	// truncatedPrefix starts the detail of a row whose body was cut; Reinject refuses
	// those. A prefix, so that no text from the message can forge or hide it.
	truncatedPrefix = "body truncated to fit one statement"
)

// ErrBodyTruncated is returned by Reinject for a row whose body was truncated to fit one
// statement: publishing it would send a different message than the one received.
var ErrBodyTruncated = errors.New("the quarantined body was truncated to fit one statement; it cannot be reinjected")

// ingestBase is what an ingest statement costs before its rows.
var ingestBase = sqlbound.Size(ingestSQL)

// quarantineFixed bounds what a quarantine row's fields other than its body cost.
const quarantineFixed = 8*sqlbound.PerValue + 3*36 + 64 + maxQuarantineDetail + 256 + 2*maxQuarantineText + maxQuarantineHeaders

// MaxQuarantineBody is the most of a body one quarantine row keeps when statements are
// bounded by maxStatement bytes. It also bounds the message bodies ingest may accept
// (INBOXD_MAX_BODY_BYTES): an event the database refuses is quarantined with its payload
// as body, and must fit whole.
func MaxQuarantineBody(maxStatement int) int { return maxStatement - ingestBase - quarantineFixed }

// CheckBodyBound says why maxBody does not fit statements of maxStatement bytes, or
// returns nil.
func CheckBodyBound(maxBody, maxStatement int) error {
	if maxStatement < sqlbound.MinMaxStatementBytes {
		return fmt.Errorf("max statement bytes (%d) must be at least %d", maxStatement, sqlbound.MinMaxStatementBytes)
	}
	if m := MaxQuarantineBody(maxStatement); maxBody > m {
		return fmt.Errorf("max body bytes (%d) must fit one statement of max statement bytes (%d): at most %d", maxBody, maxStatement, m)
	}
	return nil
}

// entryBytes estimates what one entry adds to an ingest statement.
func entryBytes(e Entry) int {
	return sqlbound.Value(len(e.Event.Payload)) + sqlbound.Value(len(e.Event.EventType)) +
		sqlbound.Value(len(e.Event.AggregateID)) + sqlbound.Value(len(e.Destination)) + 2*sqlbound.Value(36) + // id, and the conflict id racedSQL may carry
		sqlbound.Value(len(e.TraceContext))
}

// badBytes estimates what one bounded quarantine row adds to an ingest statement.
func badBytes(b Bad) int {
	return 2*sqlbound.Value(36) + sqlbound.Value(len(b.Reason)) + sqlbound.Value(len(b.Detail)) +
		sqlbound.Value(len(b.Destination)) + sqlbound.Value(len(b.MessageID)) + sqlbound.Value(b.headerBytes) +
		sqlbound.Value(len(b.Body)) + sqlbound.Value(len(b.EventID))
}

// ingestBounded writes entries and bad in as few statements as fit maxStatement bytes.
func ingestBounded(ctx context.Context, db database.DB, entries []Entry, bad []Bad, maxStatement int) (Result, error) {
	if maxStatement < sqlbound.MinMaxStatementBytes {
		return Result{}, fmt.Errorf("max statement bytes %d is below the minimum %d", maxStatement, sqlbound.MinMaxStatementBytes)
	}
	maxBody := MaxQuarantineBody(maxStatement)
	fits := entries[:0:0]
	bounded := make([]Bad, 0, len(bad))
	for _, e := range entries {
		if ingestBase+entryBytes(e) > maxStatement {
			bounded = append(bounded, tooLarge(e, fmt.Sprintf("event of %d bytes does not fit one statement (max statement bytes %d)", len(e.Event.Payload), maxStatement)))
			continue
		}
		fits = append(fits, e)
	}
	bounded = append(bounded, bad...)
	total := ingestBase
	for i := range bounded {
		bounded[i] = boundBad(bounded[i], maxBody)
		total += badBytes(bounded[i])
	}
	for _, e := range fits {
		total += entryBytes(e)
	}
	if total <= maxStatement {
		return ingestIsolating(ctx, db, fits, bounded)
	}
	var sum Result
	for _, run := range sqlbound.Split(fits, ingestBase, maxStatement, entryBytes) {
		r, err := ingestIsolating(ctx, db, run, nil)
		if err != nil {
			return Result{}, err
		}
		sum = sum.add(r)
	}
	for _, run := range sqlbound.Split(bounded, ingestBase, maxStatement, badBytes) {
		r, err := ingestIsolating(ctx, db, nil, run)
		if err != nil {
			return Result{}, err
		}
		sum = sum.add(r)
	}
	return sum, nil
}

func (r Result) add(o Result) Result {
	r.Inserted += o.Inserted
	r.Duplicates += o.Duplicates
	r.Conflicts += o.Conflicts
	r.Quarantined += o.Quarantined
	r.Refused += o.Refused
	return r
}

// tooLarge is the quarantine row of an event too large for one statement.
func tooLarge(e Entry, detail string) Bad {
	b := Bad{Reason: message.ReasonTooLarge, Detail: detail, Destination: e.Destination, MessageID: e.MessageID,
		Body: e.Event.Payload}
	if e.Headers != nil {
		b.Headers = e.Headers()
	}
	return b
}

// boundBad caps every field of a quarantine row that comes from outside, so that the
// row fits one statement: its id is computed first, from the message as received, so a
// redelivery still collapses onto it.
func boundBad(b Bad, maxBody int) Bad {
	if b.id == "" {
		b.id = message.QuarantineID(b.Reason, b.Destination, b.Body)
	}
	b.Destination = message.Truncate(makeStorable(b.Destination), maxQuarantineText)
	b.MessageID = message.Truncate(makeStorable(b.MessageID), maxQuarantineText)
	b.Detail = message.Truncate(makeStorable(b.Detail), maxQuarantineDetail)
	b.Headers, b.headerBytes = boundHeaders(b.Headers)
	return truncateBody(b, maxBody)
}

// truncateBody keeps the first n bytes of b's body, and says so at the start of its
// detail with the full size and digest.
func truncateBody(b Bad, n int) Bad {
	if len(b.Body) <= n {
		return b
	}
	if b.id == "" {
		b.id = message.QuarantineID(b.Reason, b.Destination, b.Body)
	}
	if bodyTruncated(b.Detail) { // cut before: the note has the whole body's size and digest
		b.Detail = message.Truncate(fmt.Sprintf("%s; cut again to %d bytes", b.Detail, n), maxQuarantineDetail)
	} else {
		sum := sha256.Sum256(b.Body)
		b.Detail = fmt.Sprintf("%s (%d of %d bytes kept; sha256 of the whole body %x): %s", truncatedPrefix, n, len(b.Body), sum, b.Detail)
	}
	b.Body = b.Body[:n:n]
	return b
}

// bodyTruncated reports whether a quarantine row's body was cut (see truncateBody).
func bodyTruncated(detail string) bool { return strings.HasPrefix(detail, truncatedPrefix) }

// boundHeaders makes headers storable and keeps their JSON under maxQuarantineHeaders:
// over it, the headers in key order with values cut to maxHeaderValue, as many as fit,
// and a note of how many were kept. It returns the headers and their JSON size.
func boundHeaders(h map[string]string) (map[string]string, int) {
	clean := make(map[string]string, len(h))
	for k, v := range h {
		clean[makeStorable(k)] = makeStorable(v)
	}
	if j, err := json.Marshal(clean); err == nil && len(j) <= maxQuarantineHeaders {
		return clean, len(j)
	}
	keys := make([]string, 0, len(clean))
	for k := range clean {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	const note = "inboxd-headers-truncated"
	kept, size := make(map[string]string), 256 // room for the note
	for _, k := range keys {
		k2, v := message.Truncate(k, maxHeaderValue), message.Truncate(clean[k], maxHeaderValue)
		kj, _ := json.Marshal(k2)
		vj, _ := json.Marshal(v)
		if size+len(kj)+len(vj)+2 > maxQuarantineHeaders {
			break
		}
		kept[k2] = v
		size += len(kj) + len(vj) + 2
	}
	kept[note] = fmt.Sprintf("%d of %d headers kept, values cut to %d bytes", len(kept), len(clean), maxHeaderValue)
	j, _ := json.Marshal(kept)
	return kept, len(j)
}

// maxStatementOf is b's statement bound, or the default.
func maxStatementOf(b Batch) int {
	return cmp.Or(b.MaxStatementBytes, sqlbound.DefaultMaxStatementBytes)
}

// EntryBytes estimates what an entry adds to an ingest statement, for a batcher that
// closes batches before they outgrow one statement.
func EntryBytes(e Entry) int { return entryBytes(e) }

// BadBytes estimates what a quarantine row adds to an ingest statement, before its
// fields are capped (so it may overestimate), for a batcher.
func BadBytes(b Bad) int {
	h := 2
	for k, v := range b.Headers {
		h += len(k) + len(v) + 6
	}
	b.headerBytes = min(h, maxQuarantineHeaders)
	b.Detail = b.Detail[:min(len(b.Detail), maxQuarantineDetail+256)]
	return badBytes(b)
}

// Room reports whether a batch whose rows are estimated at rows bytes (EntryBytes,
// BadBytes) still has room, in one statement of maxStatement bytes, for one more message
// with a body of up to maxBody bytes.
func Room(rows, maxBody, maxStatement int) bool {
	return ingestBase+rows+sqlbound.Value(maxBody)+quarantineFixed <= maxStatement
}
