import { storageErrors } from "@delivery/core"
import { Cause, Effect } from "effect"
import { OutboxStorageUnavailable } from "./Domain.ts"

/** Database failures become `OutboxStorageUnavailable` (see core's `storageErrors`). */
export const storage = (operation: string) =>
  storageErrors(operation, () => new OutboxStorageUnavailable({ operation }))

/** INSERT/UPDATE ... RETURNING without the row that is certain to be there is a bug, not an outcome. */
export const orDieIfMissing = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.catchIf(effect, (e): e is Extract<E, Cause.NoSuchElementException> => Cause.isNoSuchElementException(e), Effect.die)
