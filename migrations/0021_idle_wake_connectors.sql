-- Idle wake (packages/idle-wake), tenant side: the GitHub connector state that the github-broker-events-v1 proof is
-- reconstructed from (spec 001: "The signed proof binds the current enrolled connector instance and canonical
-- fingerprint of all current GitHub bindings"). Written by Connectors.ts, one transaction per change with its audit
-- row; read by the drain in its read-only snapshot.
--
-- Deliberately NO foreign keys between these tables. Rows written by older writers can be missing, dangling or
-- inconsistent, and spec 001 wants "missing, foreign, changed, unsupported or unsettled binding state" to prevent
-- sleep rather than be impossible to represent: ConnectorBindings.ts checks every link itself (endpoint → instance,
-- connection, registration, channel connection; tenant and owner of each) and turns each broken one into a blocker.
-- For the same reason kinds and transports are plain text: a value this writer never produces is "unsupported".
--
-- Credential columns hold opaque references (`vault:github-endpoint/<id>`), never a secret; the removal writer
-- clears them, and a removed endpoint still holding one is not retained history.

-- The connector instance the cloud's durable connector queue delivers to. At most one is enrolled; enrolling another
-- retires it, and a retired id never comes back (its events could be replayed to a different instance).
CREATE TABLE idle_wake_connector_instances (
  id          text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  generation  integer NOT NULL CHECK (generation >= 1),
  state       text NOT NULL CHECK (state IN ('enrolled', 'retired')),
  enrolled_at timestamptz NOT NULL,
  retired_at  timestamptz,
  CHECK ((state = 'retired') = (retired_at IS NOT NULL))
);
CREATE UNIQUE INDEX idle_wake_connector_instances_one_enrolled ON idle_wake_connector_instances (state)
  WHERE state = 'enrolled';

-- GitHub connections: `owner` is the original connection-event owner (an account id), which every bot registration
-- of the connection must repeat. The writer creates kinds 'broker' and 'personal-mcp'.
CREATE TABLE idle_wake_github_connections (
  id         text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  tenant_id  text NOT NULL,
  kind       text NOT NULL,
  owner      text NOT NULL,
  removed_at timestamptz,
  created_at timestamptz NOT NULL
);

-- GitHub bot registrations of a connection: tenant and owner are copied from the connection when it starts, so
-- "exact completed GitHub bot registration ownership" can be compared, not assumed.
CREATE TABLE idle_wake_github_bot_registrations (
  id              text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  tenant_id       text NOT NULL,
  connection_id   text NOT NULL,
  owner           text NOT NULL,
  app_id          bigint NOT NULL,
  installation_id bigint,
  state           text NOT NULL CHECK (state IN ('pending', 'completed', 'failed')),
  completed_at    timestamptz,
  created_at      timestamptz NOT NULL
);
CREATE INDEX idle_wake_github_bot_registrations_connection ON idle_wake_github_bot_registrations (connection_id);

-- Channel connections: the endpoint's paired, same-tenant channel connection.
CREATE TABLE idle_wake_channel_connections (
  id             text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  tenant_id      text NOT NULL,
  transport      text NOT NULL,
  endpoint_id    text,
  enabled        boolean NOT NULL,
  credential_ref text,
  archived_at    timestamptz,
  created_at     timestamptz NOT NULL
);

-- Endpoints: one GitHub binding each while not archived. An archived endpoint is retained history only when the
-- removal writer archived it at its generation (archived_generation = generation) and finished the cleanup.
CREATE TABLE idle_wake_github_endpoints (
  id                    text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  tenant_id             text NOT NULL,
  transport             text NOT NULL DEFAULT 'github',
  connector_instance_id text NOT NULL,
  connection_id         text NOT NULL,
  registration_id       text,
  channel_connection_id text NOT NULL,
  generation            integer NOT NULL CHECK (generation >= 1),
  credential_ref        text,
  archived_at           timestamptz,
  archived_generation   integer,
  created_at            timestamptz NOT NULL
);
CREATE INDEX idle_wake_github_endpoints_connection ON idle_wake_github_endpoints (connection_id) WHERE archived_at IS NULL;

-- Endpoint leases: an unreleased, unexpired lease is delivery in progress on the endpoint; the removal writer
-- releases every unreleased one.
CREATE TABLE idle_wake_endpoint_leases (
  endpoint_id text NOT NULL,
  holder      text NOT NULL CHECK (length(holder) BETWEEN 1 AND 128),
  acquired_at timestamptz NOT NULL,
  expires_at  timestamptz NOT NULL CHECK (expires_at > acquired_at),
  released_at timestamptz,
  PRIMARY KEY (endpoint_id, holder, acquired_at)
);
CREATE INDEX idle_wake_endpoint_leases_unreleased ON idle_wake_endpoint_leases (endpoint_id) WHERE released_at IS NULL;

-- One row per change, written in the change's transaction: a committed change always has its row, a refused or
-- rolled-back one never does. Subjects are ids only.
CREATE TABLE idle_wake_connector_audit (
  audit_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  action         text NOT NULL CHECK (action IN (
                   'instance-enrolled', 'instance-retired', 'connection-added', 'connection-removed',
                   'registration-started', 'registration-completed', 'endpoint-added', 'endpoint-removed',
                   'lease-acquired', 'lease-renewed', 'lease-released')),
  -- The changed row's id; for lease actions `<endpoint id>/<holder>`.
  subject        text NOT NULL CHECK (length(subject) BETWEEN 1 AND 200),
  -- Names the credential kind, never the credential: operator:environment.
  actor          text NOT NULL CHECK (actor ~ '^[a-z][a-z0-9-]{0,31}:[a-z0-9][a-z0-9_.-]{0,63}$'),
  correlation_id text NOT NULL CHECK (correlation_id ~ '^[0-9a-f]{32}$'),
  at             timestamptz NOT NULL
);
CREATE FUNCTION idle_wake_connector_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
END $$;
CREATE TRIGGER idle_wake_connector_audit_append_only BEFORE UPDATE OR DELETE ON idle_wake_connector_audit
  FOR EACH ROW EXECUTE FUNCTION idle_wake_connector_audit_append_only();
CREATE TRIGGER idle_wake_connector_audit_no_truncate BEFORE TRUNCATE ON idle_wake_connector_audit
  FOR EACH STATEMENT EXECUTE FUNCTION idle_wake_connector_audit_append_only();
