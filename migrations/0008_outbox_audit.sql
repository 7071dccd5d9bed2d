-- Operator actions on the outbox (packages/outbox): target registration/replacement and dead-letter
-- redrive. Each row is written in the same transaction as the change it records. It names the
-- actor and stable codes only: never a credential, an endpoint URL, a receiver response or a payload.
CREATE TABLE outbox_audit (
  audit_id   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant     text        NOT NULL CHECK (tenant ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  project    text        NOT NULL CHECK (project ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  action     text        NOT NULL CHECK (action IN ('target-registered', 'target-replaced', 'redrive')),
  message_id uuid        REFERENCES outbox_messages (id),
  actor      text        NOT NULL CHECK (actor ~ '^[a-z0-9:_-]{1,128}$'),
  -- redrive: the attempt counter and stable dead-letter code at the time of the redrive.
  attempt    integer,
  detail     text        CHECK (detail ~ '^[a-z0-9-]{1,64}$'),
  at         timestamptz NOT NULL,
  CHECK ((action = 'redrive') = (message_id IS NOT NULL))
);

CREATE INDEX outbox_audit_scope ON outbox_audit (tenant, project, at);
