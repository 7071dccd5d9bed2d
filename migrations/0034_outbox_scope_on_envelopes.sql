-- Outbox (packages/outbox): the console's per-scope index moves from the state rows to the envelopes.
--
-- Every claim and every outcome writes a new version of an outbox_messages row, and a new version that changes an
-- indexed column is inserted into every index of the table. outbox_messages_scope (tenant, project, created_at, id)
-- was the widest of them and served only the console's list, so each delivered message paid two inserts into it
-- (measured on PostgreSQL 15: claims plus outcomes ran 40-50% faster without it). The envelope is written once and
-- never changed, so the same index on it costs one insert per message, at enqueue.
--
-- outbox_messages.created_at stays, written with the same value: a process of the previous version still inserts
-- it during an upgrade. Such a process's envelopes get the database's time; its console list, ordered by the state
-- row's created_at, reads without an index until it is replaced.

ALTER TABLE outbox_envelopes ADD COLUMN created_at timestamptz NOT NULL DEFAULT now();

-- The envelopes' immutability trigger refuses every UPDATE; this one copies the enqueue time once.
ALTER TABLE outbox_envelopes DISABLE TRIGGER outbox_envelopes_immutable;
UPDATE outbox_envelopes e SET created_at = m.created_at FROM outbox_messages m WHERE m.id = e.id;
ALTER TABLE outbox_envelopes ENABLE TRIGGER outbox_envelopes_immutable;

CREATE INDEX outbox_envelopes_scope ON outbox_envelopes (tenant, project, created_at, id);
DROP INDEX outbox_messages_scope;
