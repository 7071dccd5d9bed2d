import { describe, expect, it } from "@effect/vitest"
import { WebhookSignature } from "@delivery/outbox"
import { decodeUnsignedEnvelope, signEnvelope } from "@delivery/signer"
import { Effect, Either } from "effect"
import { randomUUID, sign } from "node:crypto"
import { type DeliveryRequest, makeVerifier, staticKeys, type TrustedKey } from "../src/index.ts"
import { keyPair, stoppedClock } from "./support/World.ts"

// The receiver's checks one by one, on deliveries signed here the way the outbox signs them (Standard Webhooks `v1a`
// over `${webhook-id}.${webhook-timestamp}.${body}`, and the envelope's own Ed25519 signature): docs/controlplane-outbound.md,
// "Verifying a delivery". Verifier.test.ts checks the same against a real backend's deliveries.

const NOW = 1_796_000_000_000
const atNow = <A, E, R>(effect: Effect.Effect<A, E, R>, millis = NOW) => Effect.withClock(effect, stoppedClock(millis))

const key = keyPair()
const tenant = "acme"

const envelopeBody = (signer = key) => {
  const unsigned = Either.getOrThrow(decodeUnsignedEnvelope({
    type: "controlplane/v1",
    route: { tenant, project: "web", producer: "scheduler" },
    eventId: "evt-rules-000000000001",
    idempotencyKey: "rules:1",
    sequence: 1,
    createdAt: "2026-12-07T09:30:00.000Z",
    schemaVersion: 1,
    keyId: "k1",
    metadata: { kind: "task.proposed", subject: "task-1", attributes: { title: "Réviser le plan" } }
  }))
  return JSON.stringify(signEnvelope(unsigned, signer.privateKey))
}

const v1a = (id: string, timestamp: number | string, body: string, signer = key) =>
  WebhookSignature.formatSignature(sign(null, WebhookSignature.signedContent(id, Number(timestamp), body), signer.privateKey))

/** A delivery as the outbox sends it, sent `ageSeconds` before NOW. */
const delivery = (options: { readonly ageSeconds?: number; readonly body?: string } = {}) => {
  const id = randomUUID()
  const timestamp = Math.floor(NOW / 1000) - (options.ageSeconds ?? 0)
  const body = options.body ?? envelopeBody()
  return { id, timestamp, body, headers: { "webhook-id": id, "webhook-timestamp": String(timestamp), "webhook-signature": v1a(id, timestamp, body) } }
}

const k1 = (state: TrustedKey["state"], verifyUntil: Date | null = null, publicKey = key.publicKey): TrustedKey =>
  ({ keyId: "k1", publicKey, state, verifyUntil })
const verifierWith = (keys: ReadonlyArray<TrustedKey>, toleranceSeconds?: number) =>
  makeVerifier({ keys: staticKeys({ [tenant]: keys }), toleranceSeconds })
const active = verifierWith([k1("active")])

const outcomeOf = (request: DeliveryRequest, verifier = active, millis = NOW) =>
  atNow(verifier.verifyDelivery(request), millis).pipe(
    Effect.map((verified) => `verified ${verified.webhookId}`),
    Effect.catchTag("DeliveryRejected", (rejected) => Effect.succeed(rejected.reason)),
    Effect.runSync
  )

describe("the delivery verifier's rules", () => {
  it("a delivery verifies with its headers named in any case or as a Headers object, from its text or its bytes, and gives its id, timestamp, envelope and key", () => {
    const d = delivery()
    const verified = Effect.runSync(atNow(active.verifyDelivery({ headers: d.headers, body: d.body })))
    expect(verified).toMatchObject({ webhookId: d.id, timestamp: d.timestamp, envelope: { keyId: "k1", route: { tenant } }, key: { state: "active" } })
    const shouting = { "Webhook-Id": d.id, "WEBHOOK-TIMESTAMP": String(d.timestamp), "Webhook-Signature": d.headers["webhook-signature"] }
    expect(outcomeOf({ headers: shouting, body: d.body })).toBe(`verified ${d.id}`)
    expect(outcomeOf({ headers: new Headers(shouting), body: new TextEncoder().encode(d.body) })).toBe(`verified ${d.id}`)
  })

  it("each of the three headers is required", () => {
    const d = delivery()
    for (const name of ["webhook-id", "webhook-timestamp", "webhook-signature"] as const) {
      const { [name]: _, ...rest } = d.headers
      expect([name, outcomeOf({ headers: rest, body: d.body })]).toEqual([name, "headers-missing"])
      expect([name, outcomeOf({ headers: new Headers(rest), body: d.body })]).toEqual([name, "headers-missing"])
    }
  })

  it("the timestamp is 1 to 12 digits and nothing else, and within the tolerance (300 s by default, inclusive) either side of now", () => {
    const d = delivery()
    const t = String(d.timestamp)
    for (const bad of ["", "12e3", "-5", ` ${t}`, `${t} `, `x${t}`, `${t}x`, "1234567890123", "1.5"]) {
      expect([bad, outcomeOf({ headers: { ...d.headers, "webhook-timestamp": bad }, body: d.body })]).toEqual([bad, "timestamp-invalid"])
    }
    for (const [age, outcome] of [[300, "verified"], [-300, "verified"], [301, "timestamp-stale"], [-301, "timestamp-stale"]] as const) {
      const aged = delivery({ ageSeconds: age })
      expect([age, outcomeOf({ headers: aged.headers, body: aged.body }).split(" ")[0]]).toEqual([age, outcome])
    }
    const tight = verifierWith([k1("active")], 10)
    const tenSeconds = delivery({ ageSeconds: 10 })
    expect(outcomeOf({ headers: tenSeconds.headers, body: tenSeconds.body }, tight)).toBe(`verified ${tenSeconds.id}`)
    const eleven = delivery({ ageSeconds: 11 })
    expect(outcomeOf({ headers: eleven.headers, body: eleven.body }, tight)).toBe("timestamp-stale")
  })

  it("the signature header is space-separated `scheme,signature` entries: any v1a entry by the key verifies; other schemes, entries without a comma, signatures of another length or over other content do not", () => {
    const d = delivery()
    const good = d.headers["webhook-signature"]
    const goodSignature = good.slice("v1a,".length)
    const withSignature = (value: string) => outcomeOf({ headers: { ...d.headers, "webhook-signature": value }, body: d.body })
    expect(withSignature(`v1,${goodSignature} ${good}`)).toBe(`verified ${d.id}`)
    expect(withSignature(`${good} v1a,AAAA`)).toBe(`verified ${d.id}`)
    for (const bad of [
      `v1,${goodSignature}`,
      `v1a${goodSignature}`,
      `V1A,${goodSignature}`,
      `xv1a,${goodSignature}`,
      `v1a,${Buffer.from(goodSignature, "base64").subarray(0, 63).toString("base64")}`,
      `v1a,${Buffer.concat([Buffer.from(goodSignature, "base64"), Buffer.from([0])]).toString("base64")}`,
      v1a(d.id, d.timestamp, `${d.body} `),
      v1a(d.id, d.timestamp, d.body, keyPair()),
      ""
    ]) {
      expect([bad, withSignature(bad)]).toEqual([bad, "webhook-signature-invalid"])
    }
  })

  it("the body must be UTF-8 JSON of a signed envelope", () => {
    for (const body of ["{not json", "{}", JSON.stringify({ ...JSON.parse(envelopeBody()), extra: true })]) {
      const d = delivery({ body })
      expect([body.slice(0, 12), outcomeOf({ headers: d.headers, body })]).toEqual([body.slice(0, 12), "body-invalid"])
    }
    const d = delivery()
    expect(outcomeOf({ headers: d.headers, body: new Uint8Array([0x7b, 0xff, 0x7d]) })).toBe("body-invalid")
    // Bytes that are not UTF-8 inside a string of a real envelope are refused as a body, never read with a replacement
    // character in their place.
    const bytes = new TextEncoder().encode(d.body)
    const accent = bytes.findIndex((byte, i) => byte === 0xc3 && bytes[i + 1] === 0xa9)
    expect(accent).toBeGreaterThan(0)
    const broken = Uint8Array.from(bytes)
    broken[accent] = 0xff
    expect(outcomeOf({ headers: d.headers, body: broken })).toBe("body-invalid")
  })

  it("the key is the envelope's keyId in the envelope's tenant: unknown, revoked, retired past (or at) its verifyUntil or without one are refused; retired inside its window verifies", () => {
    const d = delivery()
    const request = { headers: d.headers, body: d.body }
    expect(outcomeOf(request, verifierWith([]))).toBe("key-unknown")
    expect(outcomeOf(request, verifierWith([{ ...k1("active"), keyId: "k2" }]))).toBe("key-unknown")
    expect(outcomeOf(request, makeVerifier({ keys: staticKeys({ other: [k1("active")] }) }))).toBe("key-unknown")
    expect(outcomeOf(request, verifierWith([k1("revoked")]))).toBe("key-revoked")
    expect(outcomeOf(request, verifierWith([k1("revoked", new Date(NOW + 60_000))]))).toBe("key-revoked")
    expect(outcomeOf(request, verifierWith([k1("retired", null)]))).toBe("key-expired")
    expect(outcomeOf(request, verifierWith([k1("retired", new Date(NOW))]))).toBe("key-expired")
    expect(outcomeOf(request, verifierWith([k1("retired", new Date(NOW + 1))]))).toBe(`verified ${d.id}`)
    // The key's bytes, not its id, decide: the same id with other bytes refuses the webhook signature.
    expect(outcomeOf(request, verifierWith([k1("active", null, keyPair().publicKey)]))).toBe("webhook-signature-invalid")
  })

  it("a webhook signature by the key over an envelope the key did not sign is refused: both signatures are checked", () => {
    const forged = envelopeBody(keyPair())
    const d = delivery({ body: forged })
    expect(outcomeOf({ headers: d.headers, body: forged })).toBe("envelope-signature-invalid")
  })

  it("a key lookup that fails fails the verification with its own error, not a rejection", () => {
    const failing = makeVerifier({ keys: () => Effect.fail("lookup down" as const) })
    const d = delivery()
    const exit = Effect.runSyncExit(atNow(failing.verifyDelivery({ headers: d.headers, body: d.body })))
    expect(exit._tag === "Failure" && exit.cause._tag === "Fail" ? exit.cause.error : exit._tag).toBe("lookup down")
  })
})
