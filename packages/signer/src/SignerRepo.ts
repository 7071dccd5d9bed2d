import { storageErrors } from "@delivery/core"
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import {
  KeyAuditAction,
  KeyAuditEntry,
  KeyChangeOutcome,
  KeyId,
  KeyState,
  RawPublicKey,
  SignerStorageUnavailable,
  SigningKey,
  TenantId
} from "./Domain.ts"

// SQL only; private to the package. Statements use `.withoutTransform` so these row shapes hold
// whatever name transforms the backend's pool is configured with. Times are parameters taken
// from Effect's Clock, never the database's now(), so TestClock drives expiry in tests.

const KeyRow = Schema.Struct({
  tenant: Schema.String,
  key_id: Schema.String,
  public_key: Schema.Uint8ArrayFromSelf,
  state: KeyState,
  created_at: Schema.DateFromSelf,
  retired_at: Schema.NullOr(Schema.DateFromSelf),
  revoked_at: Schema.NullOr(Schema.DateFromSelf),
  verify_until: Schema.NullOr(Schema.DateFromSelf)
})
type KeyRow = typeof KeyRow.Type

const toKey = (row: KeyRow) =>
  new SigningKey({
    tenant: TenantId.make(row.tenant),
    keyId: KeyId.make(row.key_id),
    publicKey: RawPublicKey.make(new Uint8Array(row.public_key)),
    state: row.state,
    createdAt: row.created_at,
    retiredAt: row.retired_at,
    revokedAt: row.revoked_at,
    verifyUntil: row.verify_until
  })

const KeyRef = Schema.Struct({ tenant: Schema.String, keyId: Schema.String })
const Attribution = Schema.Struct({ actor: Schema.String, correlationId: Schema.String })

/** Database failures become `SignerStorageUnavailable` (see core's `storageErrors`). */
export const storage = (operation: string) =>
  storageErrors(operation, () => new SignerStorageUnavailable({ operation }))

// Key management of one tenant is serialized on this advisory lock (first argument: the signer's
// lock class), because the first registration has no row yet that FOR UPDATE could lock.
const LOCK_CLASS = 72_110_010

export class SignerRepo extends Effect.Service<SignerRepo>()("@delivery/signer/SignerRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    const find = SqlSchema.findOne({
      Request: KeyRef,
      Result: KeyRow,
      execute: (r) => sql`SELECT * FROM signer_keys WHERE tenant = ${r.tenant} AND key_id = ${r.keyId}`.withoutTransform
    })

    const findActive = SqlSchema.findOne({
      Request: Schema.String,
      Result: KeyRow,
      execute: (tenant) => sql`SELECT * FROM signer_keys WHERE tenant = ${tenant} AND state = 'active'`.withoutTransform
    })

    const insertActive = SqlSchema.single({
      Request: Schema.Struct({ ...KeyRef.fields, publicKey: Schema.Uint8ArrayFromSelf, now: Schema.DateFromSelf }),
      Result: KeyRow,
      execute: (r) => sql`
        INSERT INTO signer_keys (tenant, key_id, public_key, state, created_at)
        VALUES (${r.tenant}, ${r.keyId}, ${r.publicKey}, 'active', ${r.now})
        RETURNING *`.withoutTransform
    })

    const retireActive = SqlSchema.findAll({
      Request: Schema.Struct({ tenant: Schema.String, now: Schema.DateFromSelf, verifyUntil: Schema.DateFromSelf }),
      Result: KeyRow,
      execute: (r) => sql`
        UPDATE signer_keys SET state = 'retired', retired_at = ${r.now}, verify_until = ${r.verifyUntil}
        WHERE tenant = ${r.tenant} AND state = 'active'
        RETURNING *`.withoutTransform
    })

    // A retired key stopped signing when it was retired, so its window already ends in time;
    // an active key signed until now, so its window starts now.
    const revoke = SqlSchema.findOne({
      Request: Schema.Struct({ ...KeyRef.fields, now: Schema.DateFromSelf, verifyUntil: Schema.DateFromSelf }),
      Result: KeyRow,
      execute: (r) => sql`
        UPDATE signer_keys
        SET state = 'revoked', revoked_at = ${r.now}, verify_until = COALESCE(verify_until, ${r.verifyUntil})
        WHERE tenant = ${r.tenant} AND key_id = ${r.keyId} AND state <> 'revoked'
        RETURNING *`.withoutTransform
    })

    const listForTenant = SqlSchema.findAll({
      Request: Schema.String,
      Result: KeyRow,
      execute: (tenant) =>
        sql`SELECT * FROM signer_keys WHERE tenant = ${tenant} ORDER BY created_at, key_id`.withoutTransform
    })

    // One statement deletes the batch and writes its audit rows: a purge is never committed unaudited.
    // (A data-modifying CTE runs exactly once whether or not the outer query reads it.)
    const purgeRevoked = SqlSchema.findAll({
      Request: Schema.Struct({ now: Schema.DateFromSelf, limit: Schema.Number, ...Attribution.fields }),
      Result: Schema.Struct({ tenant: Schema.String, key_id: Schema.String }),
      execute: (r) => sql`
        WITH purged AS (
          DELETE FROM signer_keys
          WHERE (tenant, key_id) IN (
            SELECT tenant, key_id FROM signer_keys
            WHERE state = 'revoked' AND verify_until <= ${r.now}
            ORDER BY verify_until LIMIT ${r.limit}
            FOR UPDATE SKIP LOCKED)
          RETURNING tenant, key_id
        ), audited AS (
          INSERT INTO signer_key_audit (tenant, key_id, action, outcome, actor, at, correlation_id)
          SELECT tenant, key_id, 'purge', 'applied', ${r.actor}, ${r.now}, ${r.correlationId} FROM purged
        )
        SELECT tenant, key_id FROM purged`.withoutTransform
    })

    // A tenant's key changes, newest first, bounded: rotations are rare, so this reaches back a long way.
    const auditForTenant = SqlSchema.findAll({
      Request: Schema.Struct({ tenant: Schema.String, limit: Schema.Number }),
      Result: Schema.Struct({
        key_id: Schema.String,
        action: KeyAuditAction,
        outcome: KeyChangeOutcome,
        actor: Schema.String,
        at: Schema.DateFromSelf,
        correlation_id: Schema.String
      }),
      execute: (r) => sql`
        SELECT key_id, action, outcome, actor, at, correlation_id FROM signer_key_audit
        WHERE tenant = ${r.tenant} ORDER BY at DESC, id DESC LIMIT ${r.limit}`.withoutTransform
    })

    const insertAudit = SqlSchema.void({
      Request: Schema.Struct({
        ...KeyRef.fields,
        action: KeyAuditAction,
        outcome: KeyChangeOutcome,
        at: Schema.DateFromSelf,
        ...Attribution.fields
      }),
      execute: (r) => sql`
        INSERT INTO signer_key_audit (tenant, key_id, action, outcome, actor, at, correlation_id)
        VALUES (${r.tenant}, ${r.keyId}, ${r.action}, ${r.outcome}, ${r.actor}, ${r.at}, ${r.correlationId})`
        .withoutTransform
    })

    return {
      /** Inside a transaction: holds the tenant's key-management lock until commit. */
      lockTenant: (tenant: string) =>
        storage("lockTenant")(sql`SELECT pg_advisory_xact_lock(${LOCK_CLASS}, hashtext(${tenant}))`.withoutTransform),
      find: (tenant: string, keyId: string) => storage("find")(Effect.map(find({ tenant, keyId }), Option.map(toKey))),
      findActive: (tenant: string) => storage("findActive")(Effect.map(findActive(tenant), Option.map(toKey))),
      insertActive: (r: { tenant: string; keyId: string; publicKey: Uint8Array; now: Date }) =>
        // INSERT ... RETURNING without a row is impossible: a defect, not an outcome.
        storage("insertActive")(
          Effect.map(Effect.catchTag(insertActive(r), "NoSuchElementException", Effect.die), toKey)
        ),
      listForTenant: (tenant: string) =>
        storage("listForTenant")(Effect.map(listForTenant(tenant), (rows) => rows.map(toKey))),
      auditForTenant: (tenant: string, limit: number) =>
        storage("auditForTenant")(Effect.map(auditForTenant({ tenant, limit }), (rows) =>
          rows.map((row) =>
            new KeyAuditEntry({
              keyId: KeyId.make(row.key_id),
              action: row.action,
              outcome: row.outcome,
              actor: row.actor,
              at: row.at,
              correlationId: row.correlation_id
            })
          ))),
      retireActive: (r: { tenant: string; now: Date; verifyUntil: Date }) =>
        storage("retireActive")(Effect.map(retireActive(r), (rows) => rows.map(toKey))),
      revoke: (r: { tenant: string; keyId: string; now: Date; verifyUntil: Date }) =>
        storage("revoke")(Effect.map(revoke(r), Option.map(toKey))),
      purgeRevoked: (r: { now: Date; limit: number; actor: string; correlationId: string }) =>
        storage("purgeRevoked")(
          Effect.map(purgeRevoked(r), (rows) =>
            rows.map((row) => ({ tenant: TenantId.make(row.tenant), keyId: KeyId.make(row.key_id) })))
        ),
      /** Inside the key change's transaction, so the change and its audit row commit together. */
      audit: (r: {
        tenant: string
        keyId: string
        action: KeyAuditAction
        outcome: KeyChangeOutcome
        at: Date
        actor: string
        correlationId: string
      }) => storage("audit")(insertAudit(r)),
      /** Wraps a transaction so that BEGIN/COMMIT failures are storage outcomes too. */
      transaction: <A, E, R>(operation: string, effect: Effect.Effect<A, E, R>) =>
        storage(operation)(sql.withTransaction(effect))
    }
  })
}) {}
