-- Signer (packages/signer): whether a key may verify an envelope now, decided inside the caller's
-- transaction. Verifiers keep a key's public key bytes in process memory (they never change for a
-- registered key id), so the key's state is no longer read before the signature is checked; whoever
-- commits under a signature asks this function in the committing transaction instead, so a revocation or
-- an expiry is honoured by the very next commit, whatever any process has cached.
--
-- The shared advisory lock is the key-management lock of the tenant (SignerRepo.lockTenant takes it
-- exclusively in register, rotate and revoke). Taken shared here, it makes a key change and the commits
-- that depend on the key's state serialize: a revocation in progress is waited for and then seen, and a
-- revocation that starts afterwards waits until the caller has committed. So no envelope is committed
-- under a key after its revocation was acknowledged. Shared holders never wait for each other.
--
-- Answers NULL when the key verifies, else the refusal: key-unknown (no such key in the tenant, for
-- example purged), key-revoked, key-expired (retired and its replay window over at p_at), or
-- key-replaced: the registered key has other public key bytes than the caller verified with (a purged key
-- id registered again), so the caller's cached key is stale and its signature check says nothing.
CREATE FUNCTION signer_key_refusal(p_tenant text, p_key_id text, p_public_key bytea, p_at timestamptz)
RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_public_key bytea;
  v_state text;
  v_verify_until timestamptz;
BEGIN
  PERFORM pg_advisory_xact_lock_shared(72110010, hashtext(p_tenant));
  -- A statement after the lock: inside a VOLATILE function it reads with a fresh snapshot, so it sees a
  -- key change committed while this transaction waited for the lock.
  SELECT k.public_key, k.state, k.verify_until INTO v_public_key, v_state, v_verify_until
  FROM signer_keys k WHERE k.tenant = p_tenant AND k.key_id = p_key_id;
  IF NOT FOUND THEN
    RETURN 'key-unknown';
  ELSIF v_public_key <> p_public_key THEN
    RETURN 'key-replaced';
  ELSIF v_state = 'revoked' THEN
    RETURN 'key-revoked';
  -- Every retired row has its verify_until (a CHECK of signer_keys); were one missing, its window is over.
  ELSIF v_state = 'retired' AND p_at >= COALESCE(v_verify_until, '-infinity'::timestamptz) THEN
    RETURN 'key-expired';
  END IF;
  RETURN NULL;
END $$;

REVOKE ALL ON FUNCTION signer_key_refusal(text, text, bytea, timestamptz) FROM PUBLIC;
