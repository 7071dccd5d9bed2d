import { expect, layer } from "@effect/vitest"
import { FetchHttpClient } from "@effect/platform"
import { KeyId, ProjectId, RawPublicKey } from "@delivery/signer"
import { LoopbackProvider, type RecordedRequest, startBackend } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Effect, Layer } from "effect"
import { randomBytes, sign } from "node:crypto"
import { type DeliveryRequest, makeClient, makeVerifier, operatorKeys, staticKeys, type TrustedKey } from "../src/index.ts"
import { keyPair, provisionTenant, stoppedClock } from "./support/World.ts"

// The receiver verifier against real deliveries of a real backend process (docs/controlplane-outbound.md,
// "Verifying a delivery"): webhook signature, timestamp tolerance, envelope signature, key states.

const unique = (prefix: string) => `${prefix}-${randomBytes(4).toString("hex")}`

const asRequest = (delivery: RecordedRequest, body = delivery.bodyText): DeliveryRequest => ({ headers: delivery.headers, body })

const reasonOf = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.flip(effect), (error: any) => error?.reason ?? error?._tag)

const SuiteLayer = Layer.mergeAll(LoopbackProvider.Default, FetchHttpClient.layer).pipe(Layer.provideMerge(TestDatabaseLive))

layer(SuiteLayer, { excludeTestServices: true })("the client's delivery verifier against real deliveries", (it) => {
  it.scoped("a real delivery verifies (webhook v1a and envelope signature, key looked up by id in the envelope's tenant); a tampered body, a stale or malformed timestamp, missing headers, an unknown key, a retired key past its window and a revoked key are each refused with their reason", () =>
    Effect.gen(function* () {
      const receiver = yield* LoopbackProvider
      const tenantName = unique("v")
      const key = keyPair()
      const { baseUrl } = yield* startBackend({ SIGNER_KEYS: `${tenantName}:k1:${key.seed}`, OUTBOX_POLL_INTERVAL: "100 millis" })
      const world = yield* provisionTenant(baseUrl, tenantName, key)
      const project = ProjectId.make("web")
      yield* world.operator.outboxOperator.registerTarget({
        path: { tenant: world.tenant, project },
        payload: { endpoint: receiver.urlFor("/hooks/verify") as never }
      })
      const tenantClient = yield* makeClient({ baseUrl, token: world.apiKey.token })
      yield* tenantClient.outbox.enqueue({
        payload: {
          envelope: {
            type: "controlplane/v1",
            route: { tenant: world.tenant, project, producer: "scheduler" as never },
            eventId: "evt-verify-00000000001" as never,
            idempotencyKey: "verify:1" as never,
            sequence: 1 as never,
            createdAt: "2026-11-30T09:30:00.000Z" as never,
            schemaVersion: 1,
            metadata: { kind: "task.proposed", subject: "task-1" as never, attributes: { title: "Réviser le plan" } as never }
          }
        }
      })
      const [delivery] = yield* receiver.awaitRequests(1).pipe(Effect.timeout("30 seconds"), Effect.orDie)

      const verifier = makeVerifier({ keys: operatorKeys(world.operator) })
      const verified = yield* verifier.verifyDelivery(asRequest(delivery!))
      expect(verified).toMatchObject({ webhookId: delivery!.headers["webhook-id"], envelope: { keyId: "k1", route: { tenant: world.tenant } }, key: { state: "active" } })

      expect(yield* reasonOf(verifier.verifyDelivery(asRequest(delivery!, delivery!.bodyText.replace("Réviser", "Reviser"))))).toBe("webhook-signature-invalid")
      const { "webhook-signature": _, ...unsigned } = delivery!.headers
      expect(yield* reasonOf(verifier.verifyDelivery({ headers: unsigned, body: delivery!.bodyText }))).toBe("headers-missing")
      expect(yield* reasonOf(verifier.verifyDelivery({ headers: { ...delivery!.headers, "webhook-timestamp": "12e3" }, body: delivery!.bodyText }))).toBe("timestamp-invalid")
      // The raw bytes verify as the text does; bytes that are not UTF-8 are not a delivery.
      expect((yield* verifier.verifyDelivery({ headers: delivery!.headers, body: delivery!.body })).webhookId).toBe(delivery!.headers["webhook-id"])
      expect(yield* reasonOf(verifier.verifyDelivery({ headers: delivery!.headers, body: new Uint8Array([0x7b, 0xff, 0x7d]) }))).toBe("body-invalid")
      expect(yield* reasonOf(verifier.verifyDelivery({ headers: delivery!.headers, body: "{not json" }))).toBe("body-invalid")

      // Past the tolerance either way: the same delivery, checked six minutes later.
      const sentAt = Number(delivery!.headers["webhook-timestamp"]) * 1000
      const atTime = (millis: number) => Effect.withClock(stoppedClock(millis))
      expect(yield* reasonOf(verifier.verifyDelivery(asRequest(delivery!)).pipe(atTime(sentAt + 301_000)))).toBe("timestamp-stale")
      expect((yield* verifier.verifyDelivery(asRequest(delivery!)).pipe(atTime(sentAt + 299_000))).webhookId).toBe(delivery!.headers["webhook-id"])

      // Key states, from a fixed list: unknown, retired inside and past its window.
      const k1 = (state: TrustedKey["state"], verifyUntil: Date | null): TrustedKey => ({ keyId: "k1", publicKey: key.publicKey, state, verifyUntil })
      const withKeys = (keys: ReadonlyArray<TrustedKey>) => makeVerifier({ keys: staticKeys({ [world.tenant]: keys }) })
      expect(yield* reasonOf(withKeys([]).verifyDelivery(asRequest(delivery!)))).toBe("key-unknown")
      expect(yield* reasonOf(makeVerifier({ keys: staticKeys({ other: [k1("active", null)] }) }).verifyDelivery(asRequest(delivery!)))).toBe("key-unknown")
      expect((yield* withKeys([k1("retired", new Date(Date.now() + 60_000))]).verifyDelivery(asRequest(delivery!))).key.state).toBe("retired")
      expect(yield* reasonOf(withKeys([k1("retired", new Date(Date.now() - 1))]).verifyDelivery(asRequest(delivery!)))).toBe("key-expired")

      // A valid webhook signature over an envelope whose own signature is not the key's.
      const envelope = JSON.parse(delivery!.bodyText)
      const forgedBody = JSON.stringify({ ...envelope, signature: sign(null, Buffer.from("other bytes"), key.privateKey).toString("base64url") })
      const id = delivery!.headers["webhook-id"]!
      const timestamp = delivery!.headers["webhook-timestamp"]!
      const resigned = `v1a,${sign(null, Buffer.from(`${id}.${timestamp}.${forgedBody}`), key.privateKey).toString("base64")}`
      expect(yield* reasonOf(verifier.verifyDelivery({ headers: { ...delivery!.headers, "webhook-signature": resigned }, body: forgedBody })))
        .toBe("envelope-signature-invalid")

      // Rotation retires k1 (still verifying inside its window); revocation refuses it from the next lookup.
      yield* world.operator.signer.rotate({ path: { tenant: world.tenant }, payload: { keyId: KeyId.make("k2"), publicKey: RawPublicKey.make(keyPair().publicKey) } })
      expect((yield* verifier.verifyDelivery(asRequest(delivery!))).key.state).toBe("retired")
      yield* world.operator.signer.revoke({ path: { tenant: world.tenant, keyId: KeyId.make("k1") } })
      expect(yield* reasonOf(verifier.verifyDelivery(asRequest(delivery!)))).toBe("key-revoked")
    }))
})
