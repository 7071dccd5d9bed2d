-- Outbox (packages/outbox): outbound controlplane/v1 delivery, spec 000 "Outbox delivery".
-- docs/controlplane-outbound.md explains every column and every transition.

-- Where a tenant/project's envelopes are POSTed; registered and replaced by an operator.
-- The URL was validated like every provider endpoint (no credentials, query or fragment; http only
-- to loopback), but a path may still be a capability, so it is never logged or audited.
CREATE TABLE outbox_targets (
  tenant     text        NOT NULL CHECK (tenant ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  project    text        NOT NULL CHECK (project ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  endpoint   text        NOT NULL CHECK (length(endpoint) BETWEEN 8 AND 2048),
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  PRIMARY KEY (tenant, project)
);

-- The signed envelope and its identities, written once at enqueue in the same transaction as its
-- state row (outbox_messages) and never changed (spec 000: "Reusing that key returns the original immutable envelope").
CREATE TABLE outbox_envelopes (
  id              uuid        PRIMARY KEY,
  tenant          text        NOT NULL CHECK (tenant ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  project         text        NOT NULL CHECK (project ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  idempotency_key text        NOT NULL CHECK (idempotency_key ~ '^[A-Za-z0-9._:-]{1,128}$'),
  -- SHA-256 (hex) of the RFC 8785 form of the enqueue request (envelope without keyId, plus
  -- maxAttempts): "same content" for the idempotency check.
  request_sha256  text        NOT NULL CHECK (request_sha256 ~ '^[0-9a-f]{64}$'),
  -- SHA-256 (hex) of the envelope's signed bytes, as the inbox computes it.
  event_identity  text        NOT NULL CHECK (event_identity ~ '^[0-9a-f]{64}$'),
  -- The signed envelope as RFC 8785 JSON, signature included: the exact POST body.
  envelope        text        NOT NULL,
  UNIQUE (tenant, project, idempotency_key),
  -- Target of outbox_messages' foreign key: a state row names the same tenant and project.
  UNIQUE (id, tenant, project)
);

CREATE FUNCTION outbox_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '%', TG_ARGV[0] USING ERRCODE = 'check_violation';
END $$;
CREATE TRIGGER outbox_envelopes_immutable BEFORE UPDATE ON outbox_envelopes
  FOR EACH ROW EXECUTE FUNCTION outbox_refuse('outbox envelopes are immutable');

-- The delivery state of each message: small rows, because every claim and every outcome writes a
-- new version of one (and of each of its indexes). Everything immutable lives in outbox_envelopes.
-- Every CHECK runs on every UPDATE, so the hot table has no pattern checks: tenant and project are
-- the envelope's (the foreign key below), and last_error is a code the worker writes from a closed
-- set (and the service decodes it from that set when reading).
CREATE TABLE outbox_messages (
  -- The message identity on the wire (webhook-id and Idempotency-Key): the same on every retry and
  -- redrive, so a receiver deduplicates by it.
  id              uuid        PRIMARY KEY,
  tenant          text        NOT NULL,
  project         text        NOT NULL,
  state           text        NOT NULL CHECK (state IN ('pending', 'delivering', 'delivered', 'dead')),
  -- The fence: incremented by every claim, compared by every later transition. Never reset.
  attempt         integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
  max_attempts    integer     NOT NULL CHECK (max_attempts BETWEEN 1 AND 100),
  -- Attempts allowed so far: max_attempts at enqueue, raised by each redrive.
  attempt_ceiling integer     NOT NULL CHECK (attempt_ceiling >= max_attempts),
  -- pending: when the next attempt is due; delivering: when the lease expires. One column, so one
  -- index serves both halves of "claimable" (due pending rows and expired leases).
  due_at          timestamptz,
  lease_owner     text,
  -- A stable code (docs/controlplane-outbound.md), never a receiver response.
  last_error      text,
  dead_reason     text        CHECK (dead_reason IN ('rejected', 'attempts-exhausted')),
  created_at      timestamptz NOT NULL,
  delivered_at    timestamptz,
  dead_at         timestamptz,
  CHECK ((state IN ('pending', 'delivering')) = (due_at IS NOT NULL)),
  CHECK ((state = 'delivering') = (lease_owner IS NOT NULL)),
  CHECK ((state = 'delivered') = (delivered_at IS NOT NULL)),
  CHECK ((state = 'dead') = (dead_at IS NOT NULL AND dead_reason IS NOT NULL)),
  FOREIGN KEY (id, tenant, project) REFERENCES outbox_envelopes (id, tenant, project)
);

-- Claims: due pending rows and expired leases, earliest first.
CREATE INDEX outbox_messages_due ON outbox_messages (due_at) WHERE state IN ('pending', 'delivering');

-- Dead-letter pages: keyset on (dead_at, id) inside one tenant/project.
CREATE INDEX outbox_messages_dead ON outbox_messages (tenant, project, dead_at, id) WHERE state = 'dead';

-- Spec 000: recovery "must not reset attempts". `UPDATE OF` fires only for statements that name
-- one of these columns (claims and redrives; the outcome transitions never do), and the WHEN clause
-- is evaluated without calling the function, so a claim that obeys the rule pays almost nothing.
CREATE TRIGGER outbox_messages_attempt_forward
  BEFORE UPDATE OF attempt, attempt_ceiling, id, tenant, project, max_attempts, created_at
  ON outbox_messages FOR EACH ROW
  WHEN (NEW.attempt < OLD.attempt OR NEW.attempt_ceiling < OLD.attempt_ceiling
        OR (NEW.id, NEW.tenant, NEW.project, NEW.max_attempts, NEW.created_at)
           IS DISTINCT FROM (OLD.id, OLD.tenant, OLD.project, OLD.max_attempts, OLD.created_at))
  EXECUTE FUNCTION outbox_refuse('outbox attempts only move forward; identity columns are immutable');

