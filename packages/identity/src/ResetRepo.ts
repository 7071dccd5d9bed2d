import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { storage } from "./IdentityRepo.ts"

// SQL of password-reset verifications (migrations/0013_identity_reset_verifications.sql); private to the package.

export const VerificationRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  account_id: Schema.String,
  token_sealed: Schema.Uint8ArrayFromSelf,
  expires_at: Schema.DateFromSelf,
  consumed_at: Schema.NullOr(Schema.DateFromSelf),
  email: Schema.String,
  account_enabled: Schema.Boolean
})
export type VerificationRow = typeof VerificationRow.Type

export class ResetRepo extends Effect.Service<ResetRepo>()("@delivery/identity/ResetRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const columns = sql.literal(`v.id::text AS id, v.tenant_id, v.account_id, v.token_sealed, v.expires_at, v.consumed_at,
      a.email, a.enabled AS account_enabled`)

    const insert = (r: {
      readonly id: string
      readonly tenant: string
      readonly account: string
      readonly lookup: Uint8Array
      readonly sealed: Uint8Array
      readonly expiresAt: Date
      readonly at: Date
    }) => sql`
      INSERT INTO identity_reset_verifications (id, tenant_id, account_id, token_lookup, token_sealed, expires_at, created_at)
      VALUES (${r.id}, ${r.tenant}, ${r.account}, ${Buffer.from(r.lookup)}, ${Buffer.from(r.sealed)}, ${r.expiresAt}, ${r.at})`
      .withoutTransform

    const findById = SqlSchema.findOne({
      Request: Schema.String,
      Result: VerificationRow,
      execute: (id) => sql`
        SELECT ${columns} FROM identity_reset_verifications v
        JOIN identity_accounts a ON a.tenant_id = v.tenant_id AND a.id = v.account_id
        WHERE v.id = ${id}`.withoutTransform
    })

    // The account first, then the verification, in every completion: a completion consumes every live verification of
    // its account, so two completions that each locked their own token first would then wait for each other's (a
    // deadlock, answered 503). Serialized on the account, the second waits and then reads its token as it stays until
    // commit (consumed by the first, so refused). FOR UPDATE OF both rows: the completion decides on both.
    const lockAccountOfLookup = (lookup: Uint8Array) => sql`
      SELECT 1 FROM identity_accounts a
      JOIN identity_reset_verifications v ON a.tenant_id = v.tenant_id AND a.id = v.account_id
      WHERE v.token_lookup = ${Buffer.from(lookup)}
      FOR UPDATE OF a`.withoutTransform

    const findLocked = SqlSchema.findOne({
      Request: Schema.Uint8ArrayFromSelf,
      Result: VerificationRow,
      execute: (lookup) => sql`
        SELECT ${columns} FROM identity_reset_verifications v
        JOIN identity_accounts a ON a.tenant_id = v.tenant_id AND a.id = v.account_id
        WHERE v.token_lookup = ${Buffer.from(lookup)}
        FOR UPDATE OF v, a`.withoutTransform
    })

    const lockByLookup = (lookup: Uint8Array) => Effect.zipRight(lockAccountOfLookup(lookup), findLocked(lookup))

    const complete = (r: {
      readonly tenant: string
      readonly account: string
      readonly passwordHash: string
      readonly at: Date
    }) =>
      Effect.all([
        sql`UPDATE identity_accounts SET password_hash = ${r.passwordHash}
            WHERE tenant_id = ${r.tenant} AND id = ${r.account}`.withoutTransform,
        // The used token and every other live token of the account end together: a reset is one event.
        sql`UPDATE identity_reset_verifications SET consumed_at = ${r.at}
            WHERE tenant_id = ${r.tenant} AND account_id = ${r.account} AND consumed_at IS NULL`.withoutTransform,
        // Sessions signed in with the old password end now, not at their expiry.
        sql`UPDATE identity_sessions SET revoked_at = ${r.at}
            WHERE tenant_id = ${r.tenant} AND account_id = ${r.account} AND revoked_at IS NULL`.withoutTransform
      ], { discard: true })

    return {
      insert: (r: Parameters<typeof insert>[0]) => Effect.asVoid(insert(r)).pipe(storage("insertResetVerification")),
      findById: (id: string) => findById(id).pipe(storage("findResetVerification")),
      lockByLookup: (lookup: Uint8Array) => lockByLookup(lookup).pipe(storage("lockResetVerification")),
      complete: (r: Parameters<typeof complete>[0]) => complete(r).pipe(storage("completeReset"))
    } as const
  })
}) {}
