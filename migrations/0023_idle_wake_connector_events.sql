-- Idle wake, github-broker-events-v1 (spec 001): "Broker events have stronger persistence: the existing queue target
-- survives a lost wake hint, failed wake, process restart and lease expiry. A 202 hint does not settle delivery. Only
-- the current event lease acknowledgment does. Duplicate transport delivery uses the domain's existing
-- receipts/atomic claims."

-- Cloud side: the durable connector event queue. An event is committed before the broker's 202; a delivery worker
-- claims it with a lease (attempt + 1), wakes the stack when its receipt binds the event's connector instance, and
-- records the outcome fenced by `attempt = $claimed`. (stack_id, delivery_id) absorbs a transport's duplicates.
CREATE TABLE idle_wake_cloud_connector_events (
  id                 uuid PRIMARY KEY,
  stack_id           text NOT NULL REFERENCES idle_wake_cloud_stacks (id),
  connector_instance text NOT NULL CHECK (connector_instance ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  endpoint_id        text NOT NULL CHECK (endpoint_id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  delivery_id        text NOT NULL CHECK (delivery_id ~ '^[A-Za-z0-9-]{1,64}$'),
  event              text NOT NULL CHECK (event ~ '^[a-z_]{1,64}$'),
  payload            bytea NOT NULL,
  -- GitHub's X-Hub-Signature-256 as received: the tenant verifies it on delivery.
  github_signature   text NOT NULL CHECK (github_signature ~ '^sha256=[0-9a-f]{64}$'),
  state              text NOT NULL CHECK (state IN ('pending', 'delivered', 'dead')),
  attempt            integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
  -- Failed deliveries only (a claim that found the stack waking is not one): the backoff's exponent.
  failures           integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
  available_at       timestamptz NOT NULL,
  lease_expires_at   timestamptz,
  last_code          text,
  received_at        timestamptz NOT NULL,
  settled_at         timestamptz,
  UNIQUE (stack_id, delivery_id),
  CHECK ((state = 'pending') = (settled_at IS NULL))
);
CREATE INDEX idle_wake_cloud_connector_events_due ON idle_wake_cloud_connector_events (available_at) WHERE state = 'pending';

-- Tenant side: the events a stack received, one row per event id (the cloud's) and per GitHub delivery id: the receipt
-- that makes a redelivery a duplicate, whatever the cloud's attempt.
CREATE TABLE idle_wake_connector_events (
  event_id           uuid PRIMARY KEY,
  delivery_id        text NOT NULL UNIQUE,
  connector_instance text NOT NULL,
  endpoint_id        text NOT NULL,
  event              text NOT NULL,
  payload            bytea NOT NULL,
  cloud_attempt      integer NOT NULL,
  received_at        timestamptz NOT NULL
);
