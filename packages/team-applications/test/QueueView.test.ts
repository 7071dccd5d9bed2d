import { SqlClient, type Statement } from "@effect/sql"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { expect, layer } from "@effect/vitest"
import { Context, Duration, Effect, Layer, Option } from "effect"
import { randomBytes } from "node:crypto"
import { TeamApplications } from "../src/TeamApplications.ts"
import type { TeamApplicationsSettings } from "../src/TeamApplicationsConfig.ts"
import { teamApplicationsLayer } from "../src/TeamApplicationsLive.ts"

// Team-application notifications as the console and /metrics read them (core's QueueView), on real PostgreSQL.
// Notifications are submitted through the real path (TeamApplications.submit: an outbox row and a queue item each),
// then their queue items and outcomes are moved to known states at known times relative to the database's now().

const settings: TeamApplicationsSettings = {
  mode: "disabled",
  defaulted: false,
  sender: Option.some({ address: "teams@club.example", name: "Club" }),
  provider: Option.none(),
  timing: {
    staleMs: 5_000,
    pollInterval: Duration.millis(20),
    maxAttempts: 3,
    retryBase: Duration.millis(100),
    retryCap: Duration.millis(100)
  }
}

const ago = (sql: SqlClient.SqlClient, seconds: number) => sql`now() - ${seconds} * interval '1 second'`
const item = (id: string, set: (sql: SqlClient.SqlClient) => Statement.Fragment) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql`UPDATE effect_queue SET ${set(sql)} WHERE id = ${id}`).pipe(Effect.orDie)

/** Waiting for its first attempt (attempts 0) or for a retry, until `availableIn` seconds from now. */
const waiting = (id: string, attempts: number, availableIn: number) =>
  item(id, (sql) => sql`attempts = ${attempts}, available_at = ${ago(sql, -availableIn)}, acquired_at = NULL, acquired_by = NULL,
    lease_expires_at = NULL`)
/** Claimed (one attempt), its lease ending `leaseEndsIn` seconds from now. */
const leased = (id: string, availableAgo: number, leaseEndsIn: number) =>
  item(id, (sql) => sql`attempts = 1, available_at = ${ago(sql, availableAgo)}, acquired_at = ${ago(sql, 60)},
    acquired_by = gen_random_uuid(), lease_expires_at = ${ago(sql, -leaseEndsIn)}`)
/** Settled: the outbox's outcome and the queue's end (completed, or exhausted), `endedAgo` seconds ago. */
const settled = (id: string, outcome: "delivered" | "rejected" | "exhausted" | "envelope-invalid", endedAgo: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.zipRight(
      sql`UPDATE team_application_outbox SET outcome = ${outcome}, outcome_attempt = 1, outcome_at = ${ago(sql, endedAgo)}
          WHERE effect_id = ${id}::uuid`,
      sql`UPDATE effect_queue SET attempts = 1, available_at = ${ago(sql, 7200)}, acquired_at = NULL, acquired_by = NULL,
          lease_expires_at = NULL, completed = ${outcome !== "exhausted"}, exhausted = ${outcome === "exhausted"},
          ended_at = ${ago(sql, endedAgo)} WHERE id = ${id}`
    )).pipe(Effect.orDie)

const world = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`DELETE FROM effect_queue`.pipe(Effect.orDie)
  yield* sql`DELETE FROM team_application_outbox`.pipe(Effect.orDie)
  const applications = Context.get(yield* Layer.build(teamApplicationsLayer(settings)), TeamApplications)
  const tenant = `t-${randomBytes(4).toString("hex")}`
  /** `count` notifications' effect ids (two per submission: the applicant's and the team's). */
  const notifications = (count: number) =>
    Effect.gen(function* () {
      const ids: Array<string> = []
      while (ids.length < count) {
        const { response } = yield* applications.submit({
          commandId: `cmd-${randomBytes(6).toString("hex")}`,
          team: { slug: "rowing", name: "Rowing Club", email: "board@rowing.example" },
          applicant: { name: "Alex Applicant", email: "alex@applicant.example" },
          message: "I row on weekends."
        }, { tenant, account: "acct-1", actor: "api-key:k1", correlationId: randomBytes(16).toString("hex") }).pipe(Effect.orDie)
        ids.push(...response.notifications.map((n) => n.effectId))
      }
      return ids
    })
  return { sql, view: applications.queueView, notifications }
})

layer(TestDatabaseLive, { excludeTestServices: true })("team-application queue view (real PostgreSQL)", (it) => {
  it.scoped("notifications are counted by delivery state in lifecycle order, zeros included; a settled notification by its outcome, not by the queue's completed flag", () =>
    Effect.gen(function* () {
      const { notifications, sql, view } = yield* world
      // The first stays as submitted: pending.
      const [, waitingRetry, held, delivered, rejected, invalid, exhausted, orphan] = yield* notifications(8)
      yield* waiting(waitingRetry!, 1, 60)
      yield* leased(held!, 10, 30)
      yield* settled(delivered!, "delivered", 60)
      yield* settled(rejected!, "rejected", 60)
      yield* settled(invalid!, "envelope-invalid", 60)
      yield* settled(exhausted!, "exhausted", 60)
      yield* sql`DELETE FROM effect_queue WHERE id = ${orphan!}`
      expect([view.family, view.title]).toEqual(["team-applications", "Team-application notifications"])
      expect(yield* view.snapshot).toEqual({
        family: "team-applications",
        states: [
          { state: "pending", count: 1 },
          { state: "processing", count: 1 },
          { state: "failed", count: 1 },
          { state: "delivered", count: 1 },
          { state: "rejected", count: 1 },
          { state: "exhausted", count: 1 },
          { state: "envelope-invalid", count: 1 },
          { state: "missing", count: 1 }
        ],
        oldestDueAgeSeconds: expect.any(Number),
        completedLastHour: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
      })
    }))

  it.scoped("due is a queue item the claim would take now, its retry delay over and no live lease, aged from the later of the two; one waiting, leased or ended is not", () =>
    Effect.gen(function* () {
      const { notifications, view } = yield* world
      const [notYet, held, delivered, exhausted, retry, expired] = yield* notifications(6)
      yield* waiting(notYet!, 0, 60)
      yield* leased(held!, 600, 30)
      yield* settled(delivered!, "delivered", 10)
      yield* settled(exhausted!, "exhausted", 10)
      yield* waiting(retry!, 1, 600)
      yield* waiting(expired!, 1, 600)
      expect((yield* view.snapshot).oldestDueAgeSeconds).toBeNull()

      // A retry due 120 s ago, and a lease that ended 30 s ago on an item available for ten minutes.
      yield* waiting(retry!, 1, -120)
      yield* leased(expired!, 600, -30)
      const oldest = (yield* view.snapshot).oldestDueAgeSeconds
      expect(oldest).toBeGreaterThanOrEqual(120)
      expect(oldest).toBeLessThan(122)
      yield* settled(retry!, "delivered", 1)
      const next = (yield* view.snapshot).oldestDueAgeSeconds
      expect(next).toBeGreaterThanOrEqual(30)
      expect(next).toBeLessThan(32)
    }))

  it.scoped("a delivered notification lands in the five-minute window of its outcome time, oldest window first; a rejection, or a delivery older than an hour, in none", () =>
    Effect.gen(function* () {
      const { notifications, view } = yield* world
      const ids = yield* notifications(6)
      yield* settled(ids[0]!, "delivered", 2 * 60)
      yield* settled(ids[1]!, "delivered", 32 * 60)
      yield* settled(ids[2]!, "delivered", 59 * 60)
      yield* settled(ids[3]!, "delivered", 61 * 60)
      yield* settled(ids[4]!, "rejected", 2 * 60)
      yield* settled(ids[5]!, "exhausted", 2 * 60)
      expect((yield* view.snapshot).completedLastHour).toEqual([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1])
    }))
})
