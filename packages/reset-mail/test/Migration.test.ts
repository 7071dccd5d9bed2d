import { defaultMigrationsDirectory, runMigrations } from "@delivery/core"
import { EmptyTestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient, type SqlError } from "@effect/sql"
import { BunContext } from "@effect/platform-bun"
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from "node:fs"
import { join } from "node:path"
import { ResetMailRepo } from "../src/ResetMailRepo.ts"

// Spec 002, "Migration 68" (migrations/0015_reset_mail_fingerprint.sql) as an upgrade: a database at 0014 with rows
// in the outbox's first shape, then the repository's whole migrations/ folder, as a backend start after the
// upgrade would run it.
//
//   Migration 68 adds the non-secret fingerprint. Previously attempted, nonterminal rows without a trustworthy
//   original fingerprint become quarantined. Unattempted rows remain eligible. Existing delivered rows and
//   canonical verifications remain unchanged.

const upgradeId = 15
const tenant = "acme"
const account = "alice"
const old = new Date("2024-05-01T10:00:00.000Z")
const oldUpdate = new Date("2024-05-01T10:05:00.000Z")
const retryAt = new Date("2024-05-01T10:10:00.000Z")

const uuid = (n: number) => `00000000-0000-4000-8000-${n.toString(16).padStart(12, "0")}`
const sealed = (n: number) => Buffer.alloc(12 + 32 + 16, n) // nonce || ciphertext || tag: 60 bytes, within 29..256
const lookup = (n: number) => Buffer.alloc(32, 0x80 + n)

/** One verification per outbox row, so each row's verification can be followed separately. */
const rows = {
  unattempted: { id: uuid(1), verification: uuid(101) },
  attemptedPending: { id: uuid(2), verification: uuid(102) },
  sending: { id: uuid(3), verification: uuid(103) },
  delivered: { id: uuid(4), verification: uuid(104) },
  rejected: { id: uuid(5), verification: uuid(105) },
  quarantined: { id: uuid(6), verification: uuid(106) },
  stopped: { id: uuid(7), verification: uuid(107) }
} as const

/** Every column of every outbox row (jsonb, so bytes, timestamps and nulls are compared exactly), by id. */
const outboxRows = (sql: SqlClient.SqlClient) =>
  Effect.map(
    sql<{ readonly id: string; readonly row: Record<string, unknown> }>`
      SELECT id::text AS id, to_jsonb(o) AS row FROM reset_mail_outbox o ORDER BY id`.withoutTransform,
    (list) => new Map(list.map(({ id, row }) => [id, row]))
  )

/** Every verification, every byte: the sealed token and its lookup as hex, the rest as the table holds it. */
const verifications = (sql: SqlClient.SqlClient) =>
  sql<{ readonly row: string; readonly sealed: Uint8Array; readonly lookup: Uint8Array }>`
    SELECT to_jsonb(v)::text AS row, token_sealed AS sealed, token_lookup AS lookup
    FROM identity_reset_verifications v ORDER BY id`.withoutTransform

const withoutFingerprint = (row: Record<string, unknown> | undefined) => {
  const { fingerprint: _, ...rest } = row ?? {}
  return rest
}

const migrate = (directory: string) => runMigrations(directory).pipe(Effect.provide(BunContext.layer))

/** The database as it was at 0014, and the same database right after the upgrade, before any test touches it. */
class Upgrade extends Context.Tag("Migration.test/Upgrade")<Upgrade, {
  readonly oldDirectory: string
  readonly firstRun: ReadonlyArray<readonly [number, string]>
  readonly upgradeRun: ReadonlyArray<readonly [number, string]>
  readonly startedAt: Date
  readonly finishedAt: Date
  readonly before: Map<string, Record<string, unknown>>
  readonly after: Map<string, Record<string, unknown>>
  readonly verificationsBefore: ReadonlyArray<{ readonly row: string; readonly sealed: Uint8Array; readonly lookup: Uint8Array }>
  readonly verificationsAfter: ReadonlyArray<{ readonly row: string; readonly sealed: Uint8Array; readonly lookup: Uint8Array }>
}>() {}

const UpgradeLive = Layer.scoped(
  Upgrade,
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const oldDirectory = yield* Effect.acquireRelease(
      Effect.sync(() => mkdtempSync(join("/tmp", "rmm-"))),
      (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
    )
    for (const name of readdirSync(defaultMigrationsDirectory)) {
      const id = /^(\d{4})_/.exec(name)
      if (id !== null && Number(id[1]) < upgradeId) copyFileSync(join(defaultMigrationsDirectory, name), join(oldDirectory, name))
    }
    const firstRun = yield* migrate(oldDirectory)

    yield* sql`INSERT INTO identity_tenants (id, created_at) VALUES (${tenant}, ${old})`
    yield* sql`INSERT INTO identity_accounts (tenant_id, id, email, created_at)
               VALUES (${tenant}, ${account}, 'alice@example.com', ${old})`
    for (const [n, { verification }] of Object.values(rows).entries()) {
      yield* sql`INSERT INTO identity_reset_verifications (id, tenant_id, account_id, token_lookup, token_sealed, expires_at, created_at)
                 VALUES (${verification}, ${tenant}, ${account}, ${lookup(n)}, ${sealed(n)},
                         ${new Date(old.getTime() + 3_600_000)}, ${old})`
    }
    const outbox = (r: {
      readonly row: { readonly id: string; readonly verification: string }
      readonly state: string
      readonly attempt: number
      readonly nextAttemptAt?: Date
      readonly claimedAt?: Date | null
      readonly leaseOwner?: string | null
      readonly reason?: string | null
      readonly lastError?: string | null
      readonly providerStatus?: number | null
    }) =>
      sql`INSERT INTO reset_mail_outbox (id, verification_id, tenant_id, state, attempt, next_attempt_at, claimed_at,
                                         lease_owner, reason, last_error, provider_status, created_at, updated_at)
          VALUES (${r.row.id}, ${r.row.verification}, ${tenant}, ${r.state}, ${r.attempt}, ${r.nextAttemptAt ?? old},
                  ${r.claimedAt ?? null}, ${r.leaseOwner ?? null}, ${r.reason ?? null}, ${r.lastError ?? null},
                  ${r.providerStatus ?? null}, ${old}, ${oldUpdate})`
    yield* outbox({ row: rows.unattempted, state: "pending", attempt: 0 })
    // A temporary failure before the upgrade: back to pending, waiting for its retry.
    yield* outbox({ row: rows.attemptedPending, state: "pending", attempt: 1, nextAttemptAt: retryAt, lastError: "provider-unavailable", providerStatus: 503 })
    // Claimed when the old process stopped for the upgrade.
    yield* outbox({ row: rows.sending, state: "sending", attempt: 2, claimedAt: oldUpdate, leaseOwner: "old-host:1234:abcd" })
    yield* outbox({ row: rows.delivered, state: "delivered", attempt: 1, providerStatus: 202 })
    yield* outbox({ row: rows.rejected, state: "rejected", attempt: 1, reason: "provider-rejected", providerStatus: 422 })
    yield* outbox({ row: rows.quarantined, state: "quarantined", attempt: 1, reason: "stale-claim", claimedAt: old })
    yield* outbox({ row: rows.stopped, state: "stopped", attempt: 0, reason: "verification-expired" })

    const before = yield* outboxRows(sql)
    const verificationsBefore = yield* verifications(sql)
    const startedAt = new Date()
    const upgradeRun = yield* migrate(defaultMigrationsDirectory)
    const finishedAt = new Date()
    return {
      oldDirectory,
      firstRun,
      upgradeRun,
      startedAt,
      finishedAt,
      before,
      after: yield* outboxRows(sql),
      verificationsBefore,
      verificationsAfter: yield* verifications(sql)
    }
  })
).pipe(Layer.provideMerge(EmptyTestDatabaseLive))

/** A SqlError's PostgreSQL code and constraint (node-postgres' DatabaseError). */
const refusal = (error: SqlError.SqlError) => {
  const cause = error.cause as { readonly code?: string; readonly constraint?: string }
  return { code: cause.code, constraint: cause.constraint }
}

describe("reset-mail outbox upgrade (spec 002, Migration 68: migrations/0015_reset_mail_fingerprint.sql)", () => {
  layer(UpgradeLive, { excludeTestServices: true })("from 0014 with rows in the first shape", (it) => {
    it.effect("the old database is at 0014 and the upgrade applies Migration 68 (0015) first, then any later migration", () =>
      Effect.gen(function* () {
        const upgrade = yield* Upgrade
        expect(upgrade.firstRun.map(([id]) => id)).toEqual(Array.from({ length: upgradeId - 1 }, (_, i) => i + 1))
        expect(upgrade.firstRun.at(-1)).toEqual([14, "reset_mail_outbox"])
        expect(upgrade.upgradeRun[0]).toEqual([15, "reset_mail_fingerprint"])
        expect(upgrade.upgradeRun.map(([id]) => id)).toEqual(Array.from({ length: upgrade.upgradeRun.length }, (_, i) => 15 + i))
        expect(upgrade.before.size).toBe(Object.keys(rows).length)
        expect(upgrade.before.get(rows.unattempted.id)).not.toHaveProperty("fingerprint")
      }))

    it.effect("Migration 68 adds the non-secret fingerprint: a nullable SHA-256 hex column, null on every existing row", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const { after } = yield* Upgrade
        expect(yield* sql`SELECT data_type, is_nullable FROM information_schema.columns
                           WHERE table_name = 'reset_mail_outbox' AND column_name = 'fingerprint'`.withoutTransform)
          .toEqual([{ data_type: "text", is_nullable: "YES" }])
        expect([...after.values()].map((row) => row.fingerprint)).toEqual(Object.keys(rows).map(() => null))
        // Only a lower-case SHA-256 hex digest fits (never a payload, an address or a token).
        for (const bad of ["secret-token", "A".repeat(64), "a".repeat(63)]) {
          const error = yield* Effect.flip(sql`UPDATE reset_mail_outbox SET fingerprint = ${bad} WHERE id = ${rows.unattempted.id}`)
          expect(refusal(error)).toEqual({ code: "23514", constraint: "reset_mail_outbox_fingerprint_check" })
        }
      }))

    it.effect("previously attempted, nonterminal rows become quarantined (fingerprint-unknown): an attempted pending row (a temporary failure before the upgrade) and a claimed sending row", () =>
      Effect.gen(function* () {
        const { after, before, finishedAt } = yield* Upgrade
        for (const row of [rows.attemptedPending, rows.sending]) {
          const was = before.get(row.id)!
          const is = after.get(row.id)!
          expect([row.id, is.state, is.reason, is.lease_owner, is.fingerprint]).toEqual([row.id, "quarantined", "fingerprint-unknown", null, null])
          // The attempt count, the claim time, the last error and the provider status stay as evidence.
          expect({ ...withoutFingerprint(is), state: was.state, reason: was.reason, lease_owner: was.lease_owner, updated_at: was.updated_at })
            .toEqual(was)
          const updated = new Date(is.updated_at as string)
          expect(updated.getTime()).toBeGreaterThan(oldUpdate.getTime())
          expect(updated.getTime()).toBeLessThanOrEqual(finishedAt.getTime() + 1_000)
        }
      }))

    it.effect("unattempted rows remain eligible: unchanged (pending, attempt 0, no reason, no fingerprint)", () =>
      Effect.gen(function* () {
        const { after, before } = yield* Upgrade
        expect(withoutFingerprint(after.get(rows.unattempted.id))).toEqual(before.get(rows.unattempted.id))
        expect(after.get(rows.unattempted.id)).toMatchObject({ state: "pending", attempt: 0, reason: null, fingerprint: null })
      }))

    it.effect("existing delivered rows remain unchanged, every column, with a null fingerprint", () =>
      Effect.gen(function* () {
        const { after, before } = yield* Upgrade
        expect(withoutFingerprint(after.get(rows.delivered.id))).toEqual(before.get(rows.delivered.id))
        expect(after.get(rows.delivered.id)).toMatchObject({ state: "delivered", fingerprint: null })
      }))

    it.effect("rows that had already ended (rejected, quarantined for another reason, stopped) remain unchanged, their reasons kept", () =>
      Effect.gen(function* () {
        const { after, before } = yield* Upgrade
        for (const row of [rows.rejected, rows.quarantined, rows.stopped]) {
          expect([row.id, withoutFingerprint(after.get(row.id))]).toEqual([row.id, before.get(row.id)])
        }
        expect([rows.rejected, rows.quarantined, rows.stopped].map((row) => after.get(row.id)!.reason))
          .toEqual(["provider-rejected", "stale-claim", "verification-expired"])
      }))

    it.effect("canonical verifications remain unchanged, byte for byte (the sealed tokens and their lookups included)", () =>
      Effect.gen(function* () {
        const { verificationsAfter, verificationsBefore } = yield* Upgrade
        expect(verificationsAfter).toHaveLength(Object.keys(rows).length)
        expect(verificationsAfter.map((v) => v.row)).toEqual(verificationsBefore.map((v) => v.row))
        for (const [n, v] of verificationsAfter.entries()) {
          expect(Buffer.from(v.sealed).equals(sealed(n))).toBe(true)
          expect(Buffer.from(v.lookup).equals(lookup(n))).toBe(true)
        }
        expect(verificationsAfter.map((v) => JSON.parse(v.row).consumed_at)).toEqual(Object.keys(rows).map(() => null))
      }))

    it.effect("a second run applies nothing and changes no row", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const { after } = yield* Upgrade
        const now = yield* outboxRows(sql)
        expect(yield* migrate(defaultMigrationsDirectory)).toEqual([])
        expect(yield* outboxRows(sql)).toEqual(now)
        expect(yield* sql`SELECT migration_id FROM effect_sql_migrations WHERE migration_id = ${upgradeId}`.withoutTransform)
          .toEqual([{ migration_id: upgradeId }])
        // The quarantined rows stay quarantined: the migration is not re-run against them.
        expect(now.get(rows.sending.id)).toEqual(after.get(rows.sending.id))
      }))

    it.effect("the reset_mail_outbox_delivered_fingerprint constraint refuses a new delivered row without a fingerprint and accepts one with it", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const insert = (id: string, fingerprint: string | null) =>
          sql`INSERT INTO reset_mail_outbox (id, verification_id, tenant_id, state, attempt, next_attempt_at, provider_status,
                                             fingerprint, created_at, updated_at)
              VALUES (${id}, ${rows.delivered.verification}, ${tenant}, 'delivered', 1, ${old}, 202, ${fingerprint}, now(), now())`
        const error = yield* Effect.flip(insert(uuid(201), null))
        expect(refusal(error)).toEqual({ code: "23514", constraint: "reset_mail_outbox_delivered_fingerprint" })
        yield* insert(uuid(202), "a".repeat(64))
        expect(yield* sql`SELECT id::text AS id FROM reset_mail_outbox WHERE id IN (${uuid(201)}, ${uuid(202)})`.withoutTransform)
          .toEqual([{ id: uuid(202) }])
      }))

    it.effect("after the upgrade only the unattempted row is claimed, and it is delivered only once its fingerprint is stored", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const repo = yield* Effect.provide(ResetMailRepo, ResetMailRepo.Default)
        const now = new Date()
        const claim = yield* repo.claimOne(now, "migration-test")
        expect(claim).toEqual({ id: rows.unattempted.id, verification_id: rows.unattempted.verification, tenant_id: tenant, attempt: 1, fingerprint: null })
        // Nothing else is due: the quarantined rows are never sent again.
        expect(yield* repo.claimOne(now, "migration-test")).toBeUndefined()

        const unfingerprinted = yield* Effect.flip(repo.finish(claim!, { state: "delivered", reason: null, providerStatus: 202, at: now }))
        expect(unfingerprinted).toMatchObject({ _tag: "ResetMailStorageUnavailable", operation: "finish" })
        expect(yield* sql`SELECT state FROM reset_mail_outbox WHERE id = ${rows.unattempted.id}`.withoutTransform)
          .toEqual([{ state: "sending" }])

        const digest = "0123456789abcdef".repeat(4)
        yield* repo.setFingerprint(claim!, digest, now)
        yield* repo.finish(claim!, { state: "delivered", reason: null, providerStatus: 202, at: now })
        expect(yield* sql`SELECT state, fingerprint, attempt FROM reset_mail_outbox WHERE id = ${rows.unattempted.id}`.withoutTransform)
          .toEqual([{ state: "delivered", fingerprint: digest, attempt: 1 }])
      }))
  })
})
