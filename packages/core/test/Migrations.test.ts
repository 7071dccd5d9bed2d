import { describe, expect, it } from "@effect/vitest"
import { BunContext } from "@effect/platform-bun"
import { Migrator, SqlClient } from "@effect/sql"
import { defaultMigrationsDirectory, listMigrationFiles, migrationsTable, runMigrations } from "@delivery/core"
import { connect, freshDatabaseClient } from "@delivery/testing"
import { PgClusterFromVitest } from "@delivery/testing/vitest"
import { Effect, Exit } from "effect"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

const folder = (files: Record<string, string>) => {
  const dir = mkdtempSync(join(tmpdir(), "migrations-"))
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text)
  return dir
}

const ordered = {
  "0001_demo_create.sql": "CREATE TABLE demo (id int primary key);",
  "0002_demo_alter.sql": "ALTER TABLE demo ADD COLUMN label text NOT NULL DEFAULT 'x';\nCREATE INDEX demo_label ON demo (label);",
  "0003_demo_seed.sql": "INSERT INTO demo (id, label) VALUES (1, 'seeded');"
}

const migrateWith = (sql: SqlClient.SqlClient, dir: string) =>
  runMigrations(dir).pipe(Effect.provideService(SqlClient.SqlClient, sql), Effect.provide(BunContext.layer))

const recorded = (sql: SqlClient.SqlClient) =>
  sql<{ migration_id: number; name: string }>`SELECT migration_id, name FROM ${sql(migrationsTable)} ORDER BY migration_id`
    .withoutTransform

describe("migrations (applied at start-up by the Migrator through the .sql loader)", () => {
  it.scoped("every file in migrations/ is applied, in id order, each once", () =>
    Effect.gen(function* () {
      const { sql } = yield* freshDatabaseClient()
      const applied = yield* migrateWith(sql, folder(ordered))
      // 0002 alters what 0001 created and 0003 uses 0002's column: any other order fails.
      expect(applied).toEqual([[1, "demo_create"], [2, "demo_alter"], [3, "demo_seed"]])
      expect(yield* recorded(sql)).toEqual([
        { migration_id: 1, name: "demo_create" },
        { migration_id: 2, name: "demo_alter" },
        { migration_id: 3, name: "demo_seed" }
      ])
      expect(yield* sql`SELECT id, label FROM demo`).toEqual([{ id: 1, label: "seeded" }])
    }).pipe(Effect.provide(PgClusterFromVitest)))

  it.scoped("the repository's own migrations all apply on an empty database and are all recorded", () =>
    Effect.gen(function* () {
      const { sql } = yield* freshDatabaseClient()
      const files = yield* listMigrationFiles(defaultMigrationsDirectory).pipe(Effect.provide(BunContext.layer))
      yield* migrateWith(sql, defaultMigrationsDirectory)
      const rows = yield* recorded(sql)
      expect(rows.map((row) => row.migration_id)).toEqual(files.map((file) => file.id))
    }).pipe(Effect.provide(PgClusterFromVitest)))

  it.scoped("a second start applies nothing", () =>
    Effect.gen(function* () {
      const { sql } = yield* freshDatabaseClient()
      const dir = folder(ordered)
      expect((yield* migrateWith(sql, dir)).length).toBe(3)
      expect(yield* migrateWith(sql, dir)).toEqual([])
      expect(yield* sql`SELECT count(*)::int AS n FROM demo`).toEqual([{ n: 1 }])
    }).pipe(Effect.provide(PgClusterFromVitest)))

  it.scoped("two backends starting at once do not collide: one applies, the other applies nothing", () =>
    Effect.gen(function* () {
      const { db, sql } = yield* freshDatabaseClient()
      const other = yield* connect(db.url)
      const dir = folder({ ...ordered, "0004_demo_slow.sql": "SELECT pg_sleep(0.3);" })
      const [a, b] = yield* Effect.all([migrateWith(sql, dir), migrateWith(other, dir)], { concurrency: 2 })
      expect([a.length, b.length].sort()).toEqual([0, 4])
      expect((yield* recorded(sql)).length).toBe(4)
    }).pipe(Effect.provide(PgClusterFromVitest)))

  it.scoped("a failing migration applies nothing of its batch, and start-up fails", () =>
    Effect.gen(function* () {
      const { sql } = yield* freshDatabaseClient()
      const dir = folder({ "0001_demo_create.sql": ordered["0001_demo_create.sql"], "0002_demo_broken.sql": "ALTER TABLE nope ADD x int;" })
      const exit = yield* Effect.exit(migrateWith(sql, dir))
      expect(Exit.isFailure(exit)).toBe(true)
      expect(yield* sql`SELECT to_regclass('demo') AS t`).toEqual([{ t: null }])
      expect(yield* sql`SELECT to_regclass(${migrationsTable}) AS t`).toEqual([{ t: null }])
    }).pipe(Effect.provide(PgClusterFromVitest)))

  it.scoped("a file numbered below the latest applied one is never skipped silently: start-up fails naming it", () =>
    Effect.gen(function* () {
      const { sql } = yield* freshDatabaseClient()
      const dir = folder({ "0001_demo_create.sql": ordered["0001_demo_create.sql"], "0003_demo_seed.sql": "INSERT INTO demo VALUES (1);" })
      yield* migrateWith(sql, dir)
      writeFileSync(join(dir, "0002_demo_late.sql"), "ALTER TABLE demo ADD COLUMN late int;")
      const error = yield* Effect.flip(migrateWith(sql, dir))
      expect(error).toBeInstanceOf(Migrator.MigrationError)
      expect((error as Migrator.MigrationError).message).toContain("2_demo_late")
    }).pipe(Effect.provide(PgClusterFromVitest)))

  it.scoped("a file that is not named NNNN_name.sql stops start-up and changes nothing", () =>
    Effect.gen(function* () {
      const { sql } = yield* freshDatabaseClient()
      const error = yield* Effect.flip(migrateWith(sql, folder({ "1_bad.sql": "SELECT 1;" })))
      expect((error as Migrator.MigrationError).message).toContain("1_bad.sql")
      expect(yield* sql`SELECT to_regclass(${migrationsTable}) AS t`).toEqual([{ t: null }])
    }).pipe(Effect.provide(PgClusterFromVitest)))

  it.effect("a file name must be exactly NNNN_name.sql: anything before the id or after .sql stops start-up with bad-state naming the file; dot files are not migrations", () =>
    Effect.gen(function* () {
      const list = (files: Record<string, string>) => listMigrationFiles(folder(files)).pipe(Effect.provide(BunContext.layer))
      for (const name of ["x0001_demo.sql", "0001_demo.sql.bak", "0001_demo.sqlx", "10001_demo.sql"]) {
        const error = yield* Effect.flip(list({ "0001_first.sql": "SELECT 1;", [name]: "SELECT 1;" }))
        expect([name, error.reason, error.message]).toEqual([name, "bad-state", `migration file name must be NNNN_name.sql: ${name}`])
      }
      const listed = yield* list({ ".keep": "", "0002_b.sql": "SELECT 1;", "0001_a.sql": "SELECT 1;" })
      expect(listed.map(({ id, name }) => [id, name])).toEqual([[1, "a"], [2, "b"]])
    }))

  it.effect("a migrations folder that cannot be read stops start-up with import-error naming the folder", () =>
    Effect.gen(function* () {
      const missing = join(tmpdir(), "no-such-migrations-folder")
      const error = yield* Effect.flip(listMigrationFiles(missing).pipe(Effect.provide(BunContext.layer)))
      expect(error).toBeInstanceOf(Migrator.MigrationError)
      expect([error.reason, error.message]).toEqual(["import-error", `cannot read ${missing}`])
    }))

  it.scoped("every file missing from the record is named in one bad-state message, comma-separated", () =>
    Effect.gen(function* () {
      const { sql } = yield* freshDatabaseClient()
      const dir = folder({ "0001_demo_create.sql": ordered["0001_demo_create.sql"], "0005_demo_seed.sql": "INSERT INTO demo VALUES (1);" })
      yield* migrateWith(sql, dir)
      writeFileSync(join(dir, "0002_demo_late.sql"), "SELECT 1;")
      writeFileSync(join(dir, "0004_demo_later.sql"), "SELECT 1;")
      const error = yield* Effect.flip(migrateWith(sql, dir))
      expect(error).toBeInstanceOf(Migrator.MigrationError)
      const { message, reason } = error as Migrator.MigrationError
      expect([reason, message]).toEqual(["bad-state", "migrations not applied: 2_demo_late, 4_demo_later"])
    }).pipe(Effect.provide(PgClusterFromVitest)))
})
