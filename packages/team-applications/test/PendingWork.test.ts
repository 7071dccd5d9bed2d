import { ProviderHttp } from "@delivery/core"
import { Mailer } from "@delivery/mail"
import { LoopbackProvider, LoopbackReply } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Context, Duration, Effect, Either, Fiber, Layer, Option, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { makeDeliver } from "../src/Delivery.ts"
import { NotificationQueue, TeamApplications } from "../src/TeamApplications.ts"
import type { TeamApplicationsSettings } from "../src/TeamApplicationsConfig.ts"
import { teamApplicationsLayer } from "../src/TeamApplicationsLive.ts"

// Spec 001: a tenant stack is put to sleep only when its own durable workers have no accepted work left. Queue items
// are accepted through the real submission path (TeamApplications.submit) and end through the worker's own attempt
// (PersistedQueue.take with makeDeliver), composed by teamApplicationsLayer, on a database of this file's own.

const SuiteLayer = LoopbackProvider.Default.pipe(Layer.provideMerge(TestDatabaseLive))

const settingsFor = (provider: LoopbackProvider): TeamApplicationsSettings => {
  const mail = {
    endpoint: Either.getOrThrow(ProviderHttp.ProviderEndpoint.parse(provider.urlFor("/emails"))),
    token: Redacted.make(`mail-${randomBytes(24).toString("base64url")}`),
    timeout: Duration.seconds(10)
  }
  return {
    mode: "enabled",
    defaulted: false,
    sender: Option.some({ address: "teams@club.example", name: "Club" }),
    provider: Option.some(mail),
    timing: {
      staleMs: 5_000,
      pollInterval: Duration.millis(20),
      maxAttempts: 3,
      retryBase: Duration.millis(100),
      retryCap: Duration.millis(100)
    }
  }
}

const within = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.timeoutFail(effect, { duration: "10 seconds", onTimeout: () => new Error("test wait timed out") })

const queueStates = (ids: ReadonlyArray<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly id: string; readonly completed: boolean; readonly exhausted: boolean; readonly attempts: number }>`
      SELECT id, completed, exhausted, attempts FROM effect_queue WHERE id = ANY(${ids}) ORDER BY id`.withoutTransform)

layer(SuiteLayer, { excludeTestServices: true })("team-application pending work (spec 001, real PostgreSQL)", (it) => {
  it.scoped("spec 001: a stack with unfinished team-application work does not sleep: a notification's queue item is pending from the submission, while its retry waits and while an attempt holds it, until it is completed or exhausted", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      const settings = settingsFor(provider)
      const context = yield* Layer.build(teamApplicationsLayer(settings))
      const applications = Context.get(context, TeamApplications)
      const queue = Context.get(context, NotificationQueue)
      const deliver = yield* makeDeliver.pipe(Effect.provide(Mailer.layerWith(Option.getOrThrow(settings.provider))), Effect.provide(context))
      const tenant = `t-${randomBytes(4).toString("hex")}`
      const submit = Effect.suspend(() => applications.submit({
        commandId: `cmd-${randomBytes(6).toString("hex")}`,
        team: { slug: "rowing", name: "Rowing Club", email: "board@rowing.example" },
        applicant: { name: "Alex Applicant", email: "alex@applicant.example" },
        message: "I row on weekends."
      }, { tenant, account: "acct-1", actor: "api-key:k1", correlationId: randomBytes(16).toString("hex") }))
      const attempt = within(Effect.exit(queue.take(deliver, { maxAttempts: settings.timing.maxAttempts })))
      expect(yield* applications.hasPendingWork).toBe(false)

      const { response } = yield* submit
      const ids = response.notifications.map((n) => n.effectId)
      const [applicant] = response.notifications.filter((n) => n.audience === "applicant").map((n) => n.effectId)
      expect(yield* applications.hasPendingWork).toBe(true)

      // The team's mail is delivered; the applicant's is answered 503 and waits for its retry.
      yield* provider.script({ key: applicant!, times: 1, reply: LoopbackReply.status(503) })
      yield* attempt
      yield* attempt
      expect((yield* queueStates(ids)).map((q) => [q.id === applicant, q.completed, q.exhausted, q.attempts]))
        .toEqual(expect.arrayContaining([[true, false, false, 1], [false, true, false, 1]]))
      expect(yield* applications.hasPendingWork).toBe(true)

      // The retry, held by the provider: its attempt holds the lease, still owed.
      yield* provider.script({ key: applicant!, times: 1, reply: LoopbackReply.hang() })
      const held = yield* Effect.fork(attempt)
      yield* within(provider.awaitRequests(3))
      expect(yield* applications.hasPendingWork).toBe(true)
      expect(yield* provider.release(LoopbackReply.status(202))).toBe(1)
      yield* Fiber.join(held)
      expect((yield* queueStates(ids)).map((q) => [q.completed, q.exhausted])).toEqual([[true, false], [true, false]])
      expect(yield* applications.hasPendingWork).toBe(false)

      // Exhausted items have ended too: a worker allowed one attempt, both failing, leaves nothing to do.
      const second = (yield* submit).response.notifications.map((n) => n.effectId)
      expect(yield* applications.hasPendingWork).toBe(true)
      yield* provider.script({ path: "/emails", reply: LoopbackReply.status(503) })
      const lastAttempt = within(Effect.exit(queue.take(deliver, { maxAttempts: 1 })))
      yield* lastAttempt
      yield* lastAttempt
      expect((yield* queueStates(second)).map((q) => [q.completed, q.exhausted])).toEqual([[false, true], [false, true]])
      expect(yield* applications.hasPendingWork).toBe(false)
    }))
})
