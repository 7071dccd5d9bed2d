-- EnvelopeInbox (packages/envelope-inbox): inbound controlplane/v1 envelopes, spec 000
-- "Inbound order and acknowledgement" and "Retention and recovery". docs/controlplane-inbound.md
-- explains every column. Only inbox_payloads ever loses rows (retention); streams, identities and
-- audit rows are permanent, so an expired payload can never make an old event new again.

-- One row per tenant/project/producer stream. The row is the stream's lock (SELECT ... FOR UPDATE
-- through INSERT ... ON CONFLICT DO UPDATE): every check and write of one envelope happens under it.
CREATE TABLE inbox_streams (
  stream_id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant            text        NOT NULL CHECK (tenant ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  project           text        NOT NULL CHECK (project ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  producer          text        NOT NULL CHECK (producer ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  -- Every sequence 1..contiguous_cursor is retained or closed by the replay floor.
  contiguous_cursor bigint      NOT NULL DEFAULT 0,
  -- Sequences <= replay_floor are closed: accepted only as duplicates of retained identities.
  replay_floor      bigint      NOT NULL DEFAULT 0 CHECK (replay_floor >= 0),
  -- The highest retained sequence: when it is above the cursor there are gaps to fill.
  high_sequence     bigint      NOT NULL DEFAULT 0,
  created_at        timestamptz NOT NULL,
  last_received_at  timestamptz NOT NULL,
  UNIQUE (tenant, project, producer),
  CHECK (contiguous_cursor >= replay_floor)
);

-- Spec 000: recovery "must not reset attempts, cursors, replay floors, or idempotency identities".
-- The schema itself refuses to move a cursor or floor backwards or to rename a stream.
CREATE FUNCTION inbox_streams_forward_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.contiguous_cursor < OLD.contiguous_cursor OR NEW.replay_floor < OLD.replay_floor
     OR NEW.high_sequence < OLD.high_sequence
     OR (NEW.tenant, NEW.project, NEW.producer) IS DISTINCT FROM (OLD.tenant, OLD.project, OLD.producer) THEN
    RAISE EXCEPTION 'inbox streams only move forward' USING ERRCODE = 'check_violation';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER inbox_streams_forward_only BEFORE UPDATE ON inbox_streams
  FOR EACH ROW EXECUTE FUNCTION inbox_streams_forward_only();

-- Permanent identities: one row per accepted event, never updated or deleted.
CREATE TABLE inbox_identities (
  stream_id       bigint      NOT NULL REFERENCES inbox_streams (stream_id),
  sequence        bigint      NOT NULL CHECK (sequence BETWEEN 1 AND 9007199254740991),
  event_id        text        NOT NULL CHECK (event_id ~ '^[A-Za-z0-9_-]{16,64}$'),
  idempotency_key text        NOT NULL CHECK (idempotency_key ~ '^[A-Za-z0-9._:-]{1,128}$'),
  -- SHA-256 (hex) of the signed bytes: equal identities are the same event, so a duplicate.
  event_identity  text        NOT NULL CHECK (event_identity ~ '^[0-9a-f]{64}$'),
  accepted_at     timestamptz NOT NULL,
  PRIMARY KEY (stream_id, sequence),
  UNIQUE (stream_id, event_id),
  UNIQUE (stream_id, idempotency_key)
);

-- Expiring payloads: the envelope as RFC 8785 JSON (signature included), so the signed bytes can be
-- recomputed exactly. The foreign key makes a payload without its identity impossible, which is
-- why a restore of payloads alone fails instead of silently producing "new" events.
CREATE TABLE inbox_payloads (
  stream_id  bigint      NOT NULL,
  sequence   bigint      NOT NULL,
  envelope   text        NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (stream_id, sequence),
  FOREIGN KEY (stream_id, sequence) REFERENCES inbox_identities (stream_id, sequence)
);
CREATE INDEX inbox_payloads_expiry ON inbox_payloads (expires_at);

-- Redacted audit: every authenticated accept, duplicate and refusal. Never the credential, the
-- signature or the payload; project, producer, device and event identity are NULL when the request
-- was refused before they were known (or, for device, when the caller was not a device).
CREATE TABLE inbox_audit (
  audit_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  recorded_at    timestamptz NOT NULL,
  tenant         text        NOT NULL,
  project        text,
  producer       text,
  account        text        NOT NULL,
  device         text,
  event_identity text CHECK (event_identity ~ '^[0-9a-f]{64}$'),
  outcome        text        NOT NULL CHECK (outcome IN ('accepted', 'duplicate', 'refused')),
  reason         text        NOT NULL CHECK (reason ~ '^[a-z][a-z0-9-]{0,63}$'),
  correlation_id text        NOT NULL CHECK (correlation_id ~ '^[0-9a-f]{32}$')
);
CREATE INDEX inbox_audit_tenant_time ON inbox_audit (tenant, recorded_at);

-- Identities and audit rows are append-only: no UPDATE, DELETE or TRUNCATE, whoever asks.
CREATE FUNCTION inbox_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- Its own SQLSTATE class (P0001), so it is never mistaken for a privilege error.
  RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
END $$;
CREATE TRIGGER inbox_identities_append_only BEFORE UPDATE OR DELETE ON inbox_identities
  FOR EACH ROW EXECUTE FUNCTION inbox_append_only();
CREATE TRIGGER inbox_identities_no_truncate BEFORE TRUNCATE ON inbox_identities
  FOR EACH STATEMENT EXECUTE FUNCTION inbox_append_only();
CREATE TRIGGER inbox_audit_append_only BEFORE UPDATE OR DELETE ON inbox_audit
  FOR EACH ROW EXECUTE FUNCTION inbox_append_only();
CREATE TRIGGER inbox_audit_no_truncate BEFORE TRUNCATE ON inbox_audit
  FOR EACH STATEMENT EXECUTE FUNCTION inbox_append_only();
