-- Provisioning audit (packages/identity): who created a tenant or an account, disabled or enabled an
-- account, issued or revoked an API key or a device credential, when, and under which request. Each row
-- is written in the same transaction as the change it records, so a committed change always has its
-- row and a refused or rolled-back one never does. Never a token, a secret hash, a password, its hash
-- or an e-mail address: subjects are ids only.

CREATE FUNCTION identity_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
END $$;

CREATE TABLE identity_audit (
  audit_id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant         text        NOT NULL CHECK (tenant ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  action         text        NOT NULL CHECK (action IN (
                   'tenant-create', 'account-create', 'account-disable', 'account-enable',
                   'api-key-issue', 'api-key-revoke', 'device-credential-issue', 'device-credential-revoke')),
  -- The account for account actions; the credential's lookup id (public, printed in its token) for
  -- key and credential actions; the tenant for tenant-create.
  subject        text        NOT NULL CHECK (subject ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  -- unchanged: an idempotent repeat (disabling a disabled account, revoking a revoked key).
  outcome        text        NOT NULL CHECK (outcome IN ('applied', 'unchanged')),
  -- Names the credential kind, never the credential: operator:environment, system:identity.
  actor          text        NOT NULL CHECK (actor ~ '^[a-z][a-z0-9-]{0,31}:[a-z0-9][a-z0-9_.-]{0,63}$'),
  at             timestamptz NOT NULL,
  correlation_id text        NOT NULL CHECK (correlation_id ~ '^[0-9a-f]{32}$')
);
CREATE INDEX identity_audit_tenant ON identity_audit (tenant, at);
CREATE TRIGGER identity_audit_append_only BEFORE UPDATE OR DELETE ON identity_audit
  FOR EACH ROW EXECUTE FUNCTION identity_append_only();
CREATE TRIGGER identity_audit_no_truncate BEFORE TRUNCATE ON identity_audit
  FOR EACH STATEMENT EXECUTE FUNCTION identity_append_only();
