import { Duration, Effect, Either, Option } from "effect"
import { randomBytes } from "node:crypto"
import { compareForStop } from "../Fingerprint.ts"
import { type Blocker, type Bytes32, type DrainReport, type IncomingWakeCapability, PROFILE_ROUTES, type ProfileName } from "../Protocol.ts"
import type { StackId } from "../Domain.ts"
import { CloudSettingsTag } from "./CloudConfig.ts"
import { CloudStacksRepo, type StackRow } from "./CloudStacksRepo.ts"
import { ComputeProvider } from "./ComputeProvider.ts"
import { DrainClient, type DrainTarget } from "./DrainClient.ts"
import { Routing } from "./Routing.ts"

// Spec 001's sleep operation, one cycle: a new random idle hold; a signed initial read and a signed final read (with
// the capability the stack is registered for); the cloud's comparison of the requested capability and the initial
// and final proofs; the final proof stored as the stack's receipt under the sleep operation lock; only then compute
// is stopped. Every step after the claim is fenced by the claimed op_attempt: a cycle whose lease ended changes
// nothing.

export type SleepOutcome =
  | { readonly outcome: "asleep" }
  /** The tenant was not idle, or the proofs did not allow a stop: nothing was stopped, the stack is awake. */
  | { readonly outcome: "refused"; readonly code: string; readonly blockers: ReadonlyArray<Blocker> }
  /** Stopped could not be confirmed: the receipt is kept and the stack is recovered later. */
  | { readonly outcome: "stop-uncertain"; readonly code: string }
  /** The stack was not awake (or another cycle holds its lock). */
  | { readonly outcome: "not-awake"; readonly state: string }
  /** This cycle's lease ended before it finished; whatever it found, it changed nothing. */
  | { readonly outcome: "lease-lost" }

const capabilityOf = (profiles: ReadonlyArray<string>): IncomingWakeCapability => ({
  version: 1,
  profiles: profiles.map((profile) => ({ profile: profile as ProfileName, routes: [...PROFILE_ROUTES[profile as ProfileName]] }))
})

export const drainTargetOf = (row: StackRow): DrainTarget => ({
  stack: row.id as StackId,
  audience: row.audience,
  upstream: row.upstream ?? "",
  reportKeyId: row.report_key_id,
  reportPublicKey: row.report_public_key
})

const blockersOf = (report: DrainReport): ReadonlyArray<Blocker> =>
  report.version === 1 ? report.blockers.map((code) => ({ code })) : report.blockers

export class SleepOperation extends Effect.Service<SleepOperation>()("@delivery/idle-wake/SleepOperation", {
  effect: Effect.gen(function* () {
    const settings = yield* CloudSettingsTag
    const repo = yield* CloudStacksRepo
    const drain = yield* DrainClient
    const compute = yield* ComputeProvider
    const routing = yield* Routing
    const holdSeconds = Math.max(1, Math.floor(Duration.toSeconds(settings.sleepHold)))

    const sleep = Effect.fn("SleepOperation.sleep")(function* (stack: StackId, correlationId: string, actor?: string) {
      const claimed = yield* repo.claimSleep(stack, Duration.toMillis(settings.sleepLease), correlationId, actor)
      if (Option.isNone(claimed)) {
        const current = yield* repo.get(stack)
        return { outcome: "not-awake", state: Option.match(current, { onNone: () => "unknown", onSome: (row) => row.state }) } as SleepOutcome
      }
      yield* routing.changed(stack)
      const row = claimed.value
      const attempt = row.op_attempt
      const target = drainTargetOf(row)
      const idleHold = randomBytes(32).toString("base64url") as Bytes32
      const requested = capabilityOf(row.profiles)
      const capability = requested.profiles.length === 0 ? Option.none<IncomingWakeCapability>() : Option.some(requested)

      const release = drain.read(target, { idleHold, phase: "release", holdSeconds }, Option.none()).pipe(
        Effect.catchAll((error) => Effect.logWarning("release read failed; the tenant's hold ends on its own", { code: error.code })),
        Effect.asVoid
      )
      /** A known sleep abort: the tenant is (or stays) up, the stack awake, any receipt cleared. */
      const abort = (code: string, blockers: ReadonlyArray<Blocker>, releaseHold: boolean) =>
        Effect.gen(function* () {
          if (releaseHold) yield* release
          const moved = yield* repo.abortSleep(stack, attempt, code, correlationId)
          yield* routing.changed(stack)
          return Option.isNone(moved) ? { outcome: "lease-lost" } as const : { outcome: "refused", code, blockers } as const
        })

      const initial = yield* Effect.either(drain.read(target, { idleHold, phase: "initial", holdSeconds }, capability))
      if (Either.isLeft(initial)) return yield* abort(initial.left.code, [], false)
      if (!initial.right.idle) return yield* abort("report-not-idle", blockersOf(initial.right), false)

      const final = yield* Effect.either(drain.read(target, { idleHold, phase: "final", holdSeconds }, capability))
      // An unanswered final read may still have taken the hold: release it.
      if (Either.isLeft(final)) return yield* abort(final.left.code, [], true)
      // A final read that was not idle released the hold itself.
      if (!final.right.idle) return yield* abort("report-not-idle", blockersOf(final.right), false)

      const compared = compareForStop({
        stack,
        idleHold,
        requested,
        initial: initial.right as Parameters<typeof compareForStop>[0]["initial"],
        final: final.right as Parameters<typeof compareForStop>[0]["final"]
      })
      if (Either.isLeft(compared)) return yield* abort(compared.left, [], true)

      const stored = yield* repo.storeReceipt(stack, attempt, compared.right, correlationId)
      if (Option.isNone(stored)) {
        yield* release
        return { outcome: "lease-lost" } as SleepOutcome
      }
      yield* routing.changed(stack)

      const stop = yield* compute.stop(stack)
      if (stop._tag === "Failed") return yield* abort(stop.code, [], true)
      const settled = stop._tag === "Stopped"
        ? yield* repo.stopped(stack, attempt, correlationId)
        : yield* repo.stopUncertain(stack, attempt, stop.code, correlationId)
      yield* routing.changed(stack)
      if (Option.isNone(settled)) return { outcome: "lease-lost" } as SleepOutcome
      return stop._tag === "Stopped" ? { outcome: "asleep" } as SleepOutcome : { outcome: "stop-uncertain", code: stop.code } as SleepOutcome
    })

    /**
     * Recovery of an uncertain stop, or of a cycle whose owner died while stopping (its lease ended): the provider
     * says whether compute runs. Stopped: asleep with the receipt kept. Running: awake, the receipt cleared.
     */
    const recover = Effect.fn("SleepOperation.recover")(function* (stack: StackId, correlationId: string, actor?: string) {
      const status = yield* compute.status(stack)
      if (status === "unknown") return Option.none<StackRow>()
      const moved = yield* repo.recover(stack, status === "running", correlationId, actor)
      yield* routing.changed(stack)
      return moved
    })

    return { sleep, recover } as const
  })
}) {}
