-- Operator console sessions (packages/console). A session is made by exchanging the operator token once; the
-- browser keeps only a random session token in an HttpOnly cookie and this table keeps only its SHA-256, so a
-- copy of the table signs nobody in. Shared by every backend process, so a session works whichever process
-- answers. Rows past their expiry are refused and swept by later sign-ins.
CREATE TABLE console_sessions (
  token_hash bytea       PRIMARY KEY CHECK (octet_length(token_hash) = 32),
  actor      text        NOT NULL CHECK (actor ~ '^[a-z0-9:_-]{1,128}$'),
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL CHECK (expires_at > created_at)
);

CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);
