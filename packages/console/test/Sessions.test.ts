import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { ConfigProvider, Effect, Layer, Option, Redacted } from "effect"
import { createHash } from "node:crypto"
import { ConsoleSessions, csrfTokenOf } from "../src/ConsoleSessions.ts"

// Console sessions on real PostgreSQL: what the browser holds (a random token) against what the table holds.

const withTtl = (ttl: string) =>
  ConsoleSessions.Default.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["CONSOLE_SESSION_TTL", ttl]])))))

const SuiteLayer = Layer.mergeAll(withTtl("2 seconds")).pipe(Layer.provideMerge(TestDatabaseLive))

layer(SuiteLayer, { excludeTestServices: true })("console sessions", (it) => {
  it.effect("a session is found by its token only: the table keeps the token's SHA-256 and the actor, never the token; unknown, malformed and foreign tokens find nothing", () =>
    Effect.gen(function* () {
      const sessions = yield* ConsoleSessions
      const sql = yield* SqlClient.SqlClient
      const started = yield* sessions.start("operator:console")
      const token = Redacted.value(started.token)
      expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/)
      const found = yield* sessions.resolve(token)
      expect(Option.getOrThrow(found)).toMatchObject({ actor: "operator:console", csrf: csrfTokenOf(token) })
      const rows = yield* sql<{ token_hash: Uint8Array; actor: string }>`SELECT token_hash, actor FROM console_sessions`.withoutTransform
      const stored = rows.find((row) => Buffer.from(row.token_hash).equals(createHash("sha256").update(token).digest()))
      expect(stored?.actor).toBe("operator:console")
      expect(JSON.stringify(rows.map((row) => Buffer.from(row.token_hash).toString("base64url")))).not.toContain(token)

      const other = Redacted.value((yield* sessions.start("operator:console")).token)
      expect(other).not.toBe(token)
      expect(Option.isNone(yield* sessions.resolve(`${token.slice(0, 42)}${token[42] === "A" ? "B" : "A"}`))).toBe(true)
      expect(Option.isNone(yield* sessions.resolve(`${token}x`))).toBe(true)
      expect(Option.isNone(yield* sessions.resolve(""))).toBe(true)
      expect(Option.isNone(yield* sessions.resolve("' OR 1=1 --"))).toBe(true)
    }))

  it.effect("the CSRF token is bound to its session: another session's token differs, and it does not reveal the session token", () =>
    Effect.gen(function* () {
      const sessions = yield* ConsoleSessions
      const a = yield* sessions.start("operator:console")
      const b = yield* sessions.start("operator:console")
      expect(a.session.csrf).not.toBe(b.session.csrf)
      expect(a.session.csrf).not.toContain(Redacted.value(a.token))
      expect(a.session.csrf).toBe(csrfTokenOf(Redacted.value(a.token)))
    }))

  it.effect("a session ends at its expiry (CONSOLE_SESSION_TTL, by the database's clock) and when it is ended; later sign-ins sweep expired rows", () =>
    Effect.gen(function* () {
      const sessions = yield* ConsoleSessions
      const sql = yield* SqlClient.SqlClient
      const expiring = yield* sessions.start("operator:console")
      const ended = yield* sessions.start("operator:console")
      const [row] = yield* sql<{ ttl: number }>`
        SELECT extract(epoch FROM expires_at - created_at)::float8 AS ttl FROM console_sessions
        WHERE token_hash = ${createHash("sha256").update(Redacted.value(expiring.token)).digest()}`.withoutTransform
      expect(row?.ttl).toBe(2)
      yield* sessions.end(Redacted.value(ended.token))
      expect(Option.isNone(yield* sessions.resolve(Redacted.value(ended.token)))).toBe(true)
      expect(Option.isSome(yield* sessions.resolve(Redacted.value(expiring.token)))).toBe(true)
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 2_100)))
      expect(Option.isNone(yield* sessions.resolve(Redacted.value(expiring.token)))).toBe(true)
      yield* sessions.start("operator:console")
      const [swept] = yield* sql<{ expired: number }>`
        SELECT count(*)::int AS expired FROM console_sessions WHERE expires_at <= now()`.withoutTransform
      expect(swept?.expired).toBe(0)
    }))
})
