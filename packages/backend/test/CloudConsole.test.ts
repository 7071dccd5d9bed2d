import { connect, probePort } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import { makeStack, registerStack, startCloud } from "./support/Cloud.ts"
import { consoleClient, csrfOf, dataWithin, overviewCount, signedIn } from "./support/Console.ts"

// The operator console of the cloud role (ROLE=cloud through `bun run start`): the same sign-in, sessions, CSRF and
// security headers as the backend's, with the cloud's own sections. The stacks' counts are read against the cloud's
// database; actions go through CloudStacks with their fences and audit rows, as operator:console; a real tenant
// backend is stopped and started again by the local compute provider.

const STACK_STATES = ["awake", "draining", "stopping", "stop-uncertain", "asleep", "waking", "suspended", "archived"]

layer(TestDatabaseLive, { excludeTestServices: true, timeout: 240_000 })("the operator console in a cloud process", (it) => {
  it.scoped("sign-in on the cloud; the overview counts the stacks by state as the database does, with this process's wake admission; the stacks list by keyset and state; a stack's detail; a confirmed hold, suspend, resume and sleep audited as operator:console, the stored receipt shown by its counts only; a POST without the CSRF token refused 403 and changing nothing; broker events without payload or signature", () =>
    Effect.gen(function* () {
      const stack = yield* makeStack()
      const cloud = yield* startCloud({ stacks: [stack], env: { IDLE_WAKE_SLEEP_EVERY: "off" } })
      const host = `${stack.id}.tenants.test`
      yield* registerStack(cloud, stack, host)
      const sql = yield* connect(cloud.databaseUrl)
      const base = `http://127.0.0.1:${cloud.port}`

      // Stacks in other states, written as the cloud's own transitions leave them; no host routes to them.
      const prefix = `zz${randomBytes(2).toString("hex")}`
      for (const [i, state] of ["asleep", "suspended", "stop-uncertain", "asleep"].entries()) {
        yield* sql`
          INSERT INTO idle_wake_cloud_stacks
            (id, audience, report_key_id, report_public_key, profiles, state, state_changed_at, created_at)
          VALUES (${`${prefix}-${i}`}, ${`tenant:${prefix}-${i}`}, 'report-1', ${randomBytes(32).toString("base64url")},
                  '{tenant-api-http-v2}', ${state}, now(), now())`
      }

      // Without a session: the sign-in form, on the cloud's operator port.
      const anonymous = consoleClient(base)
      const redirected = yield* anonymous.get("/console/stacks")
      expect(redirected.status).toBe(303)
      expect(redirected.headers.get("location")).toBe("/console/sign-in")
      const { client } = yield* signedIn(base)

      const overview = yield* client.get("/console/overview")
      expect(overview.status).toBe(200)
      expect(overview.headers.get("content-security-policy")).toContain("default-src 'none'")
      expect(overview.body).toContain(`href="/console/stacks"`)
      expect(overview.body).toContain(`href="/console/broker-events"`)
      expect(overview.body).not.toContain(`href="/console/outbox"`)
      const counted = yield* sql<{ state: string; n: number }>`
        SELECT state, count(*)::int AS n FROM idle_wake_cloud_stacks GROUP BY state`.withoutTransform
      const expected = Object.fromEntries(STACK_STATES.map((state) => [state, counted.find((row) => row.state === state)?.n ?? 0]))
      expect(expected).toMatchObject({ awake: 1, asleep: 2, suspended: 1, "stop-uncertain": 1 })
      expect(Object.fromEntries(STACK_STATES.map((state) => [state, overviewCount(overview.body, "cloud-stacks", state)]))).toEqual(expected)
      expect(overview.body).toContain(`data-family="cloud-connector-events"`)
      expect(overview.body).toContain(`hx-get="/console/overview/live"`)
      expect(overview.body).toContain(`hx-get="/console/admission/live"`)
      expect(overview.body).toMatch(/data-counter="wakesStarted"><td>[^<]*<\/td><td class="num count">0<\/td>/)
      expect(overview.body).toContain(`data-worker="connector-event-delivery"`)
      const admission = yield* client.get("/console/admission/live", { "hx-request": "true" })
      expect(admission.status).toBe(200)
      expect(admission.body).toMatch(/^<section id="admission"/)

      // The list: by id, a page at a time, and by state.
      const first = yield* client.get("/console/stacks?limit=2")
      expect(first.status).toBe(200)
      const ids = [...first.body.matchAll(/<tr data-stack="([^"]+)"/g)].map((m) => m[1])
      expect(ids).toHaveLength(2)
      expect(ids).toEqual([...ids].sort())
      const next = /<a rel="next" href="([^"]+)"/.exec(first.body)?.[1]?.replaceAll("&amp;", "&")
      expect(next).toBe(`/console/stacks?limit=2&cursor=${ids[1]}`)
      const second = yield* client.get(next!)
      const secondIds = [...second.body.matchAll(/<tr data-stack="([^"]+)"/g)].map((m) => m[1]!)
      expect(secondIds[0]! > ids[1]!).toBe(true)
      const asleep = yield* client.get("/console/stacks?state=asleep")
      expect([...asleep.body.matchAll(/<tr data-stack="([^"]+)" data-state="([^"]+)"/g)].map((m) => [m[1], m[2]]))
        .toEqual([[`${prefix}-0`, "asleep"], [`${prefix}-3`, "asleep"]])
      const live = yield* client.get("/console/stacks/live?state=suspended", { "hx-request": "true" })
      expect(live.body).toMatch(/^<section id="list" hx-get="\/console\/stacks\/live\?state=suspended"/)
      expect((yield* client.get("/console/stacks?state=sleepy")).status).toBe(400)

      // A stack's detail.
      const stackPath = `/console/stack/${stack.id}`
      const detail = yield* client.get(stackPath)
      expect(detail.status).toBe(200)
      expect(detail.body).toContain(`data-state="awake"`)
      expect(detail.body).toContain(`data-host="${host}"`)
      expect(detail.body).toContain(`data-receipt="none"`)
      expect(detail.body).toContain(`data-recovery-hold="false"`)
      expect(detail.body).toContain(`data-wake-attempt="0"`)
      expect(detail.body).toContain(`data-action="registered"`)
      expect(detail.body).toContain(`data-action="host-added"`)
      expect(detail.body).toContain(`hx-get="${stackPath}/live"`)
      expect(detail.body).toContain(`data-offer="suspend"`)
      expect(detail.body).not.toContain(`data-offer="resume"`)
      const detailLive = yield* client.get(`${stackPath}/live`, { "hx-request": "true" })
      expect(detailLive.body).toMatch(/^<section id="detail"/)
      expect(detailLive.body).toContain(`data-state="awake"`)
      expect((yield* client.get("/console/stack/no-such-stack")).status).toBe(404)

      // A hold: confirmed, then posted; without the session's CSRF token it is refused and nothing changes.
      const holdPath = `${stackPath}/hold`
      const confirm = yield* client.get(holdPath)
      expect(confirm.status).toBe(200)
      expect(confirm.body).toContain("operator:console")
      const csrf = csrfOf(confirm.body)!
      const auditCount = sql<{ n: number }>`SELECT count(*)::int AS n FROM idle_wake_cloud_audit WHERE stack_id = ${stack.id}`.withoutTransform
      const before = (yield* auditCount)[0]!.n
      const refused = yield* client.post(holdPath, {})
      expect(refused.status).toBe(403)
      expect(refused.headers.get("x-console-refusal")).toBe("csrf-token-invalid")
      const held = sql<{ recovery_hold: boolean }>`SELECT recovery_hold FROM idle_wake_cloud_stacks WHERE id = ${stack.id}`.withoutTransform
      expect((yield* held)[0]!.recovery_hold).toBe(false)
      expect((yield* auditCount)[0]!.n).toBe(before)
      expect((yield* client.post(`${stackPath}/reboot`, { csrf })).status).toBe(400)

      const posted = yield* client.post(holdPath, { csrf })
      expect(posted.status).toBe(303)
      expect(posted.headers.get("location")).toBe(`${stackPath}?done=hold&outcome=done`)
      expect((yield* held)[0]!.recovery_hold).toBe(true)
      const holdRow = yield* sql<{ detail: unknown; correlation_id: string }>`
        SELECT detail, correlation_id FROM idle_wake_cloud_audit WHERE stack_id = ${stack.id} AND action = 'recovery-hold-set'`.withoutTransform
      expect(holdRow).toEqual([{ detail: { actor: "operator:console" }, correlation_id: posted.headers.get("x-correlation-id") }])
      const afterHold = yield* client.get(posted.headers.get("location")!)
      expect(afterHold.body).toContain(`data-notice="hold"`)
      expect(afterHold.body).toContain(`data-recovery-hold="true"`)
      expect(dataWithin(afterHold.body, "action", "recovery-hold-set", "actor")).toBe("operator:console")
      // With the hold set, only its release is offered.
      expect(afterHold.body).not.toContain(`data-offer="hold"`)
      expect(afterHold.body).toContain(`data-offer="release"`)

      // Suspend: the compute is stopped; resume: started again and ready.
      const suspended = yield* client.post(`${stackPath}/suspend`, { csrf })
      expect(suspended.status).toBe(303)
      expect(suspended.headers.get("location")).toBe(`${stackPath}?done=suspend&outcome=stopped`)
      expect(yield* probePort(stack.port)).toBe("refused")
      const resumed = yield* client.post(`${stackPath}/resume`, { csrf })
      expect(resumed.status).toBe(303)
      expect(yield* probePort(stack.port)).toBe("open")
      const actions = yield* sql<{ action: string; detail: unknown }>`
        SELECT action, detail FROM idle_wake_cloud_audit WHERE stack_id = ${stack.id} AND action IN ('suspended', 'resumed') ORDER BY id`.withoutTransform
      expect(actions).toEqual([
        { action: "suspended", detail: { actor: "operator:console" } },
        { action: "resumed", detail: { actor: "operator:console" } }
      ])
      expect((yield* client.post(`${stackPath}/resume`, { csrf })).headers.get("x-console-refusal")).toBe("stack-state")

      // A sleep cycle (nothing holds the idle tenant): the receipt is shown by its counts only.
      const slept = yield* client.post(`${stackPath}/sleep`, { csrf })
      expect(slept.headers.get("location")).toBe(`${stackPath}?done=sleep&outcome=asleep`)
      const asleepDetail = yield* client.get(slept.headers.get("location")!)
      expect(asleepDetail.body).toContain(`data-notice="sleep"`)
      expect(asleepDetail.body).toContain(`data-state="asleep"`)
      expect(asleepDetail.body).toContain(`data-receipt="stored"`)
      expect(asleepDetail.body).toContain(`data-receipt-keys="0"`)
      expect(dataWithin(asleepDetail.body, "action", "sleep-started", "actor")).toBe("operator:console")
      const stored = yield* sql<{ challenge: string }>`SELECT receipt ->> 'challenge' AS challenge FROM idle_wake_cloud_stacks WHERE id = ${stack.id}`.withoutTransform
      expect(stored[0]!.challenge.length).toBeGreaterThan(0)
      expect(asleepDetail.body).not.toContain(stored[0]!.challenge)

      // Broker events: settled ones and one waiting an hour, so the delivery worker claims none of them.
      const payloadMarker = `payload-${randomBytes(6).toString("hex")}`
      const signature = `sha256=${randomBytes(32).toString("hex")}`
      const eventIds: Array<string> = []
      for (const [i, state] of ["delivered", "dead", "pending"].entries()) {
        const id = randomUUID()
        eventIds.push(id)
        yield* sql`
          INSERT INTO idle_wake_cloud_connector_events
            (id, stack_id, connector_instance, endpoint_id, delivery_id, event, payload, github_signature, state, attempt,
             available_at, last_code, received_at, settled_at)
          VALUES (${id}::uuid, ${stack.id}, 'connector-1', 'endpoint-1', ${randomUUID()}, 'issues', ${Buffer.from(payloadMarker)},
                  ${signature}, ${state}, 1, now() + interval '1 hour', ${state === "dead" ? "event-malformed" : null},
                  now() - ${3 - i} * interval '1 minute', ${state === "pending" ? null : new Date()})`
      }
      const events = yield* client.get(`/console/broker-events?stack=${stack.id}`)
      expect(events.status).toBe(200)
      expect([...events.body.matchAll(/<tr data-id="([^"]+)" data-state="([^"]+)"/g)].map((m) => [m[1], m[2]]))
        .toEqual([[eventIds[0], "delivered"], [eventIds[1], "dead"], [eventIds[2], "pending"]])
      const dead = yield* client.get(`/console/broker-events?stack=${stack.id}&state=dead&limit=1`)
      expect([...dead.body.matchAll(/<tr data-id="([^"]+)"/g)].map((m) => m[1])).toEqual([eventIds[1]])
      const event = yield* client.get(`/console/broker-events/${stack.id}/${eventIds[1]}`)
      expect(event.status).toBe(200)
      expect(event.body).toContain(`data-state="dead"`)
      expect(event.body).toContain(`data-last-code="event-malformed"`)
      expect(event.body).toContain(`data-attempt="1"`)
      for (const page of [events.body, event.body]) {
        expect(page).not.toContain(payloadMarker)
        expect(page).not.toContain(Buffer.from(payloadMarker).toString("base64url"))
        expect(page).not.toContain(signature)
      }
      expect((yield* client.get(`/console/broker-events/${stack.id}/${randomUUID()}`)).status).toBe(404)
      expect((yield* client.get(`/console/broker-events?stack=${stack.id}&cursor=bogus`)).headers.get("x-console-refusal")).toBe("cursor-invalid")
    }))
})
