-- Password-reset mail outbox (packages/reset-mail), in its first shape: without the payload fingerprint, which
-- 0015 adds (spec 002's "Migration 68"). A row names the verification to mail and nothing else: no e-mail
-- address, no token, no message body. Every attempt reads them live from the verification and its account.
CREATE TABLE reset_mail_outbox (
  id              uuid PRIMARY KEY,
  verification_id uuid NOT NULL,
  tenant_id       text NOT NULL CHECK (tenant_id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
  -- pending: due at next_attempt_at; sending: claimed (attempt is the claim's fence); delivered: the provider
  -- acknowledged (2xx); rejected: the provider refused (4xx); quarantined: the outcome is unknown or the payload
  -- changed, a new user request is the remedy; stopped: the verification expired, was consumed or is gone, or
  -- the account was disabled.
  state           text NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'sending', 'delivered', 'rejected', 'quarantined', 'stopped')),
  attempt         integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
  next_attempt_at timestamptz NOT NULL,
  claimed_at      timestamptz,
  lease_owner     text CHECK (length(lease_owner) <= 128),
  -- Why a row is rejected, quarantined or stopped: a stable code, never a provider body.
  reason          text CHECK (reason ~ '^[a-z0-9-]{1,64}$'),
  -- The last temporary failure's code, kept while the row waits for its retry.
  last_error      text CHECK (last_error ~ '^[a-z0-9-]{1,64}$'),
  provider_status integer CHECK (provider_status BETWEEN 100 AND 599),
  created_at      timestamptz NOT NULL,
  updated_at      timestamptz NOT NULL,
  CHECK ((state IN ('rejected', 'quarantined', 'stopped')) = (reason IS NOT NULL)),
  CHECK (state <> 'sending' OR (claimed_at IS NOT NULL AND attempt > 0))
);
CREATE INDEX reset_mail_outbox_due ON reset_mail_outbox (next_attempt_at) WHERE state = 'pending';
CREATE INDEX reset_mail_outbox_claims ON reset_mail_outbox (claimed_at) WHERE state = 'sending';
CREATE INDEX reset_mail_outbox_ended ON reset_mail_outbox (state, reason, id)
  WHERE state IN ('rejected', 'quarantined', 'stopped');
