-- Spec 002's migration 0079: the outbox's own claim columns are dropped; its rows keep identity, envelope, policy
-- state and outcome, and effect_queue (0018) owns lease, attempts and retry delay.
DROP INDEX team_application_outbox_due;
ALTER TABLE team_application_outbox
  DROP COLUMN state,
  DROP COLUMN attempt,
  DROP COLUMN next_attempt_at,
  DROP COLUMN claimed_at,
  DROP COLUMN lease_owner;

-- A notification's delivery state from both rows: its outcome once it has one (kept by the outbox, so it survives
-- the queue's clean-up), otherwise `processing` while an attempt holds the lease, `failed` while a retry waits
-- (an earlier attempt failed or lost its lease), `pending` before the first attempt.
CREATE VIEW team_application_delivery_state AS
SELECT
  o.effect_id,
  o.application_id,
  o.tenant_id,
  o.audience,
  CASE
    WHEN o.outcome IS NOT NULL THEN o.outcome
    WHEN q.sequence IS NULL THEN 'missing'
    WHEN q.lease_expires_at > now() THEN 'processing'
    WHEN q.attempts > 0 THEN 'failed'
    ELSE 'pending'
  END AS state,
  COALESCE(o.outcome_attempt, q.attempts, 0) AS attempts,
  CASE WHEN o.outcome IS NULL AND q.attempts > 0 AND COALESCE(q.lease_expires_at <= now(), true)
    THEN GREATEST(q.available_at, q.lease_expires_at) END AS next_attempt_at,
  CASE WHEN o.outcome IS NULL THEN q.lease_expires_at END AS lease_expires_at,
  o.failures,
  o.last_error,
  o.outcome_at,
  o.created_at
FROM team_application_outbox o
LEFT JOIN effect_queue q ON q.id = o.effect_id::text AND q.queue_name = 'team-application-notifications';
