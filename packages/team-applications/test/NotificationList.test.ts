import { SqlClient } from "@effect/sql"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { expect, layer } from "@effect/vitest"
import { Context, Duration, Effect, Layer, Option } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import { NOTIFICATION_PAGE_LIMIT } from "../src/Domain.ts"
import { TeamApplications } from "../src/TeamApplications.ts"
import type { TeamApplicationsSettings } from "../src/TeamApplicationsConfig.ts"
import { teamApplicationsLayer } from "../src/TeamApplicationsLive.ts"

// What the operator console reads of team-application notifications, on real PostgreSQL: one tenant's notifications
// by keyset on (created_at, effect_id), optionally in one delivery state (team_application_delivery_state), one
// notification by id, and its application's business audit. Submissions go through the real path
// (TeamApplications.submit); never an address, a name, the message or the envelope.

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

const freshTenant = () => `t-${randomBytes(4).toString("hex")}`

const world = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const applications = Context.get(yield* Layer.build(teamApplicationsLayer(settings)), TeamApplications)
  /** One submission of `tenant`: its application id and both notifications' effect ids (applicant's, team's). */
  const submit = (tenant: string, correlationId = randomBytes(16).toString("hex")) =>
    Effect.map(
      applications.submit({
        commandId: `cmd-${randomBytes(6).toString("hex")}`,
        team: { slug: "rowing", name: "Rowing Club", email: "board@rowing.example" },
        applicant: { name: "Alex Applicant", email: "alex@applicant.example" },
        message: "I row on weekends."
      }, { tenant, account: "acct-1", actor: "api-key:k1", correlationId }),
      ({ response }) => ({ id: response.application.id, effects: response.notifications.map((n) => n.effectId) })
    ).pipe(Effect.orDie)
  /** Moves an application's notifications to a known creation time (microseconds after a fixed start). */
  const createdAt = (applicationId: string, micros: number) =>
    sql`UPDATE team_application_outbox SET created_at = '2026-05-01T00:00:00Z'::timestamptz + ${micros} * interval '1 microsecond'
        WHERE application_id = ${applicationId}`.pipe(Effect.orDie)
  return { sql, applications, submit, createdAt }
})

type Page = { readonly items: ReadonlyArray<{ readonly effectId: string }>; readonly nextCursor: string | null }
const idsOf = (page: Page) => page.items.map((n) => n.effectId)
const byId = (ids: ReadonlyArray<string>) => [...ids].sort()

const allPages = (applications: TeamApplications, tenant: string, limit: number) =>
  Effect.gen(function* () {
    const seen: Array<string> = []
    let cursor: string | undefined = undefined
    let pages = 0
    do {
      const page: Page = yield* applications.notifications(tenant, { limit, cursor })
      expect(page.items.length).toBeLessThanOrEqual(limit)
      seen.push(...idsOf(page))
      cursor = page.nextCursor ?? undefined
      pages++
    } while (cursor !== undefined && pages < 20)
    return { seen, pages }
  })

layer(TestDatabaseLive, { excludeTestServices: true })("team-application notifications as the console lists them (real PostgreSQL)", (it) => {
  it.scoped("a tenant's notifications come oldest first, ties by effect id, page after page by cursor, each exactly once; other tenants' never", () =>
    Effect.gen(function* () {
      const { applications, createdAt, submit } = yield* world
      const tenant = freshTenant()
      const later = yield* submit(tenant)
      const earlier = yield* submit(tenant)
      const microsApart = yield* submit(tenant)
      yield* submit(freshTenant())
      yield* createdAt(later.id, 2000)
      yield* createdAt(earlier.id, 0)
      yield* createdAt(microsApart.id, 1)
      const expected = [...byId(earlier.effects), ...byId(microsApart.effects), ...byId(later.effects)]

      const { pages, seen } = yield* allPages(applications, tenant, 1)
      expect([seen, pages]).toEqual([expected, 6])
      expect((yield* allPages(applications, tenant, 4)).seen).toEqual(expected)
      const exact = yield* applications.notifications(tenant, { limit: 6 })
      expect([idsOf(exact), exact.nextCursor]).toEqual([expected, null])
      expect((yield* applications.notifications(freshTenant())).items).toEqual([])
    }))

  it.scoped("the delivery-state filter keeps one state's notifications as the view computes it; a page holds 1..100 whatever the limit asked", () =>
    Effect.gen(function* () {
      const { applications, sql, submit } = yield* world
      const tenant = freshTenant()
      const first = yield* submit(tenant)
      const second = yield* submit(tenant)
      const [failed, delivered] = first.effects
      yield* sql`UPDATE effect_queue SET attempts = 1, last_failure = 'provider-5xx', available_at = now() + interval '1 minute' WHERE id = ${failed!}`
      yield* sql`UPDATE team_application_outbox SET failures = 1, last_error = 'provider-5xx' WHERE effect_id = ${failed!}::uuid`
      yield* sql`UPDATE team_application_outbox SET outcome = 'delivered', outcome_attempt = 1, outcome_at = now() WHERE effect_id = ${delivered!}::uuid`
      yield* sql`UPDATE effect_queue SET attempts = 1, completed = true, ended_at = now() WHERE id = ${delivered!}`

      const failing = yield* applications.notifications(tenant, { state: "failed" })
      expect(failing.items.map((n) => [n.effectId, n.state, n.attempts, n.failures, n.lastError])).toEqual([[failed, "failed", 1, 1, "provider-5xx"]])
      expect(failing.items[0]!.nextAttemptAt).not.toBeNull()
      expect(idsOf(yield* applications.notifications(tenant, { state: "delivered" }))).toEqual([delivered])
      expect(byId(idsOf(yield* applications.notifications(tenant, { state: "pending" })))).toEqual(byId(second.effects))
      expect((yield* applications.notifications(tenant, { state: "exhausted" })).items).toEqual([])
      expect((yield* applications.notifications(tenant, { limit: 0 })).items.length).toBe(1)

      const bulk = freshTenant()
      for (let i = 0; i < NOTIFICATION_PAGE_LIMIT / 2 + 1; i++) yield* submit(bulk)
      const bounded = yield* applications.notifications(bulk, { limit: 1_000 })
      expect(bounded.items.length).toBe(NOTIFICATION_PAGE_LIMIT)
      const rest = yield* applications.notifications(bulk, { cursor: bounded.nextCursor! })
      expect([rest.items.length, rest.nextCursor]).toEqual([2, null])
    }))

  it.scoped("a cursor the service did not write is refused as cursor-invalid", () =>
    Effect.gen(function* () {
      const { applications } = yield* world
      const id = randomUUID()
      const forged = [
        "not a cursor",
        Buffer.from(id).toString("base64url"),
        Buffer.from(`2026-05-01T00:00:00.000Z|${id}`).toString("base64url"),
        Buffer.from(`2026-02-30T00:00:00.000000Z|${id}`).toString("base64url"),
        Buffer.from(`2026-05-01T00:00:00.000000Z|${id}|x`).toString("base64url"),
        Buffer.from(`x2026-05-01T00:00:00.000000Z|${id}`).toString("base64url"),
        "x".repeat(201)
      ]
      for (const cursor of forged) {
        expect([cursor, yield* Effect.flip(applications.notifications(freshTenant(), { cursor }))]).toMatchObject([
          cursor,
          { _tag: "TeamApplicationNotificationCursorInvalid", reason: "cursor-invalid" }
        ])
      }
    }))

  it.scoped("one notification by id with its state, attempts and codes, and its application's business audit row; none for another tenant or an id that is not one", () =>
    Effect.gen(function* () {
      const { applications, submit } = yield* world
      const tenant = freshTenant()
      const correlationId = randomBytes(16).toString("hex")
      const submitted = yield* submit(tenant, correlationId)
      const [applicant] = submitted.effects
      const item = Option.getOrThrow(yield* applications.notification(tenant, applicant!))
      expect({ ...item, createdAt: undefined }).toEqual({
        effectId: applicant,
        applicationId: submitted.id,
        tenant,
        audience: "applicant",
        state: "pending",
        attempts: 0,
        nextAttemptAt: null,
        leaseExpiresAt: null,
        failures: 0,
        lastError: null,
        outcomeAt: null,
        createdAt: undefined
      })
      for (const secret of ["alex@applicant.example", "board@rowing.example", "I row on weekends."]) {
        expect(JSON.stringify(item)).not.toContain(secret)
      }
      expect(yield* applications.notification(freshTenant(), applicant!)).toEqual(Option.none())
      expect(yield* applications.notification(tenant, "not-a-uuid")).toEqual(Option.none())

      const audit = yield* applications.applicationAudit(tenant, submitted.id)
      expect(audit.map(({ at: _, ...entry }) => ({ ...entry }))).toEqual([{ action: "application-submitted", actor: "api-key:k1", correlationId }])
      expect(yield* applications.applicationAudit(freshTenant(), submitted.id)).toEqual([])
      expect(yield* applications.applicationAudit(tenant, "not-a-uuid")).toEqual([])
    }))
})
