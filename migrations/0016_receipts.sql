-- Receipts (packages/receipts): a receipt records that something was paid elsewhere and notifies the payer; it
-- never performs a payment. One command commits the business facts (receipt, lines, attached files), the command
-- receipt (replays answer from it), an audit row and the receipt's effects, in one transaction.

-- Uploads, staged before any receipt refers to them: the bytes are in RECEIPT_STAGING_ROOT/<id>, named by the
-- server, never by the client. A receipt attaches each file once; its effects move it to RECEIPT_STORAGE_ROOT/<sha256>.
CREATE TABLE receipt_files (
  id           uuid PRIMARY KEY,
  tenant_id    text NOT NULL CHECK (tenant_id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  account_id   text NOT NULL,
  sha256       text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  size_bytes   bigint NOT NULL CHECK (size_bytes > 0),
  content_type text NOT NULL CHECK (length(content_type) BETWEEN 3 AND 127),
  receipt_id   uuid,
  staged_at    timestamptz NOT NULL
);
CREATE INDEX receipt_files_receipt ON receipt_files (receipt_id) WHERE receipt_id IS NOT NULL;

CREATE TABLE receipts (
  id           uuid PRIMARY KEY,
  tenant_id    text NOT NULL CHECK (tenant_id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  command_id   text NOT NULL,
  reference    text NOT NULL CHECK (length(reference) BETWEEN 1 AND 100),
  currency     text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
  total_minor  bigint NOT NULL CHECK (total_minor >= 0),
  paid_at      timestamptz NOT NULL,
  payer_name   text NOT NULL CHECK (length(payer_name) BETWEEN 1 AND 200),
  payer_email  text NOT NULL CHECK (length(payer_email) BETWEEN 3 AND 254),
  recorded_by  text NOT NULL,
  created_at   timestamptz NOT NULL,
  UNIQUE (tenant_id, command_id)
);

CREATE TABLE receipt_lines (
  receipt_id   uuid NOT NULL REFERENCES receipts (id),
  line_no      integer NOT NULL CHECK (line_no BETWEEN 1 AND 100),
  description  text NOT NULL CHECK (length(description) BETWEEN 1 AND 200),
  quantity     integer NOT NULL CHECK (quantity BETWEEN 1 AND 1000000),
  unit_minor   bigint NOT NULL CHECK (unit_minor >= 0),
  amount_minor bigint NOT NULL CHECK (amount_minor = quantity * unit_minor),
  PRIMARY KEY (receipt_id, line_no)
);

-- The command receipt: the request's canonical SHA-256 and the answer given, so a replay answers the same and a
-- different request under the same id is refused.
CREATE TABLE receipt_commands (
  tenant_id      text NOT NULL,
  command_id     text NOT NULL CHECK (command_id ~ '^[A-Za-z0-9._:-]{1,128}$'),
  request_sha256 text NOT NULL CHECK (request_sha256 ~ '^[0-9a-f]{64}$'),
  receipt_id     uuid NOT NULL REFERENCES receipts (id),
  response       jsonb NOT NULL,
  created_at     timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, command_id)
);

-- Business audit: one row per recorded receipt, written by the command's transaction only (never by delivery).
CREATE TABLE receipt_audit (
  audit_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id      text NOT NULL,
  receipt_id     uuid NOT NULL REFERENCES receipts (id),
  action         text NOT NULL CHECK (action IN ('receipt-recorded')),
  actor          text NOT NULL CHECK (actor ~ '^[a-z][a-z0-9-]{0,31}:[a-z0-9][a-z0-9_.-]{0,63}$'),
  correlation_id text NOT NULL CHECK (correlation_id ~ '^[0-9a-f]{32}$'),
  at             timestamptz NOT NULL
);
CREATE FUNCTION receipt_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
END $$;
CREATE TRIGGER receipt_audit_append_only BEFORE UPDATE OR DELETE ON receipt_audit
  FOR EACH ROW EXECUTE FUNCTION receipt_audit_append_only();
CREATE TRIGGER receipt_audit_no_truncate BEFORE TRUNCATE ON receipt_audit
  FOR EACH STATEMENT EXECUTE FUNCTION receipt_audit_append_only();

-- The effects queue: a receipt's effects in `seq` order (file promotions, staged-copy deletions, the digest audit
-- check, then the notification). An effect is eligible only when every earlier effect of its receipt is done;
-- among eligible effects lower attempt counts go first. Failed work stays retryable (pending with a backoff);
-- `running` is a claim, fenced by `attempt`; a claim older than 60 s goes back to pending.
CREATE TABLE receipt_effects (
  id              uuid PRIMARY KEY,
  receipt_id      uuid NOT NULL REFERENCES receipts (id),
  tenant_id       text NOT NULL,
  seq             integer NOT NULL CHECK (seq >= 1),
  kind            text NOT NULL CHECK (kind IN ('promote-file', 'delete-staged', 'audit-check', 'notify')),
  file_id         uuid REFERENCES receipt_files (id),
  state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'done')),
  attempt         integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
  next_attempt_at timestamptz NOT NULL,
  claimed_at      timestamptz,
  lease_owner     text CHECK (length(lease_owner) <= 128),
  last_error      text CHECK (last_error ~ '^[a-z0-9-]{1,64}$'),
  -- notify only: the notification as first attempted (canonical JSON of the message) and its SHA-256, frozen
  -- before the first network I/O; every retry sends exactly this.
  envelope        text,
  envelope_sha256 text CHECK (envelope_sha256 ~ '^[0-9a-f]{64}$'),
  completed_at    timestamptz,
  created_at      timestamptz NOT NULL,
  updated_at      timestamptz NOT NULL,
  UNIQUE (receipt_id, seq),
  CHECK ((kind IN ('promote-file', 'delete-staged')) = (file_id IS NOT NULL)),
  CHECK ((envelope IS NULL) = (envelope_sha256 IS NULL)),
  CHECK (envelope IS NULL OR kind = 'notify'),
  CHECK (state <> 'running' OR (claimed_at IS NOT NULL AND attempt > 0)),
  CHECK ((state = 'done') = (completed_at IS NOT NULL))
);
CREATE INDEX receipt_effects_due ON receipt_effects (attempt, next_attempt_at) WHERE state = 'pending';
CREATE INDEX receipt_effects_claims ON receipt_effects (claimed_at) WHERE state = 'running';
CREATE INDEX receipt_effects_receipt ON receipt_effects (receipt_id, seq);
