-- Tenant-scoped Ed25519 verification keys (packages/signer). Public keys only: private keys stay
-- in the signing key source (environment, file or KMS) and never reach the database.
CREATE TABLE signer_keys (
  tenant       text        NOT NULL CHECK (tenant ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  key_id       text        NOT NULL CHECK (key_id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  -- Raw 32-byte Ed25519 public key (RFC 8032).
  public_key   bytea       NOT NULL CHECK (octet_length(public_key) = 32),
  state        text        NOT NULL CHECK (state IN ('active', 'retired', 'revoked')),
  created_at   timestamptz NOT NULL,
  retired_at   timestamptz,
  revoked_at   timestamptz,
  -- End (exclusive) of the retention+replay window of a retired or revoked key: a retired key
  -- verifies until then, a revoked key is purged after it. An active key has no end.
  verify_until timestamptz,
  PRIMARY KEY (tenant, key_id),
  CHECK ((state = 'active') = (verify_until IS NULL)),
  CHECK (state <> 'retired' OR retired_at IS NOT NULL),
  CHECK (state <> 'revoked' OR revoked_at IS NOT NULL)
);

-- One signing key per tenant, so which key signs is never ambiguous.
CREATE UNIQUE INDEX signer_keys_one_active ON signer_keys (tenant) WHERE state = 'active';

-- The purge sweep reads revoked keys by the end of their window.
CREATE INDEX signer_keys_revoked_until ON signer_keys (verify_until) WHERE state = 'revoked';
