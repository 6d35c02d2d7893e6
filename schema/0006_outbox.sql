-- The transactional outbox: messages a handler emits inside its processing transaction
-- (inboxd.Emit), published to the broker by the relay once that transaction commits.
-- SQL of this table lives in internal/outbox.
CREATE TABLE IF NOT EXISTS outbox (
    -- Assigned by Emit; sent as the outbox-id header, so a downstream inbox can deduplicate.
    id          UUID        PRIMARY KEY,
    destination TEXT        NOT NULL,
    headers     JSONB       NOT NULL DEFAULT '{}'::JSONB,
    body        BYTEA       NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Publish attempts so far; the relay claims a row by pushing lease_until ahead.
    attempts    INT8        NOT NULL DEFAULT 0,
    lease_until TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_error  TEXT,
    -- NULL until the broker confirmed the message (RECEIPT).
    sent_at     TIMESTAMPTZ
);
-- The relay's claim: unsent rows whose lease has passed.
CREATE INDEX IF NOT EXISTS outbox_unsent ON outbox (lease_until) WHERE sent_at IS NULL;
-- Retention: sent rows, oldest first.
CREATE INDEX IF NOT EXISTS outbox_sent ON outbox (sent_at) WHERE sent_at IS NOT NULL;
