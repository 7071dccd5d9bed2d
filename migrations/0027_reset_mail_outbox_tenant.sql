-- The operator console's list of one tenant's reset mail (packages/reset-mail), oldest first with keyset paging on
-- (created_at, id), optionally filtered by state: an index walk inside the tenant, never a scan of every tenant's rows.
CREATE INDEX reset_mail_outbox_tenant ON reset_mail_outbox (tenant_id, created_at, id);
