-- Spec 002's migration 0078: the team-application outbox's rows move onto effect_queue, the table of Effect's
-- PersistedQueue SQL store, with their ids, statuses and attempt counts. From here on the queue owns the lease, the
-- attempt count and the retry delay; the outbox keeps identity, envelope, policy state and outcome.
--
-- effect_queue has every column of `@effect/sql`'s SqlPersistedQueue table (sequence, id, queue_name, element,
-- completed, attempts, last_failure, acquired_at, acquired_by, created_at, updated_at) and what its project-owned
-- store needs besides (docs/team-applications.md): a retry delay (available_at), a lease deadline
-- (lease_expires_at), an exhausted state and the time an item ended (ended_at, for the 30-day clean-up).
-- attempts counts claims: an attempt is used up when it starts, so a process killed mid-attempt used one.
CREATE TABLE effect_queue (
  sequence         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id               text NOT NULL CHECK (length(id) BETWEEN 1 AND 128),
  queue_name       text NOT NULL CHECK (length(queue_name) BETWEEN 1 AND 100),
  element          text NOT NULL,
  completed        boolean NOT NULL DEFAULT false,
  exhausted        boolean NOT NULL DEFAULT false,
  attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  last_failure     text CHECK (last_failure ~ '^[a-z0-9-]{1,64}$'),
  available_at     timestamptz NOT NULL,
  acquired_at      timestamptz,
  acquired_by      uuid,
  lease_expires_at timestamptz,
  ended_at         timestamptz,
  created_at       timestamptz NOT NULL,
  updated_at       timestamptz NOT NULL,
  CHECK (NOT (completed AND exhausted)),
  CHECK ((completed OR exhausted) = (ended_at IS NOT NULL)),
  CHECK ((acquired_at IS NULL) = (lease_expires_at IS NULL)),
  CHECK (ended_at IS NULL OR acquired_at IS NULL)
);
CREATE UNIQUE INDEX effect_queue_id ON effect_queue (id);
CREATE INDEX effect_queue_take ON effect_queue (queue_name, available_at, sequence) WHERE NOT completed AND NOT exhausted;
CREATE INDEX effect_queue_ended ON effect_queue (queue_name, ended_at) WHERE completed OR exhausted;

-- pending stays pending (due at its next_attempt_at); running keeps its lease, which ends where the first shape's
-- 60-second stale-claim rule ended it; done is completed (an exhausted outcome is the queue's exhausted state).
INSERT INTO effect_queue (
  id, queue_name, element, completed, exhausted, attempts, last_failure, available_at,
  acquired_at, acquired_by, lease_expires_at, ended_at, created_at, updated_at
)
SELECT
  o.effect_id::text,
  'team-application-notifications',
  json_build_object('effect', o.effect_id::text)::text,
  o.state = 'done' AND o.outcome <> 'exhausted',
  o.state = 'done' AND o.outcome = 'exhausted',
  o.attempt,
  o.last_error,
  o.next_attempt_at,
  CASE WHEN o.state = 'running' THEN o.claimed_at END,
  NULL,
  CASE WHEN o.state = 'running' THEN o.claimed_at + interval '60 seconds' END,
  CASE WHEN o.state = 'done' THEN o.outcome_at END,
  o.created_at,
  COALESCE(o.outcome_at, o.claimed_at, o.created_at)
FROM team_application_outbox o
ORDER BY o.created_at, o.effect_id;
