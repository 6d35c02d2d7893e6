-- W3C trace context of the message an event came in (issue 22, item 1): the
-- traceparent and tracestate headers, as the object {"traceparent": …, "tracestate": …}
-- that propagation.TraceContext re-injects from a valid context (internal/tracing), so
-- processing spans continue the publisher's trace. At most tracing.MaxStored bytes
-- (a longer tracestate is dropped at ingest). NULL: the message carried none, or rows
-- written before this migration. SQL of the table: internal/journal.
ALTER TABLE journal ADD COLUMN IF NOT EXISTS trace_context JSONB;
