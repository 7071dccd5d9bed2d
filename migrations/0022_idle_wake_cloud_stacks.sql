-- Idle wake (packages/idle-wake/src/cloud), cloud side: the stacks the cloud puts to sleep and wakes, its verified
-- host registry and the audit of every change. Spec 001: "Cloud stores the final receipt in one internal stack column
-- under the sleep operation lock"; "a restarted host reads the durable receipt".
--
-- The sleep operation lock is a lease on the stack row: a sleep cycle claims the row (state awake → draining,
-- op_attempt + 1, a lease deadline) and every later step of that cycle is fenced by `op_attempt = $claimed`, so a
-- cloud process that lost its lease (suspended, killed, slow) can change nothing. Wakes are fenced the same way by
-- wake_attempt. Both attempts only ever grow.

CREATE TABLE idle_wake_cloud_stacks (
  id                    text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  -- What the drain assertions name and how the tenant's reports are verified.
  audience              text NOT NULL CHECK (length(audience) BETWEEN 1 AND 256 AND audience ~ '^[\x21-\x7e]+$'),
  report_key_id         text NOT NULL CHECK (report_key_id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  report_public_key     text NOT NULL CHECK (report_public_key ~ '^[A-Za-z0-9_-]{43}$'),
  -- The incoming-wake profiles the cloud asks for in each cycle (none: versions 1/2, conservative).
  profiles              text[] NOT NULL CHECK (profiles <@ ARRAY['tenant-api-http-v2', 'github-broker-events-v1']::text[]),
  -- Where the compute listens, refreshed by every start (routing).
  upstream              text,
  state                 text NOT NULL CHECK (state IN (
                          'awake', 'draining', 'stopping', 'stop-uncertain', 'asleep', 'waking', 'suspended', 'archived')),
  -- A deployment recovery hold: no wake while it is set (awake stacks are still forwarded to).
  recovery_hold         boolean NOT NULL DEFAULT false,
  op_attempt            integer NOT NULL DEFAULT 0 CHECK (op_attempt >= 0),
  op_lease_expires_at   timestamptz,
  wake_attempt          integer NOT NULL DEFAULT 0 CHECK (wake_attempt >= 0),
  wake_lease_expires_at timestamptz,
  -- The final incoming proof of the cycle that put the stack to sleep: the receipt wakes are matched against.
  receipt               jsonb,
  receipt_stored_at     timestamptz,
  state_changed_at      timestamptz NOT NULL,
  created_at            timestamptz NOT NULL,
  CHECK ((receipt IS NULL) = (receipt_stored_at IS NULL)),
  -- Only these states can hold a receipt; awake, suspended and archived stacks never do.
  CHECK (receipt IS NULL OR state IN ('stopping', 'stop-uncertain', 'asleep', 'waking'))
);

-- The verified host registry: every host was registered by an operator for exactly one stack. The proxy resolves a
-- target from this table alone (never from a header, a path or a forwarded value).
CREATE TABLE idle_wake_cloud_hosts (
  host       text PRIMARY KEY CHECK (host ~ '^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$'),
  stack_id   text NOT NULL REFERENCES idle_wake_cloud_stacks (id),
  created_at timestamptz NOT NULL
);
CREATE INDEX idle_wake_cloud_hosts_stack ON idle_wake_cloud_hosts (stack_id);

-- One row per change, in the change's transaction: codes and ids only, never a key, a token or a proof's fingerprints.
CREATE TABLE idle_wake_cloud_audit (
  id             bigserial PRIMARY KEY,
  stack_id       text NOT NULL,
  action         text NOT NULL,
  detail         jsonb NOT NULL DEFAULT '{}'::jsonb,
  correlation_id text,
  at             timestamptz NOT NULL
);
CREATE INDEX idle_wake_cloud_audit_stack ON idle_wake_cloud_audit (stack_id, id);

-- Every cloud process keeps a routing cache of hosts and states; a change committed by any of them reaches the others
-- at commit (NOTIFY is transactional), so an awake stack is forwarded to without a query per request.
CREATE FUNCTION idle_wake_cloud_route_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('idle_wake_cloud_routes', CASE WHEN TG_OP = 'DELETE' THEN OLD.stack_id ELSE NEW.stack_id END);
  RETURN NULL;
END $$;

CREATE FUNCTION idle_wake_cloud_stack_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('idle_wake_cloud_routes', NEW.id);
  RETURN NULL;
END $$;

CREATE TRIGGER idle_wake_cloud_hosts_notify AFTER INSERT OR UPDATE OR DELETE ON idle_wake_cloud_hosts
  FOR EACH ROW EXECUTE FUNCTION idle_wake_cloud_route_changed();
CREATE TRIGGER idle_wake_cloud_stacks_notify AFTER INSERT OR UPDATE ON idle_wake_cloud_stacks
  FOR EACH ROW EXECUTE FUNCTION idle_wake_cloud_stack_changed();
