-- Every durable topic subscription inboxd has created on the broker, written before its
-- SUBSCRIBE: the broker keeps messages for a durable subscription until it is removed,
-- so one abandoned by a configuration change must remain findable (inboxd subscriptions list).
CREATE TABLE IF NOT EXISTS durable_subscription (
    client_id          TEXT        NOT NULL,
    subscription_name  TEXT        NOT NULL,
    destination        TEXT        NOT NULL,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_subscribed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Set by inboxd subscriptions remove; a later SUBSCRIBE with the same identity clears it.
    removed_at         TIMESTAMPTZ,
    PRIMARY KEY (client_id, subscription_name)
);
