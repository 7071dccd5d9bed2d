-- The operator console's list of one tenant/project's messages (packages/outbox), oldest first with keyset
-- paging on (created_at, id), optionally filtered by state: an index walk, never a scan of every tenant's rows.
CREATE INDEX outbox_messages_scope ON outbox_messages (tenant, project, created_at, id);
