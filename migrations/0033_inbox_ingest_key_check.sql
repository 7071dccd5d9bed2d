-- EnvelopeInbox (packages/envelope-inbox): spec 000 steps 3 (the key's state) and 5 to 6 in one statement.
-- The inbox caches a key's public key bytes per process and verifies the Ed25519 signature with them
-- without reading the key's state first; the state is checked here, in the transaction that commits the
-- envelope, by the signer's own function (migrations/0032_signer_key_check.sql), so a key revoked or
-- expired while its bytes are cached is refused by the next commit (docs/controlplane-inbound.md, "Key cache").
--
-- The key check comes first, before the stream is locked or even created: a refused key commits its
-- refusal's audit row and nothing else, as the refusal at step 3 always did. `key-replaced` (the key id
-- was purged and registered again with other bytes) writes nothing at all: the caller drops its cached
-- key and checks the signature again against the registered one before it answers.
--
-- An overload of the 13-argument inbox_ingest (migrations/0005_inbox_ingest_function.sql), which stays:
-- it does steps 5 and 6 for this one, and a process of the previous version still calls it during an
-- upgrade.
CREATE FUNCTION inbox_ingest(
  p_tenant text, p_project text, p_producer text,
  p_sequence bigint, p_event_id text, p_idempotency_key text, p_event_identity text,
  p_envelope text, p_account text, p_device text, p_correlation_id text,
  p_at timestamptz, p_expires_at timestamptz,
  p_key_id text, p_public_key bytea,
  -- accepted | duplicate | refused (a 409) | key-refused (a 403) | key-replaced (nothing written)
  OUT o_outcome text,
  -- accepted | reordered | duplicate | a 409 reason | key-unknown | key-revoked | key-expired | key-replaced
  OUT o_reason text,
  -- the stream's contiguous cursor after this statement; NULL when the key was refused or replaced
  OUT o_cursor bigint
) LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  o_reason := signer_key_refusal(p_tenant, p_key_id, p_public_key, p_at);
  IF o_reason = 'key-replaced' THEN
    o_outcome := 'key-replaced';
    RETURN;
  ELSIF o_reason IS NOT NULL THEN
    -- Refused at step 3: answered only once this audit row commits with the statement.
    INSERT INTO inbox_audit (recorded_at, tenant, project, producer, account, device, event_identity, outcome, reason, correlation_id)
    VALUES (p_at, p_tenant, p_project, p_producer, p_account, p_device, p_event_identity, 'refused', o_reason, p_correlation_id);
    o_outcome := 'key-refused';
    RETURN;
  END IF;
  SELECT i.o_outcome, i.o_reason, i.o_cursor INTO o_outcome, o_reason, o_cursor
  FROM inbox_ingest(p_tenant, p_project, p_producer, p_sequence, p_event_id, p_idempotency_key, p_event_identity,
                    p_envelope, p_account, p_device, p_correlation_id, p_at, p_expires_at) i;
END $$;

REVOKE ALL ON FUNCTION inbox_ingest(text, text, text, bigint, text, text, text, text, text, text, text, timestamptz, timestamptz, text, bytea) FROM PUBLIC;
