import { expect, layer } from "@effect/vitest"
import { OpenApi } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Canonical } from "@delivery/core"
import { SqlCounter } from "@delivery/testing"
import { eventIdentity, type UnsignedEnvelope } from "@delivery/signer"
import { Cause, Effect, Either, Exit, Option } from "effect"
import { generateKeyPairSync } from "node:crypto"
import { EnvelopeInbox } from "../src/index.ts"
import { auditOf, counts, post, producer, streamOf, SuiteLive, TestApi } from "./support/Harness.ts"
import { envelopeJson, PAYLOAD_MARKER, signJson } from "./support/Signing.ts"

/** SHA-256 (hex) of the RFC 8785 bytes of `envelope` without its signature: the event identity. */
const identityOf = ({ signature: _, ...unsigned }: Record<string, unknown>) =>
  Canonical.sha256Hex(Either.getOrThrow(Canonical.canonicalBytes(unsigned)))

layer(SuiteLive(), { excludeTestServices: true })("POST /controlplane/v1/envelopes (spec 000, inbound order and acknowledgement)", (it) => {
  it.effect("commit the permanent identity, expiring payload, cursor advancement, and redacted audit event in one transaction; only then return an acknowledgement (201 accepted)", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const envelope = p.envelope({ sequence: 1 })
      const answer = yield* post(envelope, p.token)
      expect(answer.status).toBe(201)
      const identity = eventIdentity(envelope as unknown as UnsignedEnvelope)
      expect(answer.body).toEqual({
        outcome: "accepted",
        reason: "accepted",
        eventIdentity: identity,
        sequence: 1,
        cursor: 1,
        correlationId: answer.headers["x-correlation-id"]
      })
      expect(yield* counts(p.tenant)).toEqual({ streams: 1, identities: 1, payloads: 1, audit: 1 })
      expect(yield* streamOf(p.tenant)).toEqual({ cursor: 1, floor: 0, high: 1 })
      // Audit: tenant, project, actor/device, SHA-256 event identity, outcome, reason, correlation id; no payload.
      const [audit] = yield* auditOf(p.tenant)
      expect(audit).toEqual({
        project: "website",
        producer: "laptop-7",
        account: p.account,
        device: "d-1",
        event_identity: identity,
        outcome: "accepted",
        reason: "accepted",
        correlation_id: answer.headers["x-correlation-id"]
      })
      expect(JSON.stringify(audit)).not.toContain(PAYLOAD_MARKER)
      expect(JSON.stringify(audit)).not.toContain(envelope.signature as string)
    }))

  it.effect("Duplicates are acknowledged only after their duplicate audit commits: the same event again is 200 duplicate, retained once", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const envelope = p.envelope({ sequence: 1 })
      expect((yield* post(envelope, p.token)).status).toBe(201)
      const again = yield* post(envelope, p.token)
      expect(again.status).toBe(200)
      expect(again.body).toMatchObject({ outcome: "duplicate", reason: "duplicate", sequence: 1, cursor: 1 })
      expect(yield* counts(p.tenant)).toEqual({ streams: 1, identities: 1, payloads: 1, audit: 2 })
      const audit = yield* auditOf(p.tenant)
      expect(audit.map((row) => [row.outcome, row.correlation_id])).toEqual([
        ["accepted", audit[0]!.correlation_id],
        ["duplicate", again.headers["x-correlation-id"]]
      ])
    }))

  it.effect("the same event id with different content is refused (409 event-id-conflict); so are a reused idempotency key (idempotency-key-conflict) and a reused sequence (sequence-conflict)", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const first = p.envelope({ sequence: 1, eventId: "event-0000000000000001", idempotencyKey: "op-1" })
      expect((yield* post(first, p.token)).status).toBe(201)
      const cases: Array<[Record<string, unknown>, string]> = [
        [p.envelope({ sequence: 1, eventId: "event-0000000000000001", idempotencyKey: "op-1", subject: "other-task" }), "event-id-conflict"],
        [p.envelope({ sequence: 2, eventId: "event-0000000000000001" }), "event-id-conflict"],
        [p.envelope({ sequence: 2, idempotencyKey: "op-1" }), "idempotency-key-conflict"],
        [p.envelope({ sequence: 1 }), "sequence-conflict"]
      ]
      for (const [envelope, reason] of cases) {
        const answer = yield* post(envelope, p.token)
        expect(answer.status).toBe(409)
        expect(answer.body).toEqual({ _tag: "EnvelopeConflict", reason, correlationId: answer.headers["x-correlation-id"] })
      }
      expect(yield* counts(p.tenant)).toEqual({ streams: 1, identities: 1, payloads: 1, audit: 5 })
      expect((yield* auditOf(p.tenant)).slice(1).map((row) => [row.outcome, row.reason])).toEqual(
        cases.map(([, reason]) => ["refused", reason])
      )
      expect(yield* streamOf(p.tenant)).toEqual({ cursor: 1, floor: 0, high: 1 })
    }))

  it.effect("Gaps do not advance the contiguous cursor; a later missing sequence advances through all now-contiguous retained identities", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const cursorAfter = (sequence: number) => Effect.map(post(p.envelope({ sequence }), p.token), (a) => [a.status, a.body.cursor])
      expect(yield* cursorAfter(1)).toEqual([201, 1])
      expect(yield* cursorAfter(3)).toEqual([201, 1])
      expect(yield* cursorAfter(4)).toEqual([201, 1])
      expect(yield* cursorAfter(6)).toEqual([201, 1])
      expect(yield* streamOf(p.tenant)).toEqual({ cursor: 1, floor: 0, high: 6 })
      // 2 fills the first gap: the cursor runs through 3 and 4 and stops at the next gap (5).
      expect(yield* cursorAfter(2)).toEqual([201, 4])
      expect(yield* cursorAfter(5)).toEqual([201, 6])
      expect(yield* counts(p.tenant)).toMatchObject({ identities: 6, payloads: 6 })
    }))

  it.effect("Reordered records are retained under the public v1 outcome: 201 accepted, audited internally as reordered", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      for (const sequence of [2, 3, 1, 4]) {
        const answer = yield* post(p.envelope({ sequence }), p.token)
        expect([answer.status, answer.body.outcome, answer.body.reason]).toEqual([201, "accepted", "accepted"])
      }
      expect((yield* auditOf(p.tenant)).map((row) => [row.outcome, row.reason])).toEqual([
        ["accepted", "reordered"], // ahead of the gap at 1
        ["accepted", "reordered"],
        ["accepted", "reordered"], // filled the gap after later sequences were retained
        ["accepted", "accepted"]
      ])
      expect(yield* streamOf(p.tenant)).toEqual({ cursor: 4, floor: 0, high: 4 })
    }))

  it.effect("the replay floor closes sequences: at or below it only retained identities are acknowledged (as duplicates), others are sequence-below-replay-floor; it never goes down", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const inbox = yield* EnvelopeInbox
      const key = { tenant: p.tenant, project: "website", producer: "laptop-7" }
      const two = p.envelope({ sequence: 2 })
      const five = p.envelope({ sequence: 5 })
      expect((yield* post(two, p.token)).status).toBe(201)
      expect((yield* post(five, p.token)).status).toBe(201)
      // Closing 1..3 writes off the missing 1 and 3; the cursor runs over them and stops at the gap 4.
      expect(yield* inbox.raiseReplayFloor(key, 3)).toMatchObject({ cursor: 3, replayFloor: 3, highSequence: 5 })
      const one = yield* post(p.envelope({ sequence: 1 }), p.token)
      expect([one.status, one.body.reason]).toEqual([409, "sequence-below-replay-floor"])
      expect((yield* post(two, p.token)).status).toBe(200)
      // A lower floor changes nothing.
      expect(yield* inbox.raiseReplayFloor(key, 1)).toMatchObject({ cursor: 3, replayFloor: 3 })
      expect((yield* post(p.envelope({ sequence: 4 }), p.token)).body.cursor).toBe(5)
      expect(yield* streamOf(p.tenant)).toEqual({ cursor: 5, floor: 3, high: 5 })
      // Raising past everything moves the cursor to the floor; a new stream can be given a floor up front.
      expect(yield* inbox.raiseReplayFloor(key, 9)).toMatchObject({ cursor: 9, replayFloor: 9, highSequence: 5 })
      expect(yield* inbox.raiseReplayFloor({ ...key, producer: "restored-laptop" }, 100)).toMatchObject({ cursor: 100, replayFloor: 100 })
    }))

  it.effect("the expiring payload is the whole envelope as received, in RFC 8785 form with its signature; the signed bytes are that text without the signature", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const envelope = p.envelope({ sequence: 1 })
      expect((yield* post(envelope, p.token)).status).toBe(201)
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{ envelope: string }>`
        SELECT envelope FROM inbox_payloads JOIN inbox_streams USING (stream_id) WHERE tenant = ${p.tenant}`.withoutTransform
      expect(rows.map((row) => row.envelope)).toEqual([Either.getOrThrow(Canonical.canonicalString(envelope))])
      const { signature: _, ...unsigned } = JSON.parse(rows[0]!.envelope) as Record<string, unknown>
      expect(identityOf(unsigned)).toBe((yield* auditOf(p.tenant))[0]!.event_identity)
    }))

  it.effect("Every authenticated accept/refusal records a SHA-256 event identity once the signed bytes are known: refusals at step 3 and 4 carry it, earlier ones have none", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const stranger = generateKeyPairSync("ed25519").privateKey
      const badSignature = signJson(envelopeJson({ tenant: p.tenant, sequence: 1 }), stranger)
      const version2 = signJson({ ...envelopeJson({ tenant: p.tenant, sequence: 1 }), schemaVersion: 2 }, p.privateKey)
      const unknownKey = signJson({ ...envelopeJson({ tenant: p.tenant, sequence: 1 }), keyId: "k9" }, p.privateKey)
      const reasons = [] as Array<unknown>
      for (const envelope of [badSignature, version2, unknownKey, { ...p.envelope({ sequence: 1 }), eventId: "short" }]) {
        reasons.push((yield* post(envelope, p.token)).body.reason)
      }
      expect(reasons).toEqual(["signature-invalid", "schema-version-unsupported", "key-unknown", "envelope-invalid"])
      expect((yield* auditOf(p.tenant)).map((row) => [row.reason, row.event_identity])).toEqual([
        ["signature-invalid", identityOf(badSignature)],
        ["schema-version-unsupported", identityOf(version2)],
        ["key-unknown", identityOf(unknownKey)],
        ["envelope-invalid", null]
      ])
    }))

  it.effect("EnvelopeInbox.stream reads a stream's contiguous cursor, replay floor and highest retained sequence; a stream never seen is none", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const inbox = yield* EnvelopeInbox
      const key = { tenant: p.tenant, project: "website", producer: "laptop-7" }
      expect(yield* inbox.stream(key)).toEqual(Option.none())
      for (const sequence of [1, 2, 4]) expect((yield* post(p.envelope({ sequence }), p.token)).status).toBe(201)
      const state = yield* inbox.stream(key)
      expect(Option.map(state, (s) => ({ ...s }))).toEqual(Option.some({ ...key, cursor: 2, replayFloor: 0, highSequence: 4 }))
      expect(yield* inbox.stream({ ...key, producer: "another-laptop" })).toEqual(Option.none())
    }))

  it.effect("only an operator moves the replay floor, to an integer 0..2^53-1: a negative, fractional or unsafe floor is a defect that changes nothing; 0 is a floor like any other", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const inbox = yield* EnvelopeInbox
      const key = { tenant: p.tenant, project: "website", producer: "laptop-7" }
      expect((yield* post(p.envelope({ sequence: 1 }), p.token)).status).toBe(201)
      for (const floor of [-1, -0.5, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) {
        const exit = yield* Effect.exit(inbox.raiseReplayFloor(key, floor))
        expect([floor, Exit.isFailure(exit) && Cause.isDie(exit.cause)]).toEqual([floor, true])
        if (Exit.isFailure(exit)) expect(Cause.pretty(exit.cause)).toContain("a replay floor is an integer 0..2^53-1")
      }
      expect(yield* streamOf(p.tenant)).toEqual({ cursor: 1, floor: 0, high: 1 })
      // Floor 0 closes nothing: an existing stream stays as it is, a new one is created at 0.
      expect(yield* inbox.raiseReplayFloor(key, 0)).toMatchObject({ cursor: 1, replayFloor: 0, highSequence: 1 })
      expect(yield* inbox.raiseReplayFloor({ ...key, producer: "new-laptop" }, 0)).toMatchObject({ cursor: 0, replayFloor: 0, highSequence: 0 })
      expect(yield* streamOf(p.tenant, "new-laptop")).toEqual({ cursor: 0, floor: 0, high: 0 })
    }))

  it.effect("a replay floor at or below the current one changes nothing: the stream is locked and read, neither floor nor cursor is written, and the request is audited as unchanged", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const inbox = yield* EnvelopeInbox
      const counter = yield* SqlCounter
      const key = { tenant: p.tenant, project: "website", producer: "laptop-7" }
      for (const sequence of [1, 2, 5]) expect((yield* post(p.envelope({ sequence }), p.token)).status).toBe(201)
      expect(yield* inbox.raiseReplayFloor(key, 3)).toMatchObject({ cursor: 3, replayFloor: 3, highSequence: 5 })
      for (const floor of [3, 2]) {
        const before = (yield* counter.statements).length
        expect(yield* inbox.raiseReplayFloor(key, floor)).toMatchObject({ cursor: 3, replayFloor: 3, highSequence: 5 })
        const statements = (yield* counter.statements).slice(before).map((s) => s.trim())
        expect(statements.filter((s) => !/^(BEGIN|COMMIT|SAVEPOINT|RELEASE)/i.test(s))).toEqual([
          expect.stringMatching(/^INSERT INTO inbox_streams/),
          expect.stringMatching(/^INSERT INTO inbox_stream_audit/)
        ])
      }
      expect(yield* streamOf(p.tenant)).toEqual({ cursor: 3, floor: 3, high: 5 })
    }))

  it.effect("every response carries a stable reason and a correlation id, and none echoes the payload", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const envelope = p.envelope({ sequence: 1 })
      const answers = [
        yield* post(envelope, p.token),
        yield* post(envelope, p.token),
        yield* post(envelope, undefined),
        yield* post({ ...envelope, extra: PAYLOAD_MARKER }, p.token),
        yield* post({ ...envelope, route: { tenant: "someone-else", project: "website", producer: "x" } }, p.token),
        yield* post("{" + PAYLOAD_MARKER, p.token)
      ]
      expect(answers.map((a) => a.status)).toEqual([201, 200, 401, 422, 403, 422])
      for (const answer of answers) {
        expect(answer.headers["x-correlation-id"]).toMatch(/^[0-9a-f]{32}$/)
        expect(typeof answer.body.reason).toBe("string")
        expect(answer.text).not.toContain(PAYLOAD_MARKER)
        expect(answer.text).not.toContain(envelope.signature as string)
      }
      expect(new Set(answers.map((a) => a.headers["x-correlation-id"])).size).toBe(answers.length)
    }))

  it.effect("the OpenAPI document declares the route, bearer security and every status", () =>
    Effect.sync(() => {
      const operation = OpenApi.fromApi(TestApi).paths["/controlplane/v1/envelopes"]?.post
      expect(operation?.security).toEqual([{ bearer: [] }])
      expect(Object.keys(operation?.responses ?? {}).sort()).toEqual(
        ["200", "201", "400", "401", "403", "409", "413", "422", "429", "503"]
      )
    }))
})
