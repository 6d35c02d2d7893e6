-- Outbox order per group (issue 18): rows of one group (Outgoing.Group, else the
-- JMSXGroupID header, else aggregate-id) are published in emit order, which seq keeps:
-- one statement of Emit/EmitBatch draws ONE value from outbox_seq and numbers its rows
-- inside the block (outbox.SeqBlock), so rows emitted in one transaction, which share
-- created_at = now(), keep their order, at one sequence write per statement: each
-- nextval is a replicated write on CockroachDB
-- (https://www.cockroachlabs.com/docs/stable/create-sequence#considerations). No PER
-- NODE CACHE, which would give up the cross-node order. SQL of the table: internal/outbox.
CREATE SEQUENCE IF NOT EXISTS outbox_seq INCREMENT BY 65536;
-- Rows written before this migration get 0 (before every new one).
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS seq INT8 NOT NULL DEFAULT 0;
-- NULL: no group, published independently.
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS grp TEXT;
-- Unsent rows written before this migration join their group.
UPDATE outbox SET grp = COALESCE(NULLIF(headers->>'JMSXGroupID', ''), NULLIF(headers->>'aggregate-id', ''))
    WHERE sent_at IS NULL AND grp IS NULL AND jsonb_typeof(headers) = 'object';
-- A group's head is its unsent row of least seq: the relay's claim and its
-- "no earlier unsent row" probe go through this index.
CREATE INDEX IF NOT EXISTS outbox_group_order ON outbox (grp, seq) WHERE sent_at IS NULL;
