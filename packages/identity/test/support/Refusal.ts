import { Effect, Exit } from "effect"

/** The error `effect` failed with, or how it ended otherwise: "succeeded" or "died". */
export const refusal = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.map(Effect.exit(effect), (exit) =>
    Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error : Exit.isSuccess(exit) ? "succeeded" : "died")

/** The `_tag` of the error `effect` failed with (see `refusal`). */
export const refusalTag = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.map(refusal(effect), (error) => typeof error === "string" ? error : (error as { readonly _tag: string })._tag)

/** The stable `reason` of the error `effect` failed with (see `refusal`). */
export const refusalReason = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.map(refusal(effect), (error) => typeof error === "string" ? error : (error as { readonly reason?: string }).reason)
