-- Who changed which signing key, when, and under which request (packages/signer). Written in the
-- same transaction as the key change it records, so a committed change always has its row and a
-- rolled-back one never does. Never key material: public keys live in signer_keys, private keys
-- in the key source, and neither belongs in an audit trail.
CREATE TABLE signer_key_audit (
  id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant         text        NOT NULL CHECK (tenant ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  key_id         text        NOT NULL CHECK (key_id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  -- retire: the previously active key, retired by a rotation (same correlation id as the rotate row);
  -- purge: a revoked key deleted by the sweep once its replay window had passed.
  action         text        NOT NULL CHECK (action IN ('register', 'rotate', 'retire', 'revoke', 'purge')),
  -- unchanged: an idempotent repeat (same key registered or rotated to again, revoked again).
  outcome        text        NOT NULL CHECK (outcome IN ('applied', 'unchanged')),
  -- Names the credential kind, never the credential: e.g. operator:environment, system:signer-purge.
  actor          text        NOT NULL CHECK (actor ~ '^[a-z][a-z0-9-]{0,31}:[a-z0-9][a-z0-9_.-]{0,63}$'),
  at             timestamptz NOT NULL,
  correlation_id text        NOT NULL CHECK (correlation_id ~ '^[A-Za-z0-9._:-]{1,64}$')
);

CREATE INDEX signer_key_audit_by_key ON signer_key_audit (tenant, key_id, at);
