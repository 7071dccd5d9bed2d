-- Rate-limited refusals in the inbox audit (packages/envelope-inbox, RefusalAudit). Spec 000 asks for an
-- audit record of every authenticated refusal and puts the sync limiter before any database work, so a
-- sync-rate-limited request writes nothing: its refusal is counted in process memory, and one row per
-- verified identity and limiter window is written once the window is over (or at shutdown), carrying
-- how many refusals it stands for. Every other row stands for exactly one request.
--
-- A constant default is a catalog change only: no existing row is rewritten, so the append-only
-- triggers of inbox_audit are not involved.
ALTER TABLE inbox_audit
  ADD COLUMN refusal_count integer NOT NULL DEFAULT 1 CHECK (refusal_count >= 1),
  ADD CONSTRAINT inbox_audit_counted_refusals
    CHECK (refusal_count = 1 OR (outcome = 'refused' AND reason = 'sync-rate-limited'));
