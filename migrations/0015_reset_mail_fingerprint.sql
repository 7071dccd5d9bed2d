-- Spec 002's "Migration 68": the non-secret fingerprint (SHA-256, lower-case hex, of the exact request body the
-- first attempt rendered), stored before that attempt's provider I/O and compared on every retry.
ALTER TABLE reset_mail_outbox
  ADD COLUMN fingerprint text CHECK (fingerprint ~ '^[0-9a-f]{64}$');

-- A row attempted under the old shape has no trustworthy original fingerprint: a retry could send a payload
-- different from the one already sent under its Idempotency-Key. Such rows that had not ended are quarantined;
-- rows never attempted stay eligible and get their fingerprint on their first attempt. Delivered and otherwise
-- ended rows, and the verifications, are left as they are.
UPDATE reset_mail_outbox
SET state = 'quarantined', reason = 'fingerprint-unknown', lease_owner = NULL, updated_at = now()
WHERE attempt > 0 AND state IN ('pending', 'sending');

-- From now on a delivered row has the fingerprint of what it sent (the rows delivered before are not checked).
ALTER TABLE reset_mail_outbox ADD CONSTRAINT reset_mail_outbox_delivered_fingerprint
  CHECK (state <> 'delivered' OR fingerprint IS NOT NULL) NOT VALID;
