import { HttpApi, HttpApiBuilder, HttpBody, HttpClient, type HttpClientResponse } from "@effect/platform"
import { BunHttpServer } from "@effect/platform-bun"
import { SqlClient } from "@effect/sql"
import { type AccountId, AuthenticationLive, DeviceId, Email, Identity, TenantId } from "@delivery/identity"
import { KeyId, KeySource, rawPublicKey, RawPublicKey, Signer } from "@delivery/signer"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { ConfigProvider, Context, Effect, Layer, Redacted, Schema } from "effect"
import { generateKeyPairSync, type KeyObject, randomBytes } from "node:crypto"
import { CorrelationId, EnvelopeInbox, EnvelopeInboxApi, EnvelopeInboxHttpLive, EnvelopeInboxLive, InboxRetention } from "../../src/index.ts"
import { CountingSqlLive } from "@delivery/testing"
import { envelopeJson, type EnvelopeFields, signJson } from "./Signing.ts"

/** Limits high enough that only the tests about limits ever meet them. */
export const generousEnv: Record<string, string> = { IDENTITY_PEER_LIMIT: "1000000", SYNC_INGEST_LIMIT: "1000000" }

/** Counts `Signer.resolveVerificationKey` calls: the key lookup of spec 000 step 3. */
export class KeyLookups extends Context.Tag("@delivery/envelope-inbox/test/KeyLookups")<
  KeyLookups,
  { readonly count: Effect.Effect<number> }
>() {}

/** The real Signer (verify only: no private keys) with its key lookup counted. */
const SpySignerLive = Layer.effectContext(
  Effect.gen(function* () {
    const real = yield* Signer
    let lookups = 0
    const spy = Signer.make({
      ...real,
      resolveVerificationKey: (tenant, keyId) => Effect.suspend(() => (lookups++, real.resolveVerificationKey(tenant, keyId)))
    })
    return Context.make(Signer, spy).pipe(Context.add(KeyLookups, { count: Effect.sync(() => lookups) }))
  })
).pipe(Layer.provide(Signer.Default), Layer.provide(KeySource.layerNone))

// Exactly the backend's shape: one HttpApi with id "delivery", identity's AuthenticationLive.
export const TestApi = HttpApi.make("delivery").add(EnvelopeInboxApi)
const ApiLive = HttpApiBuilder.api(TestApi).pipe(Layer.provide(EnvelopeInboxHttpLive), Layer.provide(AuthenticationLive))

const withEnv = (env: Record<string, string>) => Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))

/** Services on a counting SqlClient over a fresh migrated database, without HTTP. */
export const ServicesLive = (env: Record<string, string> = generousEnv) =>
  Layer.mergeAll(EnvelopeInboxLive, Identity.Default, InboxRetention.Default).pipe(
    Layer.provideMerge(SpySignerLive),
    Layer.provideMerge(CountingSqlLive),
    Layer.provideMerge(TestDatabaseLive),
    Layer.provide(withEnv(env))
  )

/** A real Bun server on a free port serving the route, with an HttpClient pointed at it. */
export const serverFor = (env: Record<string, string>) =>
  HttpApiBuilder.serve().pipe(Layer.provide(ApiLive), Layer.provideMerge(BunHttpServer.layerTest), Layer.provide(withEnv(env)))

/** The suite: services, database and one HTTP server. */
export const SuiteLive = (env: Record<string, string> = generousEnv) =>
  serverFor(env).pipe(Layer.provideMerge(ServicesLive(env)))

export interface Producer {
  readonly tenant: TenantId
  readonly account: AccountId
  readonly token: Redacted.Redacted<string>
  readonly privateKey: KeyObject
  readonly keyId: KeyId
  /** A signed, valid envelope on this producer's stream. */
  readonly envelope: (fields: Omit<EnvelopeFields, "tenant"> & { readonly tenant?: string }) => Record<string, unknown>
}

/** A tenant with one account, one device credential and one registered signing key "k1". */
export const producer = (options: { readonly device?: string } = {}) =>
  Effect.gen(function* () {
    const identity = yield* Identity
    const signer = yield* Signer
    const tenant = TenantId.make(`t-${randomBytes(5).toString("hex")}`)
    yield* identity.createTenant(tenant)
    const account = yield* identity.createAccount({ tenant, email: Schema.decodeSync(Email)(`ops@${tenant}.example`) })
    const device = yield* identity.issueDeviceCredential({ tenant, account, device: DeviceId.make(options.device ?? "d-1") })
    const { privateKey } = generateKeyPairSync("ed25519")
    const keyId = KeyId.make("k1")
    yield* signer.registerKey(tenant, keyId, RawPublicKey.make(rawPublicKey(privateKey)))
    return {
      tenant,
      account,
      token: device.token,
      privateKey,
      keyId,
      envelope: (fields) => signJson(envelopeJson({ tenant, ...fields }), privateKey)
    } satisfies Producer
  })

/**
 * `EnvelopeInbox.receive` as a device of `p` (d-1 unless told), what the route does after authentication, without
 * HTTP (so without any body limit in front). A string is sent as the body's text.
 */
export const receive = (
  p: Producer,
  envelope: Record<string, unknown> | string,
  options: { readonly device?: string; readonly correlationId?: CorrelationId } = {}
) =>
  Effect.flatMap(EnvelopeInbox, (inbox) =>
    inbox.receive({
      identity: { _tag: "Device", tenant: p.tenant, account: p.account, device: DeviceId.make(options.device ?? "d-1") },
      correlationId: options.correlationId ?? newCorrelationId(),
      body: new TextEncoder().encode(typeof envelope === "string" ? envelope : JSON.stringify(envelope))
    }))

export const newCorrelationId = () => CorrelationId.make(randomBytes(16).toString("hex"))

/** Another device credential of the same account. */
export const secondDevice = (p: Producer, device: string) =>
  Effect.flatMap(Identity, (identity) =>
    identity.issueDeviceCredential({ tenant: p.tenant, account: p.account, device: DeviceId.make(device) }))

export interface Answer {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly text: string
  readonly body: Record<string, unknown>
}

const answer = (response: HttpClientResponse.HttpClientResponse) =>
  Effect.map(response.text, (text): Answer => {
    let body: Record<string, unknown> = {}
    try {
      body = JSON.parse(text)
    } catch {
      // Non-JSON bodies are asserted through `text`.
    }
    return { status: response.status, headers: response.headers, text, body }
  })

/** POST /controlplane/v1/envelopes with a JSON value, raw text or a prepared body. */
export const post = (
  body: Record<string, unknown> | string | HttpBody.HttpBody,
  token: Redacted.Redacted<string> | string | undefined
) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    const headers: Record<string, string> = token === undefined
      ? {}
      : { authorization: `Bearer ${typeof token === "string" ? token : Redacted.value(token)}` }
    const prepared = typeof body === "string"
      ? HttpBody.text(body, "application/json")
      : HttpBody.isHttpBody(body)
      ? body
      : HttpBody.text(JSON.stringify(body), "application/json")
    return yield* answer(yield* client.post("/controlplane/v1/envelopes", { body: prepared, headers }))
  }).pipe(Effect.scoped)

/** Row counts of one tenant's inbox tables. */
export const counts = (tenant: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ streams: string; identities: string; payloads: string; audit: string }>`
      SELECT
        (SELECT count(*) FROM inbox_streams WHERE tenant = ${tenant}) AS streams,
        (SELECT count(*) FROM inbox_identities i JOIN inbox_streams s USING (stream_id) WHERE s.tenant = ${tenant}) AS identities,
        (SELECT count(*) FROM inbox_payloads p JOIN inbox_streams s USING (stream_id) WHERE s.tenant = ${tenant}) AS payloads,
        (SELECT count(*) FROM inbox_audit WHERE tenant = ${tenant}) AS audit`.withoutTransform
    return { streams: Number(row!.streams), identities: Number(row!.identities), payloads: Number(row!.payloads), audit: Number(row!.audit) }
  })

export interface AuditEntry {
  readonly project: string | null
  readonly producer: string | null
  readonly account: string
  readonly device: string | null
  readonly event_identity: string | null
  readonly outcome: string
  readonly reason: string
  readonly correlation_id: string
}

/** One tenant's audit rows in order. */
export const auditOf = (tenant: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<AuditEntry>`
      SELECT project, producer, account, device, event_identity, outcome, reason, correlation_id
      FROM inbox_audit WHERE tenant = ${tenant} ORDER BY audit_id`.withoutTransform)

/** The stream's cursor, floor and highest retained sequence. */
export const streamOf = (tenant: string, producer = "laptop-7", project = "website") =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ contiguous_cursor: string; replay_floor: string; high_sequence: string }>`
        SELECT contiguous_cursor, replay_floor, high_sequence FROM inbox_streams
        WHERE tenant = ${tenant} AND project = ${project} AND producer = ${producer}`.withoutTransform,
      (rows) =>
        rows[0] === undefined
          ? undefined
          : { cursor: Number(rows[0].contiguous_cursor), floor: Number(rows[0].replay_floor), high: Number(rows[0].high_sequence) }
    ))
