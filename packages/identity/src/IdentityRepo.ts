import { makeBatcher } from "@delivery/core"
import { SqlClient, SqlError, SqlSchema } from "@effect/sql"
import { Effect, Option, type ParseResult, Schema } from "effect"
import { IdentityStorageUnavailable } from "./Domain.ts"
import {
  AccountRow,
  AccountViewRow,
  ApiKeyMaterialRow,
  ApiKeyRow,
  ApiKeyViewRow,
  type AuditEntry,
  DeviceCredentialRow,
  DeviceCredentialViewRow,
  type NewAccount,
  type NewApiKey,
  type NewDeviceCredential,
  type PageRequest,
  SessionRow,
  TenantRow
} from "./IdentityRows.ts"

// SQL only; private to the package. Every statement uses `.withoutTransform`
// so the row shapes (IdentityRows.ts) hold whatever name transforms the backend's pool uses.

const Returned = Schema.Struct({ found: Schema.Literal(1) })

/**
 * A database failure is an expected outcome (retry later), so it becomes a typed
 * error; a row that does not decode is a bug and dies. Only the SQLSTATE is logged:
 * driver errors may carry statement parameters, and those include hashes.
 */
export const unavailable = (operation: string) => (error: SqlError.SqlError) => {
  const code = (error.cause as { readonly code?: unknown } | undefined)?.code
  return Effect.logWarning("identity storage unavailable").pipe(
    Effect.annotateLogs({ operation, sqlstate: typeof code === "string" ? code : "unknown" }),
    Effect.zipRight(Effect.fail(new IdentityStorageUnavailable({ operation })))
  )
}

export const storage = (operation: string) =>
<A, R>(effect: Effect.Effect<A, SqlError.SqlError | ParseResult.ParseError, R>) =>
  effect.pipe(Effect.catchTags({ ParseError: (error) => Effect.die(error), SqlError: unavailable(operation) }))

const decodeDeviceCredentialRows = Schema.decodeUnknown(Schema.Array(DeviceCredentialRow))

// Lookup ids are 24 hex digits (Token.ts): a full statement carries under two kilobytes of parameters.
const DEVICE_LOOKUPS_PER_STATEMENT = 64

export class IdentityRepo extends Effect.Service<IdentityRepo>()("@delivery/identity/IdentityRepo", {
  scoped: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    // Never password_hash itself: whether there is one is all a view needs.
    const accountColumns = sql.literal("tenant_id, id, email, enabled, password_hash IS NOT NULL AS has_password, created_at")

    const insertTenant = SqlSchema.findOne({
      Request: Schema.Struct({ id: Schema.String, at: Schema.DateFromSelf }),
      Result: TenantRow,
      execute: (r) => sql`
        INSERT INTO identity_tenants (id, created_at) VALUES (${r.id}, ${r.at})
        ON CONFLICT (id) DO NOTHING
        RETURNING id, created_at`.withoutTransform
    })

    const listTenants = SqlSchema.findAll({
      Request: Schema.Struct({ after: Schema.NullOr(Schema.String), limit: Schema.Number }),
      Result: TenantRow,
      execute: (r) => sql`
        SELECT id, created_at FROM identity_tenants
        WHERE ${r.after === null ? sql`true` : sql`id > ${r.after}`}
        ORDER BY id LIMIT ${r.limit}`.withoutTransform
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
      Result: AccountViewRow,
      execute: (a) => sql`
        INSERT INTO identity_accounts (tenant_id, id, email, password_hash)
        VALUES (${a.tenant}, ${a.id}, ${a.email}, ${a.passwordHash})
        ON CONFLICT (tenant_id, email) DO NOTHING
        RETURNING ${accountColumns}`.withoutTransform
    })

    const setAccountEnabled = SqlSchema.findOne({
      Request: Schema.Struct({ tenant: Schema.String, account: Schema.String, enabled: Schema.Boolean }),
      Result: AccountViewRow,
      execute: (r) => sql`
        UPDATE identity_accounts SET enabled = ${r.enabled}
        WHERE tenant_id = ${r.tenant} AND id = ${r.account}
        RETURNING ${accountColumns}`.withoutTransform
    })

    // FOR UPDATE: the change that follows in the same transaction sees the state it decides on.
    const lockAccount = SqlSchema.findOne({
      Request: Schema.Struct({ tenant: Schema.String, account: Schema.String }),
      Result: AccountViewRow,
      execute: (r) => sql`
        SELECT ${accountColumns} FROM identity_accounts
        WHERE tenant_id = ${r.tenant} AND id = ${r.account} FOR UPDATE`.withoutTransform
    })

    const listAccounts = SqlSchema.findAll({
      Request: Schema.Struct({ tenant: Schema.String, after: Schema.NullOr(Schema.String), limit: Schema.Number }),
      Result: AccountViewRow,
      execute: (r) => sql`
        SELECT ${accountColumns} FROM identity_accounts
        WHERE tenant_id = ${r.tenant} ${r.after === null ? sql`` : sql`AND id > ${r.after}`}
        ORDER BY id LIMIT ${r.limit}`.withoutTransform
    })

    const findAccountByEmail = SqlSchema.findOne({
      Request: Schema.Struct({ tenant: Schema.String, email: Schema.String }),
      Result: AccountRow,
      execute: (r) => sql`
        SELECT id, enabled, password_hash FROM identity_accounts
        WHERE tenant_id = ${r.tenant} AND email = ${r.email}`.withoutTransform
    })

    const apiKeyColumns = sql.literal(
      "lookup_id, tenant_id, account_id, kind, name, permissions, expires_at, revoked_at, created_at"
    )
    const deviceColumns = sql.literal("lookup_id, tenant_id, account_id, device_id, expires_at, revoked_at, created_at")

    // INSERT ... SELECT FROM identity_accounts: a key for an account outside the tenant inserts nothing.
    const insertApiKey = SqlSchema.findOne({
      Request: Schema.Any as Schema.Schema<NewApiKey>,
      Result: ApiKeyViewRow,
      execute: (key) => sql`
        INSERT INTO identity_api_keys
          (lookup_id, tenant_id, account_id, kind, name, permissions, secret_hash, expires_at, created_at)
        SELECT ${key.lookupId}, a.tenant_id, a.id, ${key.kind}, ${key.name}, ${key.permissions}::text[],
               ${Buffer.from(key.secretHash)}, ${key.expiresAt}, ${key.at}
        FROM identity_accounts a WHERE a.tenant_id = ${key.tenant} AND a.id = ${key.account}
        RETURNING ${apiKeyColumns}`.withoutTransform
    })

    const insertDeviceCredential = SqlSchema.findOne({
      Request: Schema.Any as Schema.Schema<NewDeviceCredential>,
      Result: DeviceCredentialViewRow,
      execute: (cred) => sql`
        INSERT INTO identity_device_credentials
          (lookup_id, tenant_id, account_id, device_id, secret_hash, expires_at, created_at)
        SELECT ${cred.lookupId}, a.tenant_id, a.id, ${cred.device}, ${Buffer.from(cred.secretHash)}, ${cred.expiresAt},
               ${cred.at}
        FROM identity_accounts a WHERE a.tenant_id = ${cred.tenant} AND a.id = ${cred.account}
        RETURNING ${deviceColumns}`.withoutTransform
    })

    interface CredentialTable<A, I> {
      readonly table: string
      readonly columns: ReturnType<typeof sql.literal>
      readonly Row: Schema.Schema<A, I>
    }
    const apiKeys: CredentialTable<ApiKeyViewRow, typeof ApiKeyViewRow.Encoded> = {
      table: "identity_api_keys",
      columns: apiKeyColumns,
      Row: ApiKeyViewRow
    }
    const devices: CredentialTable<DeviceCredentialViewRow, typeof DeviceCredentialViewRow.Encoded> = {
      table: "identity_device_credentials",
      columns: deviceColumns,
      Row: DeviceCredentialViewRow
    }

    // FOR UPDATE, then the revocation in the same transaction: whether it was already revoked is decided
    // on the locked row. The first revocation time is kept: revoking twice does not rewrite history.
    const lockCredential = <A, I>(t: CredentialTable<A, I>) =>
      SqlSchema.findOne({
        Request: Schema.Struct({ tenant: Schema.String, id: Schema.String }),
        Result: t.Row,
        execute: (r) => sql`
          SELECT ${t.columns} FROM ${sql(t.table)}
          WHERE tenant_id = ${r.tenant} AND lookup_id = ${r.id} FOR UPDATE`.withoutTransform
      })

    const revokeCredential = <A, I>(t: CredentialTable<A, I>) =>
      SqlSchema.findOne({
        Request: Schema.Struct({ tenant: Schema.String, id: Schema.String, at: Schema.DateFromSelf }),
        Result: t.Row,
        execute: (r) => sql`
          UPDATE ${sql(t.table)} SET revoked_at = COALESCE(revoked_at, ${r.at})
          WHERE tenant_id = ${r.tenant} AND lookup_id = ${r.id}
          RETURNING ${t.columns}`.withoutTransform
      })

    const listCredentials = <A, I>(t: CredentialTable<A, I>) =>
      SqlSchema.findAll({
        Request: Schema.Struct({
          tenant: Schema.String,
          account: Schema.NullOr(Schema.String),
          after: Schema.NullOr(Schema.String),
          limit: Schema.Number
        }),
        Result: t.Row,
        execute: (r) => sql`
          SELECT ${t.columns} FROM ${sql(t.table)}
          WHERE tenant_id = ${r.tenant}
            ${r.account === null ? sql`` : sql`AND account_id = ${r.account}`}
            ${r.after === null ? sql`` : sql`AND lookup_id > ${r.after}`}
          ORDER BY lookup_id LIMIT ${r.limit}`.withoutTransform
      })

    const insertAudit = (entry: AuditEntry) => sql`
      INSERT INTO identity_audit (tenant, action, subject, outcome, actor, at, correlation_id)
      VALUES (${entry.tenant}, ${entry.action}, ${entry.subject}, ${entry.outcome}, ${entry.actor}, ${entry.at},
              ${entry.correlationId})`.withoutTransform

    // The three credential lookups run on every authenticated request: `/* prepared */` makes the backend's pool
    // send them as named prepared statements, parsed once per connection (packages/backend/src/Database.ts).
    const findApiKey = SqlSchema.findOne({
      Request: Schema.Struct({ lookupId: Schema.String, kind: Schema.String }),
      Result: ApiKeyRow,
      execute: (r) => sql`
        SELECT k.lookup_id, k.tenant_id, k.account_id, k.kind, k.permissions, k.secret_hash,
               k.expires_at, k.revoked_at, a.enabled AS account_enabled
        FROM identity_api_keys k
        JOIN identity_accounts a ON a.tenant_id = k.tenant_id AND a.id = k.account_id
        WHERE k.lookup_id = ${r.lookupId} AND k.kind = ${r.kind} /* prepared */`.withoutTransform
    })

    // Every device-authenticated request (each envelope) looks its credential up. Lookups that arrive while one runs
    // are made together by the next statement (core's Batcher): one round trip for many envelopes under load, the
    // same single lookup for one request at a time (docs/controlplane-inbound.md, "Group commit").
    const findDeviceCredentials = (lookupIds: ReadonlyArray<string>) =>
      Effect.flatMap(
        sql`
          SELECT d.lookup_id, d.tenant_id, d.account_id, d.device_id, d.secret_hash,
                 d.expires_at, d.revoked_at, a.enabled AS account_enabled
          FROM identity_device_credentials d
          JOIN identity_accounts a ON a.tenant_id = d.tenant_id AND a.id = d.account_id
          WHERE d.lookup_id = ANY(${lookupIds}::text[]) /* prepared */`.withoutTransform,
        (rows) =>
          Effect.map(decodeDeviceCredentialRows(rows), (found) => {
            const byLookupId = new Map(found.map((row) => [row.lookup_id, row]))
            return lookupIds.map((lookupId) => Option.fromNullable(byLookupId.get(lookupId)))
          })
      )
    const findDeviceCredential = yield* makeBatcher({
      span: "IdentityRepo.findDeviceCredential",
      concurrency: 1,
      maxItems: DEVICE_LOOKUPS_PER_STATEMENT,
      run: findDeviceCredentials
    })

    const insertSession = (r: {
      readonly lookupId: string
      readonly tenant: string
      readonly account: string
      readonly secretHash: Uint8Array
      readonly expiresAt: Date
      readonly at: Date
    }) => sql`
      INSERT INTO identity_sessions (lookup_id, tenant_id, account_id, secret_hash, expires_at, created_at)
      VALUES (${r.lookupId}, ${r.tenant}, ${r.account}, ${Buffer.from(r.secretHash)}, ${r.expiresAt}, ${r.at})`.withoutTransform

    const findSession = SqlSchema.findOne({
      Request: Schema.String,
      Result: SessionRow,
      execute: (lookupId) => sql`
        SELECT s.lookup_id, s.tenant_id, s.account_id, s.secret_hash, s.expires_at, s.revoked_at,
               a.enabled AS account_enabled
        FROM identity_sessions s
        JOIN identity_accounts a ON a.tenant_id = s.tenant_id AND a.id = s.account_id
        WHERE s.lookup_id = ${lookupId} /* prepared */`.withoutTransform
    })

    // Idle wake's key projection (spec 001): the kind and lookup id are read as plain text, so a row that is not a
    // board or agent key of the documented shape reaches the projection, which refuses it (fail closed).
    const activeApiKeyMaterial = SqlSchema.findAll({
      Request: Schema.Struct({ at: Schema.DateFromSelf, limit: Schema.Number }),
      Result: ApiKeyMaterialRow,
      execute: (r) => sql`
        SELECT k.kind, k.lookup_id, k.secret_hash, k.expires_at
        FROM identity_api_keys k
        JOIN identity_accounts a ON a.tenant_id = k.tenant_id AND a.id = k.account_id
        WHERE k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > ${r.at}) AND a.enabled
        ORDER BY k.lookup_id
        LIMIT ${r.limit}`.withoutTransform
    })

    const activeDeviceCredential = SqlSchema.findOne({
      Request: Schema.DateFromSelf,
      Result: Returned,
      execute: (at) => sql`
        SELECT 1 AS found
        FROM identity_device_credentials d
        JOIN identity_accounts a ON a.tenant_id = d.tenant_id AND a.id = d.account_id
        WHERE d.revoked_at IS NULL AND (d.expires_at IS NULL OR d.expires_at > ${at}) AND a.enabled
        LIMIT 1`.withoutTransform
    })

    const found = Option.isSome
    // INSERT ... RETURNING and UPDATE ... RETURNING on a row locked in the same transaction cannot come back
    // empty: a defect, not an outcome.
    const returned = <A, E, R>(effect: Effect.Effect<Option.Option<A>, E, R>) =>
      Effect.flatMap(effect, Option.match({ onNone: () => Effect.dieMessage("a RETURNING statement returned no row"), onSome: Effect.succeed }))

    return {
      insertTenant: (id: string, at: Date) => insertTenant({ id, at }).pipe(storage("insertTenant")),
      listTenants: (page: PageRequest) => listTenants(page).pipe(storage("listTenants")),
      tenantExists: (id: string) => tenantExists(id).pipe(Effect.map(found), storage("tenantExists")),
      insertAccount: (a: NewAccount) => insertAccount(a).pipe(storage("insertAccount")),
      lockAccount: (tenant: string, account: string) => lockAccount({ tenant, account }).pipe(storage("lockAccount")),
      setAccountEnabled: (tenant: string, account: string, enabled: boolean) =>
        setAccountEnabled({ tenant, account, enabled }).pipe(returned, storage("setAccountEnabled")),
      listAccounts: (tenant: string, page: PageRequest) => listAccounts({ tenant, ...page }).pipe(storage("listAccounts")),
      findAccountByEmail: (tenant: string, email: string) =>
        findAccountByEmail({ tenant, email }).pipe(storage("findAccountByEmail")),
      insertApiKey: (key: NewApiKey) => insertApiKey(key).pipe(storage("insertApiKey")),
      insertDeviceCredential: (cred: NewDeviceCredential) =>
        insertDeviceCredential(cred).pipe(storage("insertDeviceCredential")),
      lockApiKey: (tenant: string, id: string) => lockCredential(apiKeys)({ tenant, id }).pipe(storage("lockApiKey")),
      lockDeviceCredential: (tenant: string, id: string) =>
        lockCredential(devices)({ tenant, id }).pipe(storage("lockDeviceCredential")),
      revokeApiKey: (tenant: string, id: string, at: Date) =>
        revokeCredential(apiKeys)({ tenant, id, at }).pipe(returned, storage("revokeApiKey")),
      revokeDeviceCredential: (tenant: string, id: string, at: Date) =>
        revokeCredential(devices)({ tenant, id, at }).pipe(returned, storage("revokeDeviceCredential")),
      listApiKeys: (tenant: string, account: string | null, page: PageRequest) =>
        listCredentials(apiKeys)({ tenant, account, ...page }).pipe(storage("listApiKeys")),
      listDeviceCredentials: (tenant: string, account: string | null, page: PageRequest) =>
        listCredentials(devices)({ tenant, account, ...page }).pipe(storage("listDeviceCredentials")),
      findApiKey: (lookupId: string, kind: string) =>
        findApiKey({ lookupId, kind }).pipe(storage("findApiKey")),
      findDeviceCredential: (lookupId: string) => findDeviceCredential(lookupId).pipe(storage("findDeviceCredential")),
      insertSession: (r: Parameters<typeof insertSession>[0]) => Effect.asVoid(insertSession(r)).pipe(storage("insertSession")),
      findSession: (lookupId: string) => findSession(lookupId).pipe(storage("findSession")),
      activeApiKeyMaterial: (at: Date, limit: number) => activeApiKeyMaterial({ at, limit }).pipe(storage("activeApiKeyMaterial")),
      hasActiveDeviceCredential: (at: Date) =>
        activeDeviceCredential(at).pipe(Effect.map(found), storage("hasActiveDeviceCredential")),
      /** Inside the change's transaction, so the change and its audit row commit together. */
      audit: (entry: AuditEntry) => Effect.asVoid(insertAudit(entry)).pipe(storage("audit")),
      /** Wraps a transaction so that BEGIN/COMMIT failures are storage outcomes too. */
      transaction: <A, E, R>(operation: string, effect: Effect.Effect<A, E, R>) =>
        sql.withTransaction(effect).pipe(
          Effect.catchIf((error): error is SqlError.SqlError => error instanceof SqlError.SqlError, unavailable(operation))
        )
    } as const
  })
}) {}
