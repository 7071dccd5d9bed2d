import { makeCorrelationId } from "@delivery/core"
import { AccountId, TenantId } from "@delivery/identity"
import { PgClusterFromVitest } from "@delivery/testing/vitest"
import { expect, layer } from "@effect/vitest"
import { Context, Duration, Effect, Option, Redacted } from "effect"
import { createHmac, generateKeyPairSync, type KeyObject, randomBytes, randomUUID } from "node:crypto"
import { ConnectorEventInbox, githubSignatureValid } from "../src/ConnectorEventInbox.ts"
import { CONNECTOR_EVENT_TYPE } from "../src/ConnectorEventProtocol.ts"
import { ConnectorId } from "../src/Domain.ts"
import { signObject } from "../src/Protocol.ts"
import { AUDIENCE, CLOUD_KEY_ID, cloud, newIdleHold, STACK, tenantSettings, tenantWorld } from "./support/Tenant.ts"

// Spec 001, github-broker-events-v1, the tenant's side of delivery on real PostgreSQL: "Original GitHub signature
// verification and current endpoint/connection authorization still run on delivery. Duplicate transport delivery
// uses the domain's existing receipts/atomic claims." Each refusal records nothing.

const SECRET = `gh-secret-${randomBytes(12).toString("hex")}`
const by = () => ({ actor: "operator:environment", correlationId: makeCorrelationId() })

const world = (secret: Option.Option<string> = Option.some(SECRET)) =>
  Effect.gen(function* () {
    const w = yield* tenantWorld({ tenant: Option.some(tenantSettings({ githubWebhookSecret: Option.map(secret, Redacted.make) })) })
    const suffix = randomBytes(3).toString("hex")
    const id = (label: string) => ConnectorId.make(`${label}-${suffix}`)
    yield* w.connectors.enrollInstance(id("connector"), by())
    yield* w.connectors.addConnection({ id: id("conn"), tenant: TenantId.make("acme"), kind: "broker", owner: AccountId.make("acct-1") }, by())
    yield* w.connectors.startBotRegistration({ id: id("reg"), connection: id("conn"), appId: 11 }, by())
    yield* w.connectors.completeBotRegistration({ id: id("reg"), installationId: 22 }, by())
    yield* w.connectors.addEndpoint({ id: id("endpoint"), channel: id("channel"), connection: id("conn"), registration: id("reg") }, by())
    return { ...w, inbox: Context.get(w.context, ConnectorEventInbox), instance: id("connector"), endpoint: id("endpoint") }
  })

type World = Effect.Effect.Success<ReturnType<typeof world>>

const delivery = (w: World, options: {
  readonly deliveryId?: string
  readonly eventId?: string
  readonly body?: string
  readonly githubSecret?: string
  readonly stack?: string
  readonly audience?: string
  readonly endpoint?: string
  readonly keyId?: string
  readonly signWith?: KeyObject
} = {}) => {
  const body = options.body ?? "{\"action\":\"opened\"}"
  return signObject({
    type: CONNECTOR_EVENT_TYPE,
    version: 1,
    stack: options.stack ?? STACK,
    audience: options.audience ?? AUDIENCE,
    eventId: options.eventId ?? randomUUID(),
    deliveryId: options.deliveryId ?? `d-${randomBytes(6).toString("hex")}`,
    connectorInstance: w.instance,
    endpoint: options.endpoint ?? w.endpoint,
    event: "issues",
    payload: Buffer.from(body).toString("base64url"),
    githubSignature: `sha256=${createHmac("sha256", options.githubSecret ?? SECRET).update(body).digest("hex")}`,
    attempt: 1,
    keyId: options.keyId ?? CLOUD_KEY_ID
  }, options.signWith ?? cloud.privateKey)
}

const recorded = (w: World) =>
  Effect.map(w.sql<{ n: number }>`SELECT count(*)::int AS n FROM idle_wake_connector_events`, (rows) => rows[0]!.n)

const refusal = <A, E extends { readonly _tag: string; readonly reason: string }>(effect: Effect.Effect<A, E>) =>
  Effect.map(Effect.flip(effect), (error) => [error._tag, error.reason])

layer(PgClusterFromVitest, { excludeTestServices: true, timeout: 120_000 })("connector event delivery, tenant side (spec 001)", (it) => {
  it.scoped("a signed event is recorded once: the same event id, or the same GitHub delivery id under another event id, is a duplicate ('receipts/atomic claims')", () =>
    Effect.gen(function* () {
      const w = yield* world()
      const first = delivery(w)
      expect(yield* w.inbox.receive(first, makeCorrelationId())).toEqual({ outcome: "recorded", eventId: first.eventId })
      expect((yield* w.inbox.receive(first, makeCorrelationId())).outcome).toBe("duplicate")
      const sameDelivery = delivery(w, { deliveryId: first.deliveryId })
      expect((yield* w.inbox.receive(sameDelivery, makeCorrelationId())).outcome).toBe("duplicate")
      expect(yield* recorded(w)).toBe(1)
      const [row] = yield* w.sql<{ payload: Uint8Array; endpoint_id: string }>`SELECT payload, endpoint_id FROM idle_wake_connector_events`
      expect(Buffer.from(row!.payload).toString()).toBe("{\"action\":\"opened\"}")
      expect(row!.endpoint_id).toBe(w.endpoint)
    }))

  it.scoped("the cloud's signature, stack and audience are checked first; an unknown key or a foreign signature is refused and records nothing", () =>
    Effect.gen(function* () {
      const w = yield* world()
      const stranger = generateKeyPairSync("ed25519")
      expect(yield* refusal(w.inbox.receive(delivery(w, { keyId: "cloud-9" }), makeCorrelationId()))).toEqual(["ConnectorEventUnauthenticated", "event-key-unknown"])
      expect(yield* refusal(w.inbox.receive(delivery(w, { signWith: stranger.privateKey }), makeCorrelationId()))).toEqual(["ConnectorEventUnauthenticated", "event-signature-invalid"])
      const changed = { ...delivery(w), event: "push" }
      expect(yield* refusal(w.inbox.receive(changed, makeCorrelationId()))).toEqual(["ConnectorEventUnauthenticated", "event-signature-invalid"])
      expect(yield* refusal(w.inbox.receive(delivery(w, { stack: "stack-other" }), makeCorrelationId()))).toEqual(["ConnectorEventUnauthenticated", "event-wrong-stack"])
      expect(yield* refusal(w.inbox.receive(delivery(w, { audience: "tenant:other" }), makeCorrelationId()))).toEqual(["ConnectorEventUnauthenticated", "event-wrong-audience"])
      expect(yield* refusal(w.inbox.receive({ ...delivery(w), extra: 1 }, makeCorrelationId()))).toEqual(["ConnectorEventRefused", "event-malformed"])
      expect(yield* recorded(w)).toBe(0)
    }))

  it.scoped("'original GitHub signature verification': a payload not signed with the webhook secret is refused; without the secret every event is refused (fail closed)", () =>
    Effect.gen(function* () {
      const w = yield* world()
      expect(yield* refusal(w.inbox.receive(delivery(w, { githubSecret: "another-secret-entirely" }), makeCorrelationId()))).toEqual(["ConnectorEventRefused", "github-signature-invalid"])
      const unset = yield* world(Option.none())
      expect(yield* refusal(unset.inbox.receive(delivery(unset), makeCorrelationId()))).toEqual(["IdleWakeUnavailable", "github-secret-unset"])
      expect(yield* recorded(w)).toBe(0)
      expect(yield* recorded(unset)).toBe(0)
      expect(githubSignatureValid("k", Buffer.from("x"), `sha256=${createHmac("sha256", "k").update("x").digest("hex")}`)).toBe(true)
      expect(githubSignatureValid("k", Buffer.from("x"), `sha256=${createHmac("sha256", "k").update("y").digest("hex")}`)).toBe(false)
      expect(githubSignatureValid("k", Buffer.from("x"), "sha256=00")).toBe(false)
    }))

  it.scoped("'current endpoint/connection authorization': an unknown, removed or differently bound endpoint is refused and records nothing", () =>
    Effect.gen(function* () {
      const w = yield* world()
      expect(yield* refusal(w.inbox.receive(delivery(w, { endpoint: "endpoint-unknown" }), makeCorrelationId()))).toEqual(["ConnectorEventRefused", "event-endpoint-unauthorized"])
      yield* w.connectors.removeEndpoint(w.endpoint as ConnectorId, by())
      expect(yield* refusal(w.inbox.receive(delivery(w), makeCorrelationId()))).toEqual(["ConnectorEventRefused", "event-endpoint-unauthorized"])
      expect(yield* recorded(w)).toBe(0)
    }))

  it.scoped("a draining stack takes no new work: during the idle hold an event is the tenant's 503 with Retry-After, recorded after the release", () =>
    Effect.gen(function* () {
      const w = yield* world()
      const hold = newIdleHold()
      yield* w.gate.take(hold, Duration.seconds(30))
      const event = delivery(w)
      const draining = yield* Effect.flip(w.inbox.receive(event, makeCorrelationId()))
      expect(draining).toMatchObject({ _tag: "TenantDraining", reason: "tenant-draining" })
      expect((draining as { retryAfter: number }).retryAfter).toBeGreaterThanOrEqual(1)
      expect((draining as { retryAfter: number }).retryAfter).toBeLessThanOrEqual(30)
      expect(yield* recorded(w)).toBe(0)
      yield* w.gate.release(hold)
      expect((yield* w.inbox.receive(event, makeCorrelationId())).outcome).toBe("recorded")
    }))
})
