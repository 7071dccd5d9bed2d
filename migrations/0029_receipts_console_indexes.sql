-- The operator console's reads of receipts (packages/receipts). One tenant's effects, oldest receipt first and each
-- receipt's effects in seq order, with keyset paging on (created_at, receipt_id, seq), optionally filtered by state:
-- an index walk inside the tenant, never a scan of every tenant's effects.
CREATE INDEX receipt_effects_tenant ON receipt_effects (tenant_id, created_at, receipt_id, seq);

-- A receipt's business audit, newest first: one receipt's rows without a scan of the append-only table.
CREATE INDEX receipt_audit_receipt ON receipt_audit (receipt_id, audit_id);
