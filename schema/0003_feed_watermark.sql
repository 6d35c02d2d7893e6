-- The changefeed's resolved timestamp per sink, written by whichever inboxd instance received it.
CREATE TABLE IF NOT EXISTS feed_watermark (
    sink        TEXT        PRIMARY KEY,
    -- The HLC as sent by CockroachDB ("<wall nanos>.<logical>"); resolved_at is its wall time.
    resolved    TEXT        NOT NULL,
    resolved_at TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
