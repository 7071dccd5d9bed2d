import { probePort } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { makeStack, op, registerStack, sleepStack, stackState, startCloud, startsOf, viaProxy } from "./support/Cloud.ts"
import { call } from "./support/Http.ts"
import { tenantWithKey } from "./support/Receipts.ts"

// Spec 001's cloud side through the shipped process: `bun run start` with ROLE=cloud, its wake proxy and operator
// routes, and real tenant backends that its local compute provider starts and stops.

layer(TestDatabaseLive, { excludeTestServices: true, timeout: 240_000 })("idle wake, cloud side, through `bun run start` (spec 001)", (it) => {
  it.scoped("a sleeping tenant woken by a projected key receives the request exactly once; an unknown key gets a refusal and no start", () =>
    Effect.gen(function* () {
      const stack = yield* makeStack()
      const cloud = yield* startCloud({ stacks: [stack] })
      const host = `${stack.id}.tenants.test`
      yield* registerStack(cloud, stack, host)
      const { token } = yield* tenantWithKey(stack.port, ["receipts:write"])

      const slept = yield* sleepStack(cloud, stack)
      expect(slept).toEqual({ outcome: "asleep" })
      expect(yield* probePort(stack.port)).toBe("refused")
      const asleep = yield* stackState(cloud, stack)
      expect(asleep).toMatchObject({ state: "asleep", receipt: { keys: 1 } })
      const startsBefore = startsOf(cloud, stack)

      const unknown = yield* viaProxy(cloud, host, "GET", "/api/whoami", { token: `${token.slice(0, -4)}AAAA` })
      expect(unknown.status).toBe(401)
      expect(unknown.json).toMatchObject({ _tag: "WakeRefused", reason: "wake-key-unknown" })
      expect(yield* probePort(stack.port)).toBe("refused")
      expect(startsOf(cloud, stack)).toBe(startsBefore)

      const woken = yield* viaProxy(cloud, host, "GET", "/api/whoami", { token })
      expect(woken.status).toBe(200)
      expect(startsOf(cloud, stack)).toBe(startsBefore + 1)
      const after = yield* stackState(cloud, stack)
      expect(after).toMatchObject({ state: "awake", receipt: null })
      expect(after.audit.map((entry: { action: string }) => entry.action)).toEqual(
        expect.arrayContaining(["registered", "sleep-started", "receipt-stored", "asleep", "wake-claimed", "awake"])
      )
      const admission = yield* call(cloud.port, "GET", "/operator/cloud/admission", op)
      expect(admission.json.refusals).toMatchObject({ "wake-key-unknown": 1 })

      // Awake: forwarded at once, and the tenant's own blockers decide the next sleep (its API activity now).
      expect((yield* viaProxy(cloud, host, "GET", "/api/whoami", { token })).status).toBe(200)
      const again = yield* sleepStack(cloud, stack)
      expect(again).toMatchObject({ outcome: "refused", code: "report-not-idle", blockers: [{ code: "local-api-activity" }] })
      expect((yield* stackState(cloud, stack)).state).toBe("awake")
      expect(startsOf(cloud, stack)).toBe(startsBefore + 1)
    }))
})
