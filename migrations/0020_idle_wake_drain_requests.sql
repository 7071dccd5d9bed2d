-- Idle wake (packages/idle-wake), tenant side: the one-use request ids of the cloud's signed drain assertions
-- (spec 001: "the tenant verifies the existing stack, action, audience, expiry and one-use request ID"). A request id
-- is recorded, and committed, before the report is made; a second assertion with the same id is a replay whatever
-- else it says. Rows whose assertion has long expired are deleted in small batches by later drain reads: an expired
-- assertion is refused before its request id is looked at, so nothing is lost by forgetting it.

CREATE TABLE idle_wake_drain_requests (
  request_id  text PRIMARY KEY CHECK (request_id ~ '^[A-Za-z0-9_-]{16,64}$'),
  stack       text NOT NULL CHECK (stack ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  phase       text NOT NULL CHECK (phase IN ('initial', 'final', 'release')),
  key_id      text NOT NULL CHECK (key_id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  expires_at  timestamptz NOT NULL,
  received_at timestamptz NOT NULL,
  correlation_id text NOT NULL CHECK (correlation_id ~ '^[0-9a-f]{32}$')
);
CREATE INDEX idle_wake_drain_requests_expiry ON idle_wake_drain_requests (expires_at);
