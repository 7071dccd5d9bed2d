import { probePort, repoRoot } from "@delivery/testing"
import { Cause, Effect, Exit } from "effect"
import { Evidence } from "./proof/Evidence.ts"
import type { Scenario } from "./proof/Scenario.ts"
import { SCENARIOS } from "./proof/Scenarios.ts"
import { sourceIdentity } from "./proof/Source.ts"
import { makeWorld } from "./proof/World.ts"

// `bun run proof` (spec 002, "Local proof"): every durable delivery of the product recovers unattended. Each
// scenario runs in a world of its own (PostgreSQL cluster, loopback provider and receiver, private folders, real
// backend processes); the proof refuses an uncommitted tree, compares the source identity after the run, writes
// sanitized evidence outside the repository, removes what it created, checks its ports are free again, and exits 0
// only when every check passed. `bun run proof -- <scenario>...` runs some scenarios only.

const only = process.argv.slice(2).filter((arg) => !arg.startsWith("-"))
// For work on the proof itself: runs on an uncommitted tree, and then never passes (exit 3, "not a proof").
const dirtyAllowed = process.argv.includes("--dirty")

const program = Effect.gen(function* () {
  const checked = sourceIdentity(repoRoot)
  if (checked.identity === undefined && !dirtyAllowed) {
    console.error(`proof refused: ${checked.refusal}`)
    return 2
  }
  const before = { identity: checked.identity ?? { commit: "uncommitted", tree: "uncommitted" } }
  const evidence = new Evidence()
  const started = Date.now()
  const chosen = SCENARIOS.filter((s) => only.length === 0 || only.includes(s.name))
  if (chosen.length === 0) {
    console.error(`proof: no scenario named ${only.join(", ")}; known: ${SCENARIOS.map((s) => s.name).join(", ")}`)
    return 2
  }
  const ports: Array<number> = []
  const processes: Array<{ scenario: string; name: string; role: string; pid: number; port: number }> = []
  for (const scenario of chosen) yield* runScenario(scenario, evidence, ports, processes)

  // Every listener of the run is closed again.
  const stillOpen: Array<number> = []
  for (const port of ports) if ((yield* probePort(port)) === "open") stillOpen.push(port)
  evidence.check("clean-up", "every listener port of the run is free again", stillOpen.length === 0, `${ports.length} ports${stillOpen.length > 0 ? `, open: ${stillOpen.join(" ")}` : ""}`)
  const after = sourceIdentity(repoRoot)
  evidence.check(
    "clean-up",
    "the source identity after the run is the one before (commit and tree, no change in the checkout)",
    checked.identity === undefined || (after.identity?.commit === before.identity.commit && after.identity?.tree === before.identity.tree),
    after.refusal ?? `commit ${before.identity.commit.slice(0, 12)}`
  )
  const path = evidence.write({
    source: before.identity,
    startedAt: new Date(started).toISOString(),
    seconds: (Date.now() - started) / 1000,
    processes,
    ports
  })
  console.log(`\n${evidence.table()}\n`)
  console.log(`evidence: ${path}`)
  if (checked.identity === undefined) {
    console.log(`not a proof: the tree was not committed (--dirty); checks ${evidence.ok ? "passed" : "FAILED"}`)
    return 3
  }
  console.log(evidence.ok ? "proof passed" : "proof FAILED")
  return evidence.ok ? 0 : 1
})

const runScenario = (scenario: Scenario, evidence: Evidence, ports: Array<number>, processes: Array<{ scenario: string; name: string; role: string; pid: number; port: number }>) =>
  Effect.gen(function* () {
    console.error(`scenario ${scenario.name}`)
    const started = Date.now()
    const exit = yield* Effect.exit(Effect.scoped(Effect.gen(function* () {
      const world = yield* makeWorld
      const figures = yield* scenario.run(world, evidence).pipe(
        Effect.ensuring(Effect.sync(() => {
          ports.push(...world.ports())
          for (const p of world.processes()) processes.push({ scenario: scenario.name, name: p.name, role: p.role, pid: p.process.pid, port: p.port })
        }))
      )
      return figures
    })))
    const seconds = (Date.now() - started) / 1000
    if (Exit.isFailure(exit)) {
      // Only the failure's kind: a message could quote a request or a token.
      const failure = Cause.squash(exit.cause) as { readonly _tag?: string; readonly message?: string }
      const error = failure?._tag ?? "error"
      evidence.check(scenario.name, "the scenario ran to its end", false, error)
      console.error(Cause.pretty(exit.cause))
      evidence.scenarios.push({ scenario: scenario.name, ok: false, checks: evidence.countIn(scenario.name), failed: evidence.failedIn(scenario.name), seconds, error })
      return
    }
    const failed = evidence.failedIn(scenario.name)
    evidence.scenarios.push({ scenario: scenario.name, ok: failed === 0, checks: evidence.countIn(scenario.name), failed, seconds, ...exit.value })
  })

Effect.runPromise(program).then(
  (code) => process.exit(code),
  (error) => {
    console.error("proof crashed:", error)
    process.exit(1)
  }
)
