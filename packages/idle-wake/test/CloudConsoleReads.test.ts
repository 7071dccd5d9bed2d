import { TestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Layer, Option } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import type { StackId } from "../src/Domain.ts"
import { AdmissionLive } from "../src/cloud/Admission.ts"
import { CloudConfig, CloudSettingsTag } from "../src/cloud/CloudConfig.ts"
import { CloudStacks } from "../src/cloud/CloudStacks.ts"
import { CloudStacksRepo } from "../src/cloud/CloudStacksRepo.ts"
import { ComputeProvider } from "../src/cloud/ComputeProvider.ts"
import { ConnectorEvents } from "../src/cloud/ConnectorEvents.ts"
import { DrainClient } from "../src/cloud/DrainClient.ts"
import { Routing } from "../src/cloud/Routing.ts"
import { SleepOperation } from "../src/cloud/SleepOperation.ts"
import { Wakes } from "../src/cloud/Wakes.ts"

// What the operator console reads of the cloud's own tables, through CloudStacks and ConnectorEvents on real
// PostgreSQL: bounded pages by keyset, a stack's detail with counts of its receipt (never a fingerprint), an event
// without its payload or GitHub signature, and the actor an operator change records. The workers are not started:
// rows are written at known states and stay as written.

const env = new Map([
  ["IDLE_WAKE_CLOUD_SIGNING_KEY", `cloud-1:${randomBytes(32).toString("base64url")}`],
  ["IDLE_WAKE_PROXY_PORT", "8080"]
])
const SettingsLive = Layer.effect(CloudSettingsTag, Effect.withConfigProvider(CloudConfig, ConfigProvider.fromMap(env)))

/** A provider whose compute is always stopped: these tests change rows, never processes. */
const StoppedCompute = Layer.succeed(ComputeProvider, {
  prepare: () => Effect.succeed({ upstream: "http://127.0.0.1:9" }),
  readiness: () => Effect.succeed(true),
  stop: () => Effect.succeed({ _tag: "Stopped" } as const),
  status: () => Effect.succeed("stopped" as const)
})

const ServicesLive = Layer.mergeAll(CloudStacks.Default, ConnectorEvents.Default).pipe(
  Layer.provideMerge(Layer.mergeAll(SleepOperation.Default, Wakes.Default)),
  Layer.provideMerge(Layer.mergeAll(Routing.Default, DrainClient.Default, AdmissionLive)),
  Layer.provideMerge(CloudStacksRepo.Default),
  Layer.provideMerge(Layer.mergeAll(SettingsLive, StoppedCompute)),
  Layer.provideMerge(TestDatabaseLive)
)

const clearCloud = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.all([
    sql`DELETE FROM idle_wake_cloud_connector_events`,
    sql`DELETE FROM idle_wake_cloud_hosts`,
    sql`DELETE FROM idle_wake_cloud_stacks`,
    sql`DELETE FROM idle_wake_cloud_audit`
  ], { discard: true }))

const FINGERPRINT = `fp-${randomBytes(16).toString("hex")}`

/** A receipt with two projected keys and three connector bindings; only its counts may leave the service. */
const receipt = {
  version: 1,
  challenge: randomBytes(32).toString("base64url"),
  profiles: {
    "tenant-api-http-v2": {
      keys: [
        { fingerprint: FINGERPRINT, kind: "agent", expiresAt: null },
        { fingerprint: `${FINGERPRINT}-2`, kind: "board", expiresAt: null }
      ]
    },
    "github-broker-events-v1": { connectorInstance: "connector-1", bindingCount: 3 }
  }
}

const insertStack = (id: string, state: string, options: { readonly withReceipt?: boolean } = {}) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`
      INSERT INTO idle_wake_cloud_stacks
        (id, audience, report_key_id, report_public_key, profiles, upstream, state, op_attempt, wake_attempt,
         wake_lease_expires_at, receipt, receipt_stored_at, state_changed_at, created_at)
      VALUES (${id}, ${`tenant:${id}`}, 'report-1', ${randomBytes(32).toString("base64url")}, '{tenant-api-http-v2}',
              'http://127.0.0.1:9', ${state}, 4, 7, ${state === "waking" ? sql`now() + interval '1 minute'` : sql`NULL`},
              ${options.withReceipt === true ? sql`${JSON.stringify(receipt)}::jsonb` : sql`NULL`},
              ${options.withReceipt === true ? sql`now()` : sql`NULL`}, now() - interval '5 minutes', now() - interval '1 day')`)

const auditOf = (stack: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ action: string; detail: unknown }>`
      SELECT action, detail FROM idle_wake_cloud_audit WHERE stack_id = ${stack} ORDER BY id`.withoutTransform)

layer(ServicesLive, { excludeTestServices: true })("the console's reads of the cloud's stacks (real PostgreSQL)", (it) => {
  it.effect("stacks come a page at a time by id, optionally in one state; the last page has no cursor", () =>
    Effect.gen(function* () {
      yield* clearCloud
      const stacks = yield* CloudStacks
      const prefix = `p${randomBytes(2).toString("hex")}`
      const states = ["awake", "asleep", "awake", "suspended", "awake"]
      for (const [i, state] of states.entries()) yield* insertStack(`${prefix}-${i}`, state)

      const first = yield* stacks.page({ limit: 2 })
      expect(first.items.map((s) => s.stack)).toEqual([`${prefix}-0`, `${prefix}-1`])
      expect(first.nextCursor).toBe(`${prefix}-1`)
      const second = yield* stacks.page({ limit: 2, after: first.nextCursor as StackId })
      expect(second.items.map((s) => s.stack)).toEqual([`${prefix}-2`, `${prefix}-3`])
      const last = yield* stacks.page({ limit: 2, after: second.nextCursor as StackId })
      expect(last.items.map((s) => s.stack)).toEqual([`${prefix}-4`])
      expect(last.nextCursor).toBeNull()

      const awake = yield* stacks.page({ state: "awake", limit: 2 })
      expect(awake.items.map((s) => [s.stack, s.state])).toEqual([[`${prefix}-0`, "awake"], [`${prefix}-2`, "awake"]])
      const awakeRest = yield* stacks.page({ state: "awake", limit: 2, after: awake.nextCursor as StackId })
      expect(awakeRest).toMatchObject({ items: [{ stack: `${prefix}-4` }], nextCursor: null })
      expect((yield* stacks.page({ state: "archived" })).items).toEqual([])
      // A page is never larger than 100, whatever is asked.
      expect((yield* stacks.page({ limit: 10_000 })).items).toHaveLength(5)
    }))

  it.effect("a stack's detail has its state, its fences and leases, its hosts and its newest audit rows first, and only the counts of its receipt, never a fingerprint; an unknown stack is none", () =>
    Effect.gen(function* () {
      yield* clearCloud
      const stacks = yield* CloudStacks
      const sql = yield* SqlClient.SqlClient
      const id = `d-${randomBytes(3).toString("hex")}`
      yield* insertStack(id, "asleep", { withReceipt: true })
      yield* sql`INSERT INTO idle_wake_cloud_hosts (host, stack_id, created_at) VALUES (${`b.${id}.test`}, ${id}, now()), (${`a.${id}.test`}, ${id}, now())`
      for (const action of ["registered", "sleep-started", "receipt-stored", "asleep"]) {
        yield* sql`INSERT INTO idle_wake_cloud_audit (stack_id, action, detail, correlation_id, at)
                   VALUES (${id}, ${action}, ${JSON.stringify({ opAttempt: 4 })}::jsonb, 'c0ffee', now())`
      }

      const found = yield* stacks.detail(id as StackId)
      expect(Option.isSome(found)).toBe(true)
      const detail = Option.getOrThrow(found)
      expect(detail).toMatchObject({
        stack: id,
        state: "asleep",
        recoveryHold: false,
        opAttempt: 4,
        opLeaseExpiresAt: null,
        wakeAttempt: 7,
        wakeLeaseExpiresAt: null,
        hosts: [`a.${id}.test`, `b.${id}.test`],
        receipt: { keys: 2, connectorBindings: 3 }
      })
      expect(Date.now() - Date.parse(detail.stateChangedAt)).toBeGreaterThanOrEqual(5 * 60_000 - 1000)
      expect(detail.audit.map((a) => a.action)).toEqual(["asleep", "receipt-stored", "sleep-started", "registered"])
      expect(detail.audit[0]).toMatchObject({ detail: { opAttempt: 4 }, correlationId: "c0ffee" })
      expect(JSON.stringify(detail)).not.toContain(FINGERPRINT)
      expect(JSON.stringify(detail)).not.toContain(receipt.challenge)

      expect(yield* stacks.detail("no-such-stack" as StackId)).toEqual(Option.none())
    }))

  it.effect("an operator change names its actor in the audit row when one is given (the console's sessions); through the operator API it names none", () =>
    Effect.gen(function* () {
      yield* clearCloud
      const stacks = yield* CloudStacks
      const id = `a-${randomBytes(3).toString("hex")}` as StackId
      yield* insertStack(id, "awake")

      yield* stacks.setRecoveryHold(id, true, "corr-hold", "operator:console")
      yield* stacks.setRecoveryHold(id, false, "corr-release")
      const suspended = yield* stacks.suspend(id, "corr-suspend", "operator:console")
      expect(suspended).toMatchObject({ state: "suspended", stop: "Stopped" })
      yield* stacks.resume(id, "corr-resume", "operator:console")
      yield* stacks.archive(id, "corr-archive", "operator:console")

      expect(yield* auditOf(id)).toEqual([
        { action: "recovery-hold-set", detail: { actor: "operator:console" } },
        { action: "recovery-hold-released", detail: {} },
        { action: "suspended", detail: { actor: "operator:console" } },
        { action: "resumed", detail: { actor: "operator:console" } },
        { action: "archived", detail: { actor: "operator:console" } }
      ])
      // A refused change writes nothing, whoever asks.
      const again = yield* Effect.exit(stacks.resume(id, "corr-again", "operator:console"))
      expect(Exit.isFailure(again)).toBe(true)
      expect(yield* auditOf(id)).toHaveLength(5)
    }))
})

/** An event of `stack` received at `receivedAt` (SQL), in `state`. */
const insertEvent = (stack: string, state: "pending" | "delivered" | "dead", receivedAt: string, options: { readonly lastCode?: string } = {}) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const id = randomUUID()
    yield* sql`
      INSERT INTO idle_wake_cloud_connector_events
        (id, stack_id, connector_instance, endpoint_id, delivery_id, event, payload, github_signature, state, attempt,
         failures, available_at, last_code, received_at, settled_at)
      VALUES (${id}::uuid, ${stack}, 'connector-1', 'endpoint-1', ${randomUUID()}, 'issues',
              ${Buffer.from("payload-marker")}, ${`sha256=${"ab".repeat(32)}`}, ${state}, 3, 2,
              ${receivedAt}::timestamptz + interval '10 minutes', ${options.lastCode ?? null}, ${receivedAt}::timestamptz,
              ${state === "pending" ? null : receivedAt}::timestamptz + interval '1 minute')`
    return id
  })

layer(ServicesLive, { excludeTestServices: true })("the console's reads of the cloud's connector event queue (real PostgreSQL)", (it) => {
  it.effect("one stack's events come oldest first by keyset on (received_at, id), optionally in one state: events received in the same microsecond are neither skipped nor repeated, another stack's never appear, and a cursor the cloud did not hand out is refused", () =>
    Effect.gen(function* () {
      yield* clearCloud
      const events = yield* ConnectorEvents
      const stack = `e-${randomBytes(3).toString("hex")}`
      const other = `o-${randomBytes(3).toString("hex")}`
      yield* insertStack(stack, "asleep")
      yield* insertStack(other, "awake")
      const same = "2026-12-03T09:00:00.123456Z"
      const ids = [
        ...[yield* insertEvent(stack, "pending", same), yield* insertEvent(stack, "delivered", same), yield* insertEvent(stack, "pending", same)].sort(),
        yield* insertEvent(stack, "dead", "2026-12-03T09:00:00.123457Z"),
        yield* insertEvent(stack, "pending", "2026-12-03T10:00:00Z")
      ]
      yield* insertEvent(other, "pending", "2026-12-03T08:00:00Z")

      const seen: Array<string> = []
      let cursor: string | undefined
      do {
        const page = yield* events.events(stack as StackId, { limit: 2, ...(cursor === undefined ? {} : { cursor }) })
        expect(page.items.length).toBeLessThanOrEqual(2)
        seen.push(...page.items.map((e) => e.id))
        cursor = page.nextCursor ?? undefined
      } while (cursor !== undefined)
      expect(seen).toEqual(ids)

      const pending = yield* events.events(stack as StackId, { state: "pending" })
      expect(pending.items.map((e) => e.state)).toEqual(["pending", "pending", "pending"])
      expect(pending.nextCursor).toBeNull()
      expect((yield* events.events(other as StackId, {})).items).toHaveLength(1)

      for (const bad of ["nope", Buffer.from(`2026-12-03T09:00:00Z|${ids[0]}`).toString("base64url"), "x".repeat(200)]) {
        const refused = yield* Effect.flip(events.events(stack as StackId, { cursor: bad }))
        expect(refused).toMatchObject({ _tag: "CloudCursorInvalid", reason: "cursor-invalid" })
      }
    }))

  it.effect("an event's detail is its state, attempts, codes, next attempt and settlement; never its payload or GitHub signature; another stack's event or an id that is not a UUID is none", () =>
    Effect.gen(function* () {
      yield* clearCloud
      const events = yield* ConnectorEvents
      const stack = `v-${randomBytes(3).toString("hex")}`
      const other = `w-${randomBytes(3).toString("hex")}`
      yield* insertStack(stack, "awake")
      yield* insertStack(other, "awake")
      const id = yield* insertEvent(stack, "dead", "2026-12-03T09:00:00Z", { lastCode: "github-signature-invalid" })

      const found = Option.getOrThrow(yield* events.event(stack as StackId, id))
      expect(found).toMatchObject({
        id,
        stack,
        connectorInstance: "connector-1",
        endpoint: "endpoint-1",
        event: "issues",
        state: "dead",
        attempt: 3,
        failures: 2,
        lastCode: "github-signature-invalid",
        leaseExpiresAt: null
      })
      expect(found.receivedAt.toISOString()).toBe("2026-12-03T09:00:00.000Z")
      expect(found.availableAt.toISOString()).toBe("2026-12-03T09:10:00.000Z")
      expect(found.settledAt?.toISOString()).toBe("2026-12-03T09:01:00.000Z")
      const shown = JSON.stringify(found)
      expect(shown).not.toContain("payload-marker")
      expect(shown).not.toContain(Buffer.from("payload-marker").toString("base64url"))
      expect(shown).not.toContain("sha256=")
      expect(Object.keys(found)).not.toContain("payload")

      expect(yield* events.event(other as StackId, id)).toEqual(Option.none())
      expect(yield* events.event(stack as StackId, "not-a-uuid")).toEqual(Option.none())
      expect(yield* events.event(stack as StackId, randomUUID())).toEqual(Option.none())
    }))
})
