-- The demo's business table: customers created by the registration handler.
CREATE TABLE IF NOT EXISTS customers (
    -- The registration event id: the business effect is keyed by the event that caused it.
    id            UUID        PRIMARY KEY,
    jurisdiction  TEXT        NOT NULL,
    email         TEXT        NOT NULL,
    name          TEXT        NOT NULL,
    registered_at TIMESTAMPTZ NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT customers_jurisdiction_email UNIQUE (jurisdiction, email)
);
