-- Sign-in sessions (packages/identity): short-lived bearer credentials issued by a password sign-in, so a
-- password change is observable (the old password no longer signs in; the new one does). Stored like API
-- keys: SHA-256 of the token's secret under its public lookup id; the token itself exists only in the
-- sign-in answer. Every session expires.
CREATE TABLE identity_sessions (
  lookup_id   text PRIMARY KEY CHECK (lookup_id ~ '^[0-9a-f]{24}$'),
  tenant_id   text NOT NULL,
  account_id  text NOT NULL,
  secret_hash bytea NOT NULL CHECK (length(secret_hash) = 32),
  expires_at  timestamptz NOT NULL,
  revoked_at  timestamptz,
  created_at  timestamptz NOT NULL,
  FOREIGN KEY (tenant_id, account_id) REFERENCES identity_accounts (tenant_id, id)
);
CREATE INDEX identity_sessions_account ON identity_sessions (tenant_id, account_id);
CREATE INDEX identity_sessions_expiry ON identity_sessions (expires_at);
