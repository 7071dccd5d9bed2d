-- The retention role (packages/envelope-inbox, InboxRetention): spec 000 "The cleanup query can
-- delete only the payload table". The retention worker runs its DELETE under
-- `SET LOCAL ROLE inbox_retention`, so even a wrong statement there cannot touch identities,
-- streams (cursors, floors) or audit rows: it has no privilege on them.

-- Roles are cluster-wide: several databases of one cluster (tests, tenants' partitions) may migrate at
-- once, so creation tolerates losing that race.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'inbox_retention') THEN
    CREATE ROLE inbox_retention NOLOGIN NOINHERIT;
  END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
  NULL;
END $$;

-- SELECT is needed for the WHERE of the DELETE; nothing else, on nothing else.
GRANT SELECT, DELETE ON inbox_payloads TO inbox_retention;

-- The migrating user runs the backend; it must be able to SET ROLE to the retention role.
-- (A superuser already can; granting to it anyway would only add a catalog row per database.)
DO $$
BEGIN
  IF NOT pg_has_role(current_user, 'inbox_retention', 'MEMBER') THEN
    EXECUTE format('GRANT inbox_retention TO %I', current_user);
  END IF;
END $$;
