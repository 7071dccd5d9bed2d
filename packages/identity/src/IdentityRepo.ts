import { SqlClient, type SqlError, SqlSchema } from "@effect/sql"
import { Effect, Option, type ParseResult, Schema } from "effect"
import { IdentityStorageUnavailable } from "./Domain.ts"

// SQL only; private to the package. Every statement uses `.withoutTransform`
// so the row shapes below hold whatever name transforms the backend's pool uses.

const CredentialColumns = {
  lookup_id: Schema.String,
  tenant_id: Schema.String,
  account_id: Schema.String,
  secret_hash: Schema.Uint8ArrayFromSelf,
  expires_at: Schema.NullOr(Schema.DateFromSelf),
  revoked_at: Schema.NullOr(Schema.DateFromSelf),
  account_enabled: Schema.Boolean
}

export const ApiKeyRow = Schema.Struct({
  ...CredentialColumns,
  kind: Schema.Literal("board", "agent"),
  permissions: Schema.Array(Schema.String)
})
export type ApiKeyRow = typeof ApiKeyRow.Type

export const DeviceCredentialRow = Schema.Struct({ ...CredentialColumns, device_id: Schema.String })
export type DeviceCredentialRow = typeof DeviceCredentialRow.Type

export const AccountRow = Schema.Struct({
  id: Schema.String,
  enabled: Schema.Boolean,
  password_hash: Schema.NullOr(Schema.String)
})
export type AccountRow = typeof AccountRow.Type

const Returned = Schema.Struct({ found: Schema.Literal(1) })

export interface NewAccount {
  readonly tenant: string
  readonly id: string
  readonly email: string
  readonly passwordHash: string | null
}

export interface NewCredential {
  readonly lookupId: string
  readonly tenant: string
  readonly account: string
  readonly secretHash: Uint8Array
  readonly expiresAt: Date | null
}

export interface NewApiKey extends NewCredential {
  readonly kind: string
  readonly name: string
  readonly permissions: ReadonlyArray<string>
}

export interface NewDeviceCredential extends NewCredential {
  readonly device: string
}

/**
 * A database failure is an expected outcome (retry later), so it becomes a typed
 * error; a row that does not decode is a bug and dies. Only the SQLSTATE is logged:
 * driver errors may carry statement parameters, and those include hashes.
 */
const storage = (operation: string) =>
<A, R>(effect: Effect.Effect<A, SqlError.SqlError | ParseResult.ParseError, R>) =>
  effect.pipe(
    Effect.catchTags({
      ParseError: (error) => Effect.die(error),
      SqlError: (error) => {
        const code = (error.cause as { readonly code?: unknown } | undefined)?.code
        return Effect.logWarning("identity storage unavailable").pipe(
          Effect.annotateLogs({ operation, sqlstate: typeof code === "string" ? code : "unknown" }),
          Effect.zipRight(Effect.fail(new IdentityStorageUnavailable({ operation })))
        )
      }
    })
  )

export class IdentityRepo extends Effect.Service<IdentityRepo>()("@delivery/identity/IdentityRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    const insertTenant = SqlSchema.findOne({
      Request: Schema.String,
      Result: Returned,
      execute: (id) => sql`
        INSERT INTO identity_tenants (id) VALUES (${id})
        ON CONFLICT (id) DO NOTHING
        RETURNING 1 AS found`.withoutTransform
    })

    const tenantExists = SqlSchema.findOne({
      Request: Schema.String,
      Result: Returned,
      execute: (id) => sql`SELECT 1 AS found FROM identity_tenants WHERE id = ${id}`.withoutTransform
    })

    const insertAccount = SqlSchema.findOne({
      Request: Schema.Struct({
        tenant: Schema.String,
        id: Schema.String,
        email: Schema.String,
        passwordHash: Schema.NullOr(Schema.String)
      }),
      Result: Returned,
      execute: (a) => sql`
        INSERT INTO identity_accounts (tenant_id, id, email, password_hash)
        VALUES (${a.tenant}, ${a.id}, ${a.email}, ${a.passwordHash})
        ON CONFLICT (tenant_id, email) DO NOTHING
        RETURNING 1 AS found`.withoutTransform
    })

    const setAccountEnabled = SqlSchema.findOne({
      Request: Schema.Struct({ tenant: Schema.String, account: Schema.String, enabled: Schema.Boolean }),
      Result: Returned,
      execute: (r) => sql`
        UPDATE identity_accounts SET enabled = ${r.enabled}
        WHERE tenant_id = ${r.tenant} AND id = ${r.account}
        RETURNING 1 AS found`.withoutTransform
    })

    const findAccountByEmail = SqlSchema.findOne({
      Request: Schema.Struct({ tenant: Schema.String, email: Schema.String }),
      Result: AccountRow,
      execute: (r) => sql`
        SELECT id, enabled, password_hash FROM identity_accounts
        WHERE tenant_id = ${r.tenant} AND email = ${r.email}`.withoutTransform
    })

    // INSERT ... SELECT FROM identity_accounts: a key for an account outside the tenant inserts nothing.
    const insertApiKey = (key: NewApiKey) =>
      sql<{ found: 1 }>`
        INSERT INTO identity_api_keys
          (lookup_id, tenant_id, account_id, kind, name, permissions, secret_hash, expires_at)
        SELECT ${key.lookupId}, a.tenant_id, a.id, ${key.kind}, ${key.name}, ${key.permissions}::text[],
               ${Buffer.from(key.secretHash)}, ${key.expiresAt}
        FROM identity_accounts a WHERE a.tenant_id = ${key.tenant} AND a.id = ${key.account}
        RETURNING 1 AS found`.withoutTransform.pipe(Effect.map((rows) => rows.length > 0))

    const insertDeviceCredential = (cred: NewDeviceCredential) =>
      sql<{ found: 1 }>`
        INSERT INTO identity_device_credentials
          (lookup_id, tenant_id, account_id, device_id, secret_hash, expires_at)
        SELECT ${cred.lookupId}, a.tenant_id, a.id, ${cred.device}, ${Buffer.from(cred.secretHash)}, ${cred.expiresAt}
        FROM identity_accounts a WHERE a.tenant_id = ${cred.tenant} AND a.id = ${cred.account}
        RETURNING 1 AS found`.withoutTransform.pipe(Effect.map((rows) => rows.length > 0))

    // COALESCE keeps the first revocation time: revoking twice is harmless and does not rewrite history.
    const revoke = (table: "identity_api_keys" | "identity_device_credentials") =>
      SqlSchema.findOne({
        Request: Schema.Struct({ tenant: Schema.String, id: Schema.String, at: Schema.DateFromSelf }),
        Result: Returned,
        execute: (r) => sql`
          UPDATE ${sql(table)} SET revoked_at = COALESCE(revoked_at, ${r.at})
          WHERE tenant_id = ${r.tenant} AND lookup_id = ${r.id}
          RETURNING 1 AS found`.withoutTransform
      })
    const revokeApiKey = revoke("identity_api_keys")
    const revokeDeviceCredential = revoke("identity_device_credentials")

    const findApiKey = SqlSchema.findOne({
      Request: Schema.Struct({ lookupId: Schema.String, kind: Schema.String }),
      Result: ApiKeyRow,
      execute: (r) => sql`
        SELECT k.lookup_id, k.tenant_id, k.account_id, k.kind, k.permissions, k.secret_hash,
               k.expires_at, k.revoked_at, a.enabled AS account_enabled
        FROM identity_api_keys k
        JOIN identity_accounts a ON a.tenant_id = k.tenant_id AND a.id = k.account_id
        WHERE k.lookup_id = ${r.lookupId} AND k.kind = ${r.kind}`.withoutTransform
    })

    const findDeviceCredential = SqlSchema.findOne({
      Request: Schema.String,
      Result: DeviceCredentialRow,
      execute: (lookupId) => sql`
        SELECT d.lookup_id, d.tenant_id, d.account_id, d.device_id, d.secret_hash,
               d.expires_at, d.revoked_at, a.enabled AS account_enabled
        FROM identity_device_credentials d
        JOIN identity_accounts a ON a.tenant_id = d.tenant_id AND a.id = d.account_id
        WHERE d.lookup_id = ${lookupId}`.withoutTransform
    })

    const found = Option.isSome

    return {
      insertTenant: (id: string) => insertTenant(id).pipe(Effect.map(found), storage("insertTenant")),
      tenantExists: (id: string) => tenantExists(id).pipe(Effect.map(found), storage("tenantExists")),
      insertAccount: (a: NewAccount) =>
        insertAccount(a).pipe(Effect.map(found), storage("insertAccount")),
      setAccountEnabled: (tenant: string, account: string, enabled: boolean) =>
        setAccountEnabled({ tenant, account, enabled }).pipe(Effect.map(found), storage("setAccountEnabled")),
      findAccountByEmail: (tenant: string, email: string) =>
        findAccountByEmail({ tenant, email }).pipe(storage("findAccountByEmail")),
      insertApiKey: (key: NewApiKey) => insertApiKey(key).pipe(storage("insertApiKey")),
      insertDeviceCredential: (cred: NewDeviceCredential) =>
        insertDeviceCredential(cred).pipe(storage("insertDeviceCredential")),
      revokeApiKey: (tenant: string, id: string, at: Date) =>
        revokeApiKey({ tenant, id, at }).pipe(Effect.map(found), storage("revokeApiKey")),
      revokeDeviceCredential: (tenant: string, id: string, at: Date) =>
        revokeDeviceCredential({ tenant, id, at }).pipe(Effect.map(found), storage("revokeDeviceCredential")),
      findApiKey: (lookupId: string, kind: string) =>
        findApiKey({ lookupId, kind }).pipe(storage("findApiKey")),
      findDeviceCredential: (lookupId: string) => findDeviceCredential(lookupId).pipe(storage("findDeviceCredential"))
    } as const
  })
}) {}
