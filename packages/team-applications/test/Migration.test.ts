import { defaultMigrationsDirectory, runMigrations } from "@delivery/core"
import { EmptyTestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient } from "@effect/sql"
import { BunContext } from "@effect/platform-bun"
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { createHash } from "node:crypto"
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from "node:fs"
import { join } from "node:path"
import { QUEUE_NAME } from "../src/Domain.ts"

// Spec 002's migrations 0078 (migrations/0018_team_application_queue.sql) and 0079
// (migrations/0019_team_application_outbox_claims_dropped.sql) as an upgrade: a database at 0017 with rows in the
// outbox's first shape (its own claim columns), then the repository's whole migrations/ folder, as a backend start
// after the upgrade would run it.
//
//   Migration 0078 moved the claim outbox's rows onto the queue with their ids, statuses, and attempt counts;
//   migration 0079 dropped its claim columns.
//   team_application_delivery_state reads both rows: Pending, Processing while an attempt holds the lease, Failed
//   while a retry waits, or the outcome.

const upgradeId = 18
const tenant = "acme"
const old = new Date("2024-05-01T10:00:00.000Z")
const at = (ms: number) => new Date(old.getTime() + ms)
/** The first shape's stale-claim rule: a claim older than this had lost its lease. */
const staleClaimMs = 60_000
const claimColumns = ["state", "attempt", "next_attempt_at", "claimed_at", "lease_owner"] as const

const uuid = (n: number) => `00000000-0000-4000-8000-${n.toString(16).padStart(12, "0")}`

/** Four submissions, two notifications each (one per audience), so every outbox status has its own row. */
const applications = [uuid(101), uuid(102), uuid(103), uuid(104)] as const

interface OldRow {
  readonly id: string
  readonly application: string
  readonly audience: "applicant" | "team"
  readonly createdAt: Date
  readonly state: "pending" | "running" | "done"
  readonly attempt: number
  readonly failures: number
  readonly lastError: string | null
  readonly nextAttemptAt: Date
  readonly claimedAt: Date | null
  readonly leaseOwner: string | null
  readonly outcome: "delivered" | "rejected" | "exhausted" | "envelope-invalid" | null
  readonly outcomeAttempt: number | null
  readonly outcomeAt: Date | null
}

const row = (n: number, r: Partial<OldRow> & Pick<OldRow, "state" | "attempt">): OldRow => ({
  id: uuid(n),
  application: applications[Math.floor((n - 1) / 2)]!,
  audience: n % 2 === 1 ? "applicant" : "team",
  createdAt: at(n * 1_000),
  failures: 0,
  lastError: null,
  nextAttemptAt: at(n * 1_000),
  claimedAt: null,
  leaseOwner: null,
  outcome: null,
  outcomeAttempt: null,
  outcomeAt: null,
  ...r
})

/**
 * The outbox rows, one per status. `setupAt` is read when the rows are inserted (whole seconds, so that what
 * PostgreSQL stores is what JavaScript compares): the live claim's lease must still run when the tests read it.
 */
const makeRows = (setupAt: Date) => ({
  unattempted: row(1, { state: "pending", attempt: 0 }),
  // A temporary failure before the upgrade: back to pending, its retry waiting past the upgrade.
  attemptedPending: row(2, {
    state: "pending", attempt: 1, failures: 1, lastError: "provider-unavailable",
    nextAttemptAt: new Date(setupAt.getTime() + 3_600_000)
  }),
  // Claimed just before the old process stopped for the upgrade.
  runningLive: row(3, {
    state: "running", attempt: 2, failures: 1, lastError: "provider-timeout", nextAttemptAt: at(30_000),
    claimedAt: setupAt, leaseOwner: "old-host:4242:live"
  }),
  // Claimed long ago by a process that never came back: its lease is over.
  runningStale: row(4, { state: "running", attempt: 1, claimedAt: at(60_000), leaseOwner: "old-host:4141:gone" }),
  delivered: row(5, { state: "done", attempt: 1, outcome: "delivered", outcomeAttempt: 1, outcomeAt: at(120_000) }),
  rejected: row(6, {
    state: "done", attempt: 2, failures: 1, lastError: "provider-timeout",
    outcome: "rejected", outcomeAttempt: 2, outcomeAt: at(180_000)
  }),
  exhausted: row(7, {
    state: "done", attempt: 5, failures: 5, lastError: "provider-unavailable",
    outcome: "exhausted", outcomeAttempt: 5, outcomeAt: at(240_000)
  }),
  envelopeInvalid: row(8, {
    state: "done", attempt: 1, lastError: "envelope-invalid",
    outcome: "envelope-invalid", outcomeAttempt: 1, outcomeAt: at(300_000)
  })
} as const)
type Rows = ReturnType<typeof makeRows>

const envelopeOf = (r: OldRow) =>
  JSON.stringify({ audience: r.audience, subject: `Application ${r.application}`, text: `Hello from ${r.id}` })
const sha256 = (text: string) => createHash("sha256").update(text).digest("hex")

/** A timestamp as an ISO string, whether the driver hands back a Date or a string. */
const iso = (value: unknown) => value === null || value === undefined ? null : new Date(value as string | Date).toISOString()

type Json = Record<string, unknown>

/** Every row of a table as jsonb, so timestamps, nulls and numbers are compared exactly, in a stable order. */
const snapshot = (sql: SqlClient.SqlClient, table: string, orderBy: string) =>
  Effect.map(
    sql<{ readonly row: Json }>`SELECT to_jsonb(t) AS row FROM ${sql(table)} t ORDER BY ${sql.literal(orderBy)}`.withoutTransform,
    (list) => list.map(({ row }) => row)
  )

const outboxRows = (sql: SqlClient.SqlClient) =>
  Effect.map(snapshot(sql, "team_application_outbox", "effect_id"), (list) => new Map(list.map((r) => [r.effect_id as string, r])))

interface QueueRow {
  readonly sequence: number
  readonly id: string
  readonly queue_name: string
  readonly element: string
  readonly completed: boolean
  readonly exhausted: boolean
  readonly attempts: number
  readonly last_failure: string | null
  readonly available_at: string | null
  readonly acquired_at: string | null
  readonly acquired_by: string | null
  readonly lease_expires_at: string | null
  readonly ended_at: string | null
  readonly created_at: string | null
  readonly updated_at: string | null
}

const queueRows = (sql: SqlClient.SqlClient) =>
  Effect.map(
    sql<Json>`SELECT * FROM effect_queue ORDER BY sequence`.withoutTransform,
    (list) =>
      list.map((q): QueueRow => ({
        sequence: Number(q.sequence),
        id: q.id as string,
        queue_name: q.queue_name as string,
        element: q.element as string,
        completed: q.completed as boolean,
        exhausted: q.exhausted as boolean,
        attempts: q.attempts as number,
        last_failure: q.last_failure as string | null,
        available_at: iso(q.available_at),
        acquired_at: iso(q.acquired_at),
        acquired_by: q.acquired_by as string | null,
        lease_expires_at: iso(q.lease_expires_at),
        ended_at: iso(q.ended_at),
        created_at: iso(q.created_at),
        updated_at: iso(q.updated_at)
      }))
  )

const withoutClaimColumns = (r: Json | undefined) => {
  const rest: Json = { ...r }
  for (const column of claimColumns) delete rest[column]
  return rest
}

const migrate = (directory: string) => runMigrations(directory).pipe(Effect.provide(BunContext.layer))

interface Others {
  readonly applications: ReadonlyArray<Json>
  readonly commands: ReadonlyArray<Json>
  readonly audit: ReadonlyArray<Json>
}
const others = (sql: SqlClient.SqlClient) =>
  Effect.all({
    applications: snapshot(sql, "team_applications", "id"),
    commands: snapshot(sql, "team_application_commands", "tenant_id, command_id"),
    audit: snapshot(sql, "team_application_audit", "audit_id")
  })

/** The database as it was at 0017, and the same database right after the upgrade, before any test touches it. */
class Upgrade extends Context.Tag("Migration.test/Upgrade")<Upgrade, {
  readonly rows: Rows
  readonly allRows: ReadonlyArray<OldRow>
  readonly firstRun: ReadonlyArray<readonly [number, string]>
  readonly upgradeRun: ReadonlyArray<readonly [number, string]>
  readonly before: Map<string, Json>
  readonly after: Map<string, Json>
  readonly queue: ReadonlyArray<QueueRow>
  readonly othersBefore: Others
  readonly othersAfter: Others
}>() {}

const UpgradeLive = Layer.scoped(
  Upgrade,
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const oldDirectory = yield* Effect.acquireRelease(
      Effect.sync(() => mkdtempSync(join("/tmp", "tam-"))),
      (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
    )
    for (const name of readdirSync(defaultMigrationsDirectory)) {
      const id = /^(\d{4})_/.exec(name)
      if (id !== null && Number(id[1]) < upgradeId) copyFileSync(join(defaultMigrationsDirectory, name), join(oldDirectory, name))
    }
    const firstRun = yield* migrate(oldDirectory)
    const rows = makeRows(new Date(Math.floor(Date.now() / 1_000) * 1_000))
    const allRows = Object.values(rows)

    for (const [n, application] of applications.entries()) {
      const commandId = `cmd-${n + 1}:team.apply`
      yield* sql`INSERT INTO team_applications (id, tenant_id, command_id, team_slug, team_name, team_email, applicant_name,
                                                applicant_email, message, submitted_by, created_at)
                 VALUES (${application}, ${tenant}, ${commandId}, ${`team-${n + 1}`}, ${`Team ${n + 1}`},
                         ${`team${n + 1}@example.com`}, ${`Applicant ${n + 1}`}, ${`applicant${n + 1}@example.com`},
                         ${`I would like to join team ${n + 1}.`}, ${`user:applicant-${n + 1}`}, ${old})`
      yield* sql`INSERT INTO team_application_commands (tenant_id, command_id, request_sha256, application_id, response, created_at)
                 VALUES (${tenant}, ${commandId}, ${sha256(commandId)}, ${application},
                         ${JSON.stringify({ applicationId: application, status: "submitted" })}::jsonb, ${old})`
      yield* sql`INSERT INTO team_application_audit (tenant_id, application_id, action, actor, correlation_id, at)
                 VALUES (${tenant}, ${application}, 'application-submitted', ${`user:applicant-${n + 1}`},
                         ${sha256(application).slice(0, 32)}, ${old})`
    }
    for (const r of allRows) {
      const envelope = envelopeOf(r)
      yield* sql`INSERT INTO team_application_outbox (effect_id, application_id, tenant_id, audience, envelope, envelope_sha256,
                                                      failures, last_error, outcome, outcome_attempt, outcome_at, created_at,
                                                      state, attempt, next_attempt_at, claimed_at, lease_owner)
                 VALUES (${r.id}, ${r.application}, ${tenant}, ${r.audience}, ${envelope}, ${sha256(envelope)},
                         ${r.failures}, ${r.lastError}, ${r.outcome}, ${r.outcomeAttempt}, ${r.outcomeAt}, ${r.createdAt},
                         ${r.state}, ${r.attempt}, ${r.nextAttemptAt}, ${r.claimedAt}, ${r.leaseOwner})`
    }

    const before = yield* outboxRows(sql)
    const othersBefore = yield* others(sql)
    const upgradeRun = yield* migrate(defaultMigrationsDirectory)
    return {
      rows,
      allRows,
      firstRun,
      upgradeRun,
      before,
      after: yield* outboxRows(sql),
      queue: yield* queueRows(sql),
      othersBefore,
      othersAfter: yield* others(sql)
    }
  })
).pipe(Layer.provideMerge(EmptyTestDatabaseLive))

const isoOf = (date: Date | null) => date === null ? null : date.toISOString()

describe("team-application outbox upgrade (spec 002, migrations 0078 and 0079: migrations/0018 and 0019)", () => {
  layer(UpgradeLive, { excludeTestServices: true })("from 0017 with rows in the claim outbox's shape", (it) => {
    it.effect("the old database is at 0017 (the claim outbox) and the upgrade applies 0078 (0018), then 0079 (0019), then any later migration", () =>
      Effect.gen(function* () {
        const upgrade = yield* Upgrade
        const { allRows } = upgrade
        expect(upgrade.firstRun.map(([id]) => id)).toEqual(Array.from({ length: upgradeId - 1 }, (_, i) => i + 1))
        expect(upgrade.firstRun.at(-1)).toEqual([17, "team_applications"])
        expect(upgrade.upgradeRun.slice(0, 2)).toEqual([[18, "team_application_queue"], [19, "team_application_outbox_claims_dropped"]])
        expect(upgrade.upgradeRun.map(([id]) => id)).toEqual(Array.from({ length: upgrade.upgradeRun.length }, (_, i) => upgradeId + i))
        expect(upgrade.before.size).toBe(allRows.length)
        // Every old status is present before the upgrade.
        expect(allRows.map((r) => [upgrade.before.get(r.id)!.state, upgrade.before.get(r.id)!.outcome])).toEqual([
          ["pending", null], ["pending", null], ["running", null], ["running", null],
          ["done", "delivered"], ["done", "rejected"], ["done", "exhausted"], ["done", "envelope-invalid"]
        ])
      }))

    it.effect("Migration 0078 moved the claim outbox's rows onto the queue with their ids, statuses, and attempt counts: one item per row, its element naming only the effect", () =>
      Effect.gen(function* () {
        const { allRows, queue, rows } = yield* Upgrade
        expect(queue.map((q) => q.id).sort()).toEqual(allRows.map((r) => r.id).sort())
        // In the order the outbox created them.
        expect(queue.map((q) => q.id)).toEqual(allRows.map((r) => r.id))
        for (const q of queue) {
          expect([q.id, q.queue_name]).toEqual([q.id, QUEUE_NAME])
          expect([q.id, JSON.parse(q.element)]).toEqual([q.id, { effect: q.id }])
        }
        const byId = new Map(queue.map((q) => [q.id, q]))
        const status = (q: QueueRow) => q.completed ? "completed" : q.exhausted ? "exhausted" : q.acquired_at !== null ? "leased" : "pending"
        expect(allRows.map((r) => [r.id, status(byId.get(r.id)!), byId.get(r.id)!.attempts])).toEqual([
          [rows.unattempted.id, "pending", 0],
          [rows.attemptedPending.id, "pending", 1],
          [rows.runningLive.id, "leased", 2],
          [rows.runningStale.id, "leased", 1],
          [rows.delivered.id, "completed", 1],
          [rows.rejected.id, "completed", 2],
          [rows.exhausted.id, "exhausted", 5],
          [rows.envelopeInvalid.id, "completed", 1]
        ])
      }))

    it.effect("pending stays pending, due at its next_attempt_at, its last error kept as the queue's last_failure", () =>
      Effect.gen(function* () {
        const { queue, rows } = yield* Upgrade
        const byId = new Map(queue.map((q) => [q.id, q]))
        for (const r of [rows.unattempted, rows.attemptedPending]) {
          const { sequence: _, element: __, ...q } = byId.get(r.id)!
          expect(q).toEqual({
            id: r.id, queue_name: QUEUE_NAME, completed: false, exhausted: false, attempts: r.attempt,
            last_failure: r.lastError, available_at: isoOf(r.nextAttemptAt),
            acquired_at: null, acquired_by: null, lease_expires_at: null, ended_at: null,
            created_at: isoOf(r.createdAt), updated_at: isoOf(r.createdAt)
          })
        }
        expect(new Date(byId.get(rows.attemptedPending.id)!.available_at!).getTime()).toBeGreaterThan(Date.now())
      }))

    it.effect("running keeps its lease until the first shape's 60-second stale-claim rule ended it (claimed_at + 60 s), with no owner the new store knows", () =>
      Effect.gen(function* () {
        const { queue, rows } = yield* Upgrade
        const byId = new Map(queue.map((q) => [q.id, q]))
        for (const r of [rows.runningLive, rows.runningStale]) {
          const { sequence: _, element: __, ...q } = byId.get(r.id)!
          expect(q).toEqual({
            id: r.id, queue_name: QUEUE_NAME, completed: false, exhausted: false, attempts: r.attempt,
            last_failure: r.lastError, available_at: isoOf(r.nextAttemptAt),
            acquired_at: isoOf(r.claimedAt), acquired_by: null,
            lease_expires_at: isoOf(new Date(r.claimedAt!.getTime() + staleClaimMs)), ended_at: null,
            created_at: isoOf(r.createdAt), updated_at: isoOf(r.claimedAt)
          })
        }
      }))

    it.effect("done is completed at its outcome_at (ended_at), except an exhausted outcome, which is the queue's exhausted state", () =>
      Effect.gen(function* () {
        const { queue, rows } = yield* Upgrade
        const byId = new Map(queue.map((q) => [q.id, q]))
        for (const r of [rows.delivered, rows.rejected, rows.exhausted, rows.envelopeInvalid]) {
          const { sequence: _, element: __, ...q } = byId.get(r.id)!
          expect(q).toEqual({
            id: r.id, queue_name: QUEUE_NAME,
            completed: r.outcome !== "exhausted", exhausted: r.outcome === "exhausted", attempts: r.attempt,
            last_failure: r.lastError, available_at: isoOf(r.nextAttemptAt),
            acquired_at: null, acquired_by: null, lease_expires_at: null, ended_at: isoOf(r.outcomeAt),
            created_at: isoOf(r.createdAt), updated_at: isoOf(r.outcomeAt)
          })
        }
      }))

    it.effect("Migration 0079 dropped its claim columns (and their due index); the outbox keeps the identity, the private envelope, the policy state and the outcome", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const columns = yield* sql<{ readonly column_name: string }>`
          SELECT column_name FROM information_schema.columns
          WHERE table_schema = current_schema() AND table_name = 'team_application_outbox'
          ORDER BY ordinal_position`.withoutTransform
        expect(columns.map((c) => c.column_name)).toEqual([
          "effect_id", "application_id", "tenant_id", "audience", "envelope", "envelope_sha256",
          "failures", "last_error", "outcome", "outcome_attempt", "outcome_at", "created_at"
        ])
        expect(yield* sql`SELECT indexname FROM pg_indexes WHERE indexname = 'team_application_outbox_due'`.withoutTransform)
          .toEqual([])
      }))

    it.effect("every other column of every outbox row is unchanged by 0078 and 0079", () =>
      Effect.gen(function* () {
        const { after, allRows, before } = yield* Upgrade
        expect([...after.keys()]).toEqual([...before.keys()])
        for (const r of allRows) {
          expect([r.id, after.get(r.id)]).toEqual([r.id, withoutClaimColumns(before.get(r.id))])
          for (const column of claimColumns) expect(after.get(r.id)).not.toHaveProperty(column)
        }
        // The envelope still matches its digest, byte for byte.
        for (const r of allRows) {
          const is = after.get(r.id)!
          expect([r.id, is.envelope, is.envelope_sha256]).toEqual([r.id, envelopeOf(r), sha256(envelopeOf(r))])
        }
      }))

    it.effect("team_application_delivery_state reads both rows: Pending, Processing while an attempt holds the lease, Failed while a retry waits, or the outcome", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const { rows } = yield* Upgrade
        const view = yield* sql<Json>`
          SELECT effect_id::text AS effect_id, application_id::text AS application_id, tenant_id, audience, state, attempts,
                 next_attempt_at, lease_expires_at, failures, last_error, outcome_at, created_at
          FROM team_application_delivery_state ORDER BY created_at, effect_id`.withoutTransform
        expect(view.map((v) => ({
          ...v,
          next_attempt_at: iso(v.next_attempt_at),
          lease_expires_at: iso(v.lease_expires_at),
          outcome_at: iso(v.outcome_at),
          created_at: iso(v.created_at)
        }))).toEqual((Object.keys(rows) as Array<keyof Rows>).map((key) => {
          const r = rows[key]
          const lease = r.claimedAt === null ? null : new Date(r.claimedAt.getTime() + staleClaimMs)
          const expected = {
            unattempted: { state: "pending", attempts: 0, next_attempt_at: null, lease_expires_at: null },
            attemptedPending: { state: "failed", attempts: 1, next_attempt_at: isoOf(rows.attemptedPending.nextAttemptAt), lease_expires_at: null },
            runningLive: { state: "processing", attempts: 2, next_attempt_at: null, lease_expires_at: isoOf(lease) },
            // The lease it held ended: it waits for the retry the stale-claim rule gives it, due when the lease ended.
            runningStale: { state: "failed", attempts: 1, next_attempt_at: isoOf(lease), lease_expires_at: isoOf(lease) },
            delivered: { state: "delivered", attempts: 1, next_attempt_at: null, lease_expires_at: null },
            rejected: { state: "rejected", attempts: 2, next_attempt_at: null, lease_expires_at: null },
            exhausted: { state: "exhausted", attempts: 5, next_attempt_at: null, lease_expires_at: null },
            envelopeInvalid: { state: "envelope-invalid", attempts: 1, next_attempt_at: null, lease_expires_at: null }
          }[key]
          return {
            effect_id: r.id, application_id: r.application, tenant_id: tenant, audience: r.audience,
            ...expected,
            failures: r.failures, last_error: r.lastError, outcome_at: isoOf(r.outcomeAt), created_at: isoOf(r.createdAt)
          }
        }))
      }))

    it.effect("a second run applies nothing and changes no row of the outbox or the queue", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const { after, queue } = yield* Upgrade
        expect(yield* migrate(defaultMigrationsDirectory)).toEqual([])
        expect(yield* outboxRows(sql)).toEqual(after)
        expect(yield* queueRows(sql)).toEqual(queue)
        expect(yield* sql`SELECT migration_id, name FROM effect_sql_migrations WHERE migration_id IN (18, 19) ORDER BY migration_id`.withoutTransform)
          .toEqual([{ migration_id: 18, name: "team_application_queue" }, { migration_id: 19, name: "team_application_outbox_claims_dropped" }])
      }))

    it.effect("a submission's application, command receipt and audit row are untouched by the upgrade, and the audit stays append-only", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const { othersAfter, othersBefore } = yield* Upgrade
        expect(othersBefore.applications).toHaveLength(applications.length)
        expect(othersBefore.commands).toHaveLength(applications.length)
        expect(othersBefore.audit).toHaveLength(applications.length)
        expect(othersAfter).toEqual(othersBefore)
        expect(yield* others(sql)).toEqual(othersBefore)
        const refused = yield* Effect.flip(sql`UPDATE team_application_audit SET at = now()`)
        expect(refused.message + String((refused.cause as { readonly message?: string }).message)).toContain("append-only")
      }))
  })
})
