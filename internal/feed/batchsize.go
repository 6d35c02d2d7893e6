package feed

// Batch bytes: the webhook's body cap and webhook_sink_config's Flush.Bytes are derived
// from one another here, so that no batch the sink can build is refused with 413 (which
// the sink retries forever, stalling the feed).
//
// The webhook sink flushes a batch once it holds Flush.Messages rows or Flush.Bytes
// bytes (https://www.cockroachlabs.com/docs/stable/changefeed-sinks#webhook-sink-configuration),
// so a batch can pass Flush.Bytes by one row. CockroachDB's JSON encoder writes <, > and
// & as \u003c, \u003e and \u0026, six bytes for one, and control characters likewise, so
// a row can be six times its raw text. The cap below holds even if the sink counted raw
// (unescaped) bytes toward Flush.Bytes.

const (
	// DefaultFlushMessages is Flush.Messages of DefaultOptions.
	DefaultFlushMessages = 100
	// DefaultFlushBytes is Flush.Bytes of DefaultOptions.
	DefaultFlushBytes = 1 << 20
	// escapeFactor is the most bytes one byte of row text becomes in the encoded JSON.
	escapeFactor = 6
	// rowOverhead bounds the columns of a row not taken from the message body, escaped
	// (last_error is at most 4000 characters; tag, timestamps, keys, "updated"), plus the
	// row's share of the envelope.
	rowOverhead = 64 << 10
	// envelopeOverhead bounds {"payload":[…],"length":N} around the rows.
	envelopeOverhead = 1 << 10
)

// MaxRowBytes bounds one journal row as the changefeed encodes it, for messages of at
// most maxMessageBytes: the payload is the body, and event_type and aggregate_id may be
// taken from it, so the body's text appears at most twice, each byte escaped to at most
// six.
func MaxRowBytes(maxMessageBytes int) int64 {
	return 2*escapeFactor*int64(maxMessageBytes) + rowOverhead
}

// WebhookBodyCap is the smallest body cap the webhook needs for batches flushed at f
// with messages of at most maxMessageBytes: Flush.Bytes, escaped at worst, plus the row
// that crosses it, plus the envelope.
func WebhookBodyCap(f Flush, maxMessageBytes int) int64 {
	return escapeFactor*int64(f.Bytes) + MaxRowBytes(maxMessageBytes) + envelopeOverhead
}
