-- Identity (packages/identity): tenants, accounts, API keys and device credentials.
-- Credentials are stored only as hashes: SHA-256 of the token's secret (32 random
-- bytes), argon2id for passwords. Ids follow the pattern documented in Domain.ts.

CREATE TABLE identity_tenants (
  id         text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE identity_accounts (
  tenant_id     text NOT NULL REFERENCES identity_tenants (id),
  id            text NOT NULL CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  -- Stored lower-cased so that uniqueness per tenant is case-insensitive.
  email         text NOT NULL CHECK (email = lower(email) AND length(email) BETWEEN 3 AND 254),
  enabled       boolean NOT NULL DEFAULT true,
  -- NULL: the account has no password (it authenticates with keys only).
  password_hash text CHECK (password_hash IS NULL OR password_hash LIKE '$argon2id$%'),
  created_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id),
  UNIQUE (tenant_id, email)
);

-- lookup_id is the public middle part of the token `<kind>_<lookup_id>_<secret>`;
-- it is the primary key, so authentication is one indexed read.
CREATE TABLE identity_api_keys (
  lookup_id   text PRIMARY KEY CHECK (lookup_id ~ '^[0-9a-f]{24}$'),
  tenant_id   text NOT NULL,
  account_id  text NOT NULL,
  kind        text NOT NULL CHECK (kind IN ('board', 'agent')),
  name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
  permissions text[] NOT NULL DEFAULT '{}' CHECK (cardinality(permissions) <= 64),
  secret_hash bytea NOT NULL CHECK (length(secret_hash) = 32),
  expires_at  timestamptz,
  revoked_at  timestamptz,
  created_at  timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (tenant_id, account_id) REFERENCES identity_accounts (tenant_id, id)
);
CREATE INDEX identity_api_keys_account ON identity_api_keys (tenant_id, account_id);

CREATE TABLE identity_device_credentials (
  lookup_id   text PRIMARY KEY CHECK (lookup_id ~ '^[0-9a-f]{24}$'),
  tenant_id   text NOT NULL,
  account_id  text NOT NULL,
  device_id   text NOT NULL CHECK (device_id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  secret_hash bytea NOT NULL CHECK (length(secret_hash) = 32),
  expires_at  timestamptz,
  revoked_at  timestamptz,
  created_at  timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (tenant_id, account_id) REFERENCES identity_accounts (tenant_id, id)
);
CREATE INDEX identity_device_credentials_device ON identity_device_credentials (tenant_id, device_id);
