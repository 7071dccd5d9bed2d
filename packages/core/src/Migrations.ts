import { FileSystem, Path } from "@effect/platform"
import { Migrator, SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { join } from "node:path"
import { repositoryRootOf } from "./RepositoryRoot.ts"

/** The repository's `migrations/` folder, wherever the process was started from. */
export const defaultMigrationsDirectory = join(repositoryRootOf(import.meta.url), "migrations")

const fileName = /^(\d{4})_([a-z0-9][a-z0-9_-]*)\.sql$/

export const migrationsTable = "effect_sql_migrations"

// A fixed advisory-lock key: every backend process migrates under it, so two starting at once never collide.
const migrationLockKey = 72_110_001

export interface SqlMigrationFile {
  readonly id: number
  readonly name: string
  readonly path: string
}

/** Lists `NNNN_name.sql` files in id order; a file that does not follow the pattern stops start-up. */
export const listMigrationFiles = (directory: string) =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const names = (yield* fs.readDirectory(directory)).filter((name) => !name.startsWith(".")).sort()
    const files: Array<SqlMigrationFile> = []
    for (const name of names) {
      const match = fileName.exec(name)
      if (match === null) {
        return yield* new Migrator.MigrationError({
          reason: "bad-state",
          message: `migration file name must be NNNN_name.sql: ${name}`
        })
      }
      files.push({ id: Number(match[1]), name: match[2]!, path: path.join(directory, name) })
    }
    return files
  }).pipe(
    // Bun's file system reports every failure of readDirectory as a SystemError (a NUL byte included); a
    // BadArgument is caught all the same for any other platform.
    // Stryker disable next-line StringLiteral: no input makes Bun's readDirectory fail with BadArgument
    Effect.catchTag("SystemError", "BadArgument", (cause) =>
      new Migrator.MigrationError({ reason: "import-error", message: `cannot read ${directory}`, cause }))
  )

/**
 * A Migrator loader for plain `.sql` files (the library's own file loader skips them).
 * It returns each migration as an effect; the Migrator decides which ones run.
 */
export const sqlFileLoader = (directory: string): Migrator.Loader<FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const files = yield* listMigrationFiles(directory)
    return files.map((file): Migrator.ResolvedMigration => [
      file.id,
      file.name,
      Effect.succeed(
        Effect.flatMap(fs.readFileString(file.path), (text) =>
          Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(text).raw))
      )
    ])
  })

/**
 * Applies every pending migration in one transaction under an advisory lock, then checks that every
 * file is recorded: a file numbered below the latest applied id would otherwise be skipped silently.
 */
export const runMigrations = (directory: string = defaultMigrationsDirectory) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const migrate = Migrator.make({})({ loader: sqlFileLoader(directory), table: migrationsTable })
    const applied = yield* sql.withTransaction(
      Effect.gen(function* () {
        yield* sql`SELECT pg_advisory_xact_lock(${migrationLockKey})`
        yield* sql`CREATE TABLE IF NOT EXISTS ${sql(migrationsTable)} (
          migration_id integer primary key,
          created_at timestamp with time zone not null default now(),
          name text not null
        )`
        return yield* migrate
      })
    )
    yield* verifyMigrations(directory)
    return applied
  }).pipe(Effect.withSpan("Migrations.run"))

/** Fails unless every migration file is recorded as applied under its own name. */
export const verifyMigrations = (directory: string = defaultMigrationsDirectory) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const files = yield* listMigrationFiles(directory)
    const rows = yield* sql<{ readonly migration_id: number; readonly name: string }>`
      SELECT migration_id, name FROM ${sql(migrationsTable)}`.withoutTransform
    const recorded = new Map(rows.map((row) => [row.migration_id, row.name]))
    const missing = files.filter((file) => recorded.get(file.id) !== file.name)
    if (missing.length > 0) {
      return yield* new Migrator.MigrationError({
        reason: "bad-state",
        message: `migrations not applied: ${missing.map((file) => `${file.id}_${file.name}`).join(", ")}`
      })
    }
    return files.length
  })
