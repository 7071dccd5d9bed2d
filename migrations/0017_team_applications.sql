-- Team applications (packages/team-applications), in their first shape: a submission commits the application, its
-- command receipt, an audit row and both notification envelopes (to the applicant and to the team) in one
-- transaction. In this shape the outbox carried its own claim columns (state, attempt, next_attempt_at,
-- claimed_at, lease_owner); 0018 (spec 002's migration 0078) moves them onto the queue and 0019 (0079) drops them.

CREATE TABLE team_applications (
  id              uuid PRIMARY KEY,
  tenant_id       text NOT NULL CHECK (tenant_id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  command_id      text NOT NULL,
  team_slug       text NOT NULL CHECK (team_slug ~ '^[a-z0-9][a-z0-9-]{0,63}$'),
  team_name       text NOT NULL CHECK (length(team_name) BETWEEN 1 AND 200),
  team_email      text NOT NULL CHECK (length(team_email) BETWEEN 3 AND 254),
  applicant_name  text NOT NULL CHECK (length(applicant_name) BETWEEN 1 AND 200),
  applicant_email text NOT NULL CHECK (length(applicant_email) BETWEEN 3 AND 254),
  message         text NOT NULL CHECK (length(message) <= 2000),
  submitted_by    text NOT NULL,
  created_at      timestamptz NOT NULL,
  UNIQUE (tenant_id, command_id)
);

-- The command receipt: the request's canonical SHA-256 and the answer given (replays answer from it).
CREATE TABLE team_application_commands (
  tenant_id      text NOT NULL,
  command_id     text NOT NULL CHECK (command_id ~ '^[A-Za-z0-9._:-]{1,128}$'),
  request_sha256 text NOT NULL CHECK (request_sha256 ~ '^[0-9a-f]{64}$'),
  application_id uuid NOT NULL REFERENCES team_applications (id),
  response       jsonb NOT NULL,
  created_at     timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, command_id)
);

-- Business audit: one row per submission, written by the command's transaction only (never by delivery).
CREATE TABLE team_application_audit (
  audit_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id      text NOT NULL,
  application_id uuid NOT NULL REFERENCES team_applications (id),
  action         text NOT NULL CHECK (action IN ('application-submitted')),
  actor          text NOT NULL CHECK (actor ~ '^[a-z][a-z0-9-]{0,31}:[a-z0-9][a-z0-9_.-]{0,63}$'),
  correlation_id text NOT NULL CHECK (correlation_id ~ '^[0-9a-f]{32}$'),
  at             timestamptz NOT NULL
);
CREATE FUNCTION team_application_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
END $$;
CREATE TRIGGER team_application_audit_append_only BEFORE UPDATE OR DELETE ON team_application_audit
  FOR EACH ROW EXECUTE FUNCTION team_application_audit_append_only();
CREATE TRIGGER team_application_audit_no_truncate BEFORE TRUNCATE ON team_application_audit
  FOR EACH STATEMENT EXECUTE FUNCTION team_application_audit_append_only();

-- One row per notification: its identity (effect_id, the provider idempotency key), the private envelope (the
-- mail as canonical JSON, rendered at submission, and its SHA-256), the policy state (failed attempts and the last
-- failure's code) and the outcome. The claim columns at the end are this first shape's own queue.
CREATE TABLE team_application_outbox (
  effect_id       uuid PRIMARY KEY,
  application_id  uuid NOT NULL REFERENCES team_applications (id),
  tenant_id       text NOT NULL,
  audience        text NOT NULL CHECK (audience IN ('applicant', 'team')),
  envelope        text NOT NULL,
  envelope_sha256 text NOT NULL CHECK (envelope_sha256 ~ '^[0-9a-f]{64}$'),
  failures        integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
  last_error      text CHECK (last_error ~ '^[a-z0-9-]{1,64}$'),
  outcome         text CHECK (outcome IN ('delivered', 'rejected', 'exhausted', 'envelope-invalid')),
  outcome_attempt integer CHECK (outcome_attempt >= 1),
  outcome_at      timestamptz,
  created_at      timestamptz NOT NULL,
  state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'done')),
  attempt         integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
  next_attempt_at timestamptz NOT NULL,
  claimed_at      timestamptz,
  lease_owner     text CHECK (length(lease_owner) <= 128),
  UNIQUE (application_id, audience),
  CHECK ((outcome IS NULL) = (outcome_at IS NULL)),
  CHECK ((outcome IS NULL) = (outcome_attempt IS NULL)),
  CHECK ((state = 'done') = (outcome IS NOT NULL)),
  CHECK (state <> 'running' OR (claimed_at IS NOT NULL AND attempt > 0))
);
CREATE INDEX team_application_outbox_due ON team_application_outbox (next_attempt_at) WHERE state = 'pending';
