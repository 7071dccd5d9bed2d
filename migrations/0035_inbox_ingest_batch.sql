-- EnvelopeInbox (packages/envelope-inbox): several envelopes' steps 3 (the key's state), 5 and 6 in one statement.
-- Envelopes that arrive while earlier ones are being committed are committed together (group commit,
-- docs/controlplane-inbound.md, "Group commit"): one round trip and one commit for all of them instead of one each.
-- Each element is exactly one call of the 15-argument inbox_ingest (migrations/0033_inbox_ingest_key_check.sql),
-- with its own checks, rows and outcome; the statement is still the transaction, so a failure anywhere commits
-- nothing of any of them (the caller then writes each one alone, so one bad element fails only itself).
--
-- The elements run ordered by stream (tenant, project, producer), then in arrival order: every batch takes the
-- tenants' key-management locks and the stream rows in the same order, so two batches never wait on each other in a
-- cycle, and envelopes of one stream keep the order they arrived in. Each call sees the rows of the calls before it
-- (a VOLATILE function's statements take a fresh snapshot and see the transaction's own writes), so a duplicate of an
-- envelope earlier in the same batch is answered as a duplicate.
CREATE FUNCTION inbox_ingest_batch(
  p_tenant text[], p_project text[], p_producer text[],
  p_sequence bigint[], p_event_id text[], p_idempotency_key text[], p_event_identity text[],
  p_envelope text[], p_account text[], p_device text[], p_correlation_id text[],
  p_at timestamptz[], p_expires_at timestamptz[],
  p_key_id text[], p_public_key bytea[]
) RETURNS TABLE (
  -- the element's position in the arrays, from 1
  o_index int,
  o_outcome text,
  o_reason text,
  o_cursor bigint
) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  i int;
BEGIN
  FOR i IN
    SELECT n FROM generate_subscripts(p_tenant, 1) AS n ORDER BY p_tenant[n], p_project[n], p_producer[n], n
  LOOP
    o_index := i;
    SELECT r.o_outcome, r.o_reason, r.o_cursor INTO o_outcome, o_reason, o_cursor
    FROM inbox_ingest(p_tenant[i], p_project[i], p_producer[i], p_sequence[i], p_event_id[i], p_idempotency_key[i],
                      p_event_identity[i], p_envelope[i], p_account[i], p_device[i], p_correlation_id[i], p_at[i],
                      p_expires_at[i], p_key_id[i], p_public_key[i]) r;
    RETURN NEXT;
  END LOOP;
END $$;

REVOKE ALL ON FUNCTION inbox_ingest_batch(text[], text[], text[], bigint[], text[], text[], text[], text[], text[], text[], text[], timestamptz[], timestamptz[], text[], bytea[]) FROM PUBLIC;
