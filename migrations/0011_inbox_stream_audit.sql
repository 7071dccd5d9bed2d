-- Replay-floor audit (packages/envelope-inbox): who raised (or asked to raise) an inbound stream's
-- replay floor, from what to what, when, and under which request; written in the transaction that
-- changes the floor, also when nothing changed. Append-only like inbox_audit.

CREATE TABLE inbox_stream_audit (
  audit_id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant         text        NOT NULL CHECK (tenant ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  project        text        NOT NULL CHECK (project ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  producer       text        NOT NULL CHECK (producer ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  action         text        NOT NULL CHECK (action IN ('replay-floor-raise')),
  -- unchanged: the requested floor was not above the current one (a floor is never lowered).
  outcome        text        NOT NULL CHECK (outcome IN ('applied', 'unchanged')),
  floor_before   bigint      NOT NULL CHECK (floor_before >= 0),
  floor_after    bigint      NOT NULL CHECK (floor_after >= floor_before),
  requested      bigint      NOT NULL CHECK (requested >= 0),
  actor          text        NOT NULL CHECK (actor ~ '^[a-z][a-z0-9-]{0,31}:[a-z0-9][a-z0-9_.-]{0,63}$'),
  at             timestamptz NOT NULL,
  correlation_id text        NOT NULL CHECK (correlation_id ~ '^[0-9a-f]{32}$')
);
CREATE INDEX inbox_stream_audit_stream ON inbox_stream_audit (tenant, project, producer, at);
CREATE TRIGGER inbox_stream_audit_append_only BEFORE UPDATE OR DELETE ON inbox_stream_audit
  FOR EACH ROW EXECUTE FUNCTION inbox_append_only();
CREATE TRIGGER inbox_stream_audit_no_truncate BEFORE TRUNCATE ON inbox_stream_audit
  FOR EACH STATEMENT EXECUTE FUNCTION inbox_append_only();
