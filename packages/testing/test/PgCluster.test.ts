import { describe, expect, it, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { TestDatabase } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"

layer(TestDatabaseLive, { excludeTestServices: true })("throwaway cluster", (it) => {
  it.effect("a suite gets its own migrated database on real PostgreSQL", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const db = yield* TestDatabase
      const [row] = yield* sql<{ db: string; version: string }>`SELECT current_database() AS db, current_setting('server_version_num') AS version`
      expect(row!.db).toBe(db.name)
      expect(Number(row!.version)).toBeGreaterThanOrEqual(150000)
    }))
})
void describe; void it
