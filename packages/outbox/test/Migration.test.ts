import { defaultMigrationsDirectory, runMigrations } from "@delivery/core"
import { EmptyTestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient } from "@effect/sql"
import { BunContext } from "@effect/platform-bun"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from "node:fs"
import { join } from "node:path"

// migrations/0034_outbox_scope_on_envelopes.sql as an upgrade: a database at 0033 with messages in every state, then
// the repository's whole migrations/ folder, as a backend start after the upgrade runs it.

const upgradeId = 34
const uuid = (n: number) => `00000000-0000-4000-8000-${n.toString(16).padStart(12, "0")}`
const createdAt = (n: number) => new Date(Date.UTC(2024, 4, 1, 10, 0, n))
const hex = "ab".repeat(32)

const migrate = (directory: string) => runMigrations(directory).pipe(Effect.provide(BunContext.layer))

const migrateUntil = (id: number) =>
  Effect.acquireUseRelease(
    Effect.sync(() => mkdtempSync(join("/tmp", "outbox-migration-"))),
    (directory) => {
      for (const name of readdirSync(defaultMigrationsDirectory)) {
        const match = /^(\d{4})_/.exec(name)
        if (match !== null && Number(match[1]) < id) copyFileSync(join(defaultMigrationsDirectory, name), join(directory, name))
      }
      return migrate(directory)
    },
    (directory) => Effect.sync(() => rmSync(directory, { recursive: true, force: true }))
  )

layer(EmptyTestDatabaseLive, { excludeTestServices: true })("outbox upgrade to 0034 (the console's scope index on the envelopes)", (it) => {
  it.effect("every envelope takes its message's enqueue time, the envelopes stay immutable, and the state rows keep only the primary key, claim and dead-letter indexes", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const firstRun = yield* migrateUntil(upgradeId)
      expect(firstRun.at(-1)?.[0]).toBe(upgradeId - 1)
      const states = [
        { state: "pending", due: true, lease: false, delivered: false, dead: false },
        { state: "delivering", due: true, lease: true, delivered: false, dead: false },
        { state: "delivered", due: false, lease: false, delivered: true, dead: false },
        { state: "dead", due: false, lease: false, delivered: false, dead: true }
      ]
      for (const [i, s] of states.entries()) {
        const id = uuid(i + 1)
        yield* sql`INSERT INTO outbox_envelopes (id, tenant, project, idempotency_key, request_sha256, event_identity, envelope)
                   VALUES (${id}, 'acme', 'web', ${`k-${i}`}, ${hex}, ${hex}, '{}')`
        yield* sql`INSERT INTO outbox_messages (id, tenant, project, state, max_attempts, attempt_ceiling, attempt, due_at,
                                                lease_owner, dead_reason, created_at, delivered_at, dead_at)
                   VALUES (${id}, 'acme', 'web', ${s.state}, 3, 3, 1, ${s.due ? createdAt(30) : null},
                           ${s.lease ? "worker-1" : null}, ${s.dead ? "rejected" : null}, ${createdAt(i)},
                           ${s.delivered ? createdAt(40) : null}, ${s.dead ? createdAt(50) : null})`
      }
      const upgradeRun = yield* migrate(defaultMigrationsDirectory)
      expect(upgradeRun[0]).toEqual([upgradeId, "outbox_scope_on_envelopes"])

      const rows = yield* sql<{ id: string; created_at: Date }>`SELECT id::text, created_at FROM outbox_envelopes ORDER BY id`
      expect(rows).toEqual(states.map((_, i) => ({ id: uuid(i + 1), created_at: createdAt(i) })))
      const refused = yield* Effect.flip(sql`UPDATE outbox_envelopes SET created_at = now() WHERE id = ${uuid(1)}`)
      expect(String(refused.cause)).toContain("outbox envelopes are immutable")
      const indexes = yield* sql<{ table: string; name: string }>`
        SELECT tablename AS table, indexname AS name FROM pg_indexes
        WHERE tablename IN ('outbox_messages', 'outbox_envelopes') ORDER BY 1, 2`
      expect(indexes.filter((r) => r.table === "outbox_messages").map((r) => r.name))
        .toEqual(["outbox_messages_dead", "outbox_messages_due", "outbox_messages_pkey"])
      expect(indexes.map((r) => r.name)).toContain("outbox_envelopes_scope")
    }))
})
