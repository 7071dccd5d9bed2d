import { expect, layer } from "@effect/vitest"
import { OpenApi } from "@effect/platform"
import { eventIdentity, type UnsignedEnvelope } from "@delivery/signer"
import { Effect } from "effect"
import { EnvelopeInbox } from "../src/index.ts"
import { auditOf, counts, post, producer, streamOf, SuiteLive, TestApi } from "./support/Harness.ts"
import { PAYLOAD_MARKER } from "./support/Signing.ts"

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
