-- Password-reset verifications (packages/identity): spec 002's canonical verification ("auth.verification").
-- The reset token stays here and nowhere else, but never in the clear: `token_sealed` is AES-256-GCM under a key
-- derived from PASSWORD_RESET_TOKEN_KEY (12-byte nonce || ciphertext || 16-byte tag, the row id as associated
-- data, so a sealed token cannot be moved to another row), and `token_lookup` is HMAC-SHA256 of the token under
-- a second derived key, so completion finds the row in one indexed read. A dump of the database without the
-- environment's key reveals no live token.
CREATE TABLE identity_reset_verifications (
  id           uuid PRIMARY KEY,
  tenant_id    text NOT NULL,
  account_id   text NOT NULL,
  token_lookup bytea NOT NULL UNIQUE CHECK (length(token_lookup) = 32),
  token_sealed bytea NOT NULL CHECK (length(token_sealed) BETWEEN 29 AND 256),
  expires_at   timestamptz NOT NULL,
  -- Set once, by the completion that used the token (or by a completion of another of the account's
  -- verifications, which ends them all); delivery never sets it.
  consumed_at  timestamptz,
  created_at   timestamptz NOT NULL,
  CHECK (expires_at > created_at),
  FOREIGN KEY (tenant_id, account_id) REFERENCES identity_accounts (tenant_id, id)
);
CREATE INDEX identity_reset_verifications_account ON identity_reset_verifications (tenant_id, account_id)
  WHERE consumed_at IS NULL;

-- A completed reset is an audited change of the account, like the operator's.
ALTER TABLE identity_audit DROP CONSTRAINT identity_audit_action_check;
ALTER TABLE identity_audit ADD CONSTRAINT identity_audit_action_check CHECK (action IN (
  'tenant-create', 'account-create', 'account-disable', 'account-enable',
  'api-key-issue', 'api-key-revoke', 'device-credential-issue', 'device-credential-revoke',
  'password-reset'));
