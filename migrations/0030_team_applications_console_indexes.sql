-- The operator console's reads of team applications (packages/team-applications). One tenant's notifications, oldest
-- first with keyset paging on (created_at, effect_id), optionally filtered by delivery state: the view
-- team_application_delivery_state passes the tenant and keyset conditions down to the outbox, so this is an index
-- walk inside the tenant, never a scan of every tenant's notifications.
CREATE INDEX team_application_outbox_tenant ON team_application_outbox (tenant_id, created_at, effect_id);

-- An application's business audit, newest first: one application's rows without a scan of the append-only table.
CREATE INDEX team_application_audit_application ON team_application_audit (application_id, audit_id);
