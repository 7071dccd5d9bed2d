-- EnvelopeInbox (packages/envelope-inbox): spec 000 steps 5 and 6 as one function, called as one
-- statement in autocommit, so the statement is the transaction: the stream lock, the identity checks,
-- and the commit of identity + payload + cursor + audit take one round trip instead of five (BEGIN,
-- lock, read, write, COMMIT), and PL/pgSQL keeps each inner statement's plan for the session instead
-- of planning it again on every request. docs/controlplane-inbound.md ("Steps 5 and 6") explains it.
--
-- Why a function and not one plain statement: under READ COMMITTED a plain statement reads with the
-- snapshot it started with, before it waited for the stream lock, so it could miss the identity that
-- the previous holder of the lock just committed. Inside a VOLATILE function every statement takes a
-- fresh snapshot, so the reads below, made after the lock is held, see every committed identity.
--
-- The order of checks is spec 000's: retained event id and idempotency key, then the replay floor,
-- then the producer sequence. Any failure (a constraint, a trigger, the COMMIT at the end of the
-- statement) aborts all of it: no identity, payload, cursor, audit row or even new stream row remains.
CREATE FUNCTION inbox_ingest(
  p_tenant text, p_project text, p_producer text,
  p_sequence bigint, p_event_id text, p_idempotency_key text, p_event_identity text,
  p_envelope text, p_account text, p_device text, p_correlation_id text,
  p_at timestamptz, p_expires_at timestamptz,
  -- accepted | duplicate | refused
  OUT o_outcome text,
  -- accepted | reordered | duplicate | one of the 409 reasons
  OUT o_reason text,
  -- the stream's contiguous cursor after this statement
  OUT o_cursor bigint
) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_stream bigint;
  v_cursor bigint;
  v_floor bigint;
  v_high bigint;
  v_retained text;
BEGIN
  -- Creates the stream on first use and locks its row until commit. DO UPDATE (not DO NOTHING) takes
  -- the row lock in the same statement and returns the latest committed cursor, even after waiting.
  INSERT INTO inbox_streams AS s (tenant, project, producer, created_at, last_received_at)
  VALUES (p_tenant, p_project, p_producer, p_at, p_at)
  ON CONFLICT (tenant, project, producer) DO UPDATE SET last_received_at = EXCLUDED.last_received_at
  RETURNING s.stream_id, s.contiguous_cursor, s.replay_floor, s.high_sequence
  INTO v_stream, v_cursor, v_floor, v_high;

  -- Retained identities, read under the lock. Same event id and same signed bytes: the same event
  -- again (a duplicate); the same event id with other bytes reuses the id.
  SELECT i.event_identity INTO v_retained
  FROM inbox_identities i WHERE i.stream_id = v_stream AND i.event_id = p_event_id;
  IF FOUND THEN
    IF v_retained = p_event_identity THEN
      o_outcome := 'duplicate'; o_reason := 'duplicate';
    ELSE
      o_outcome := 'refused'; o_reason := 'event-id-conflict';
    END IF;
  ELSIF EXISTS (SELECT 1 FROM inbox_identities i WHERE i.stream_id = v_stream AND i.idempotency_key = p_idempotency_key) THEN
    o_outcome := 'refused'; o_reason := 'idempotency-key-conflict';
  ELSIF p_sequence <= v_floor THEN
    -- A closed sequence is only ever acknowledged as a duplicate of an identity retained before.
    o_outcome := 'refused'; o_reason := 'sequence-below-replay-floor';
  ELSIF EXISTS (SELECT 1 FROM inbox_identities i WHERE i.stream_id = v_stream AND i.sequence = p_sequence) THEN
    o_outcome := 'refused'; o_reason := 'sequence-conflict';
  END IF;

  IF o_outcome IS NOT NULL THEN
    -- Duplicates and refusals are answered only once their audit row commits with this statement.
    INSERT INTO inbox_audit (recorded_at, tenant, project, producer, account, device, event_identity, outcome, reason, correlation_id)
    VALUES (p_at, p_tenant, p_project, p_producer, p_account, p_device, p_event_identity, o_outcome, o_reason, p_correlation_id);
    o_cursor := v_cursor;
    RETURN;
  END IF;

  -- Accepted. A retained sequence at or below the cursor would have matched above, so this one is
  -- above it. Arriving ahead of a gap, or filling one below later retained sequences, is `reordered`
  -- in the audit row (the public outcome stays `accepted`). The cursor moves only when this is the
  -- next sequence: to it, or through the run of retained sequences right above it.
  o_outcome := 'accepted';
  IF p_sequence <> v_cursor + 1 THEN
    o_reason := 'reordered'; o_cursor := v_cursor;
  ELSIF v_high > p_sequence THEN
    o_reason := 'reordered';
    -- End of the run p_sequence+1, p_sequence+2, ...: in a run, sequence - row_number() stays equal to p_sequence.
    SELECT COALESCE(max(r.sequence), p_sequence) INTO o_cursor FROM (
      SELECT i.sequence, i.sequence - row_number() OVER (ORDER BY i.sequence) AS base
      FROM inbox_identities i WHERE i.stream_id = v_stream AND i.sequence > p_sequence
    ) r WHERE r.base = p_sequence;
  ELSE
    o_reason := 'accepted'; o_cursor := p_sequence;
  END IF;

  -- Spec 000 step 6: permanent identity, expiring payload, redacted audit row, cursor advance.
  INSERT INTO inbox_identities (stream_id, sequence, event_id, idempotency_key, event_identity, accepted_at)
  VALUES (v_stream, p_sequence, p_event_id, p_idempotency_key, p_event_identity, p_at);
  INSERT INTO inbox_payloads (stream_id, sequence, envelope, expires_at)
  VALUES (v_stream, p_sequence, p_envelope, p_expires_at);
  INSERT INTO inbox_audit (recorded_at, tenant, project, producer, account, device, event_identity, outcome, reason, correlation_id)
  VALUES (p_at, p_tenant, p_project, p_producer, p_account, p_device, p_event_identity, o_outcome, o_reason, p_correlation_id);
  UPDATE inbox_streams SET contiguous_cursor = o_cursor, high_sequence = GREATEST(high_sequence, p_sequence)
  WHERE stream_id = v_stream;
END $$;

-- Only the owner (the migrating user, which runs the backend) calls it; it runs with the caller's rights.
REVOKE ALL ON FUNCTION inbox_ingest(text, text, text, bigint, text, text, text, text, text, text, text, timestamptz, timestamptz) FROM PUBLIC;
