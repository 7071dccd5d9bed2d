import { get } from "@delivery/testing"
import { Effect } from "effect"
import type { Scenario } from "./Scenario.ts"

// Spec 002, "Start and stop": two backends and one ingress start on the proof's database (migrations and health
// check before workers, workers before the listener); the ingress starts no delivery worker; SIGTERM stops each
// with exit 0.
export const startStop: Scenario = {
  name: "start-stop",
  run: (world, evidence) =>
    Effect.gen(function* () {
      const name = "start-stop"
      const a = yield* world.start("backend-a")
      const b = yield* world.start("backend-b")
      const ingress = yield* world.start("ingress", { role: "ingress" })
      for (const p of [a, b, ingress]) {
        const ready = yield* get(p.port, "/ready")
        evidence.check(name, `${p.name} (${p.role}) answers /ready 200`, ready.status === 200, `status ${ready.status}`)
      }
      const ingressLog = yield* ingress.process.output
      evidence.check(name, "the ingress starts no delivery worker", ingressLog.includes("delivery workers are not started") && !/worker \S+ started/.test(ingressLog))
      const backendLog = yield* a.process.output
      for (const worker of ["outbox-delivery", "reset-mail", "receipt-effects", "team-application-notifications"]) {
        evidence.check(name, `backend-a runs the ${worker} worker`, new RegExp(`worker ${worker}\\S* started`).test(backendLog))
      }
      for (const p of [a, b, ingress]) {
        yield* p.process.signal("SIGTERM")
        const code = yield* p.process.exitCode("30 seconds")
        evidence.check(name, `${p.name} exits 0 on SIGTERM`, code === 0, `exit ${code}`)
      }
      return {}
    })
}
