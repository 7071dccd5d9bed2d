import { storageErrors } from "@delivery/core"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { IdleWakeStorageUnavailable } from "./Domain.ts"

const storage = (operation: string) => storageErrors(operation, (fault) => new IdleWakeStorageUnavailable(fault))

// Stryker disable next-line StringLiteral: the operation's name is a diagnostic of the warning logged; the answer is storage-unavailable
const RECORD_OPERATION = "recordDrainRequest"

/** How many long-expired request ids one drain read forgets: bounded work per request. */
export const FORGET_BATCH = 100

export interface DrainRequest {
  readonly requestId: string
  readonly stack: string
  readonly phase: string
  readonly keyId: string
  readonly expiresAt: Date
  readonly receivedAt: Date
  readonly correlationId: string
}

/** SQL only: the one-use request ids of drain assertions (`idle_wake_drain_requests`). */
export class DrainRequests extends Effect.Service<DrainRequests>()("@delivery/idle-wake/DrainRequests", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    /**
     * Records the request id, committed before anything is read or reported: true the first time, false for a
     * replay. Forgets up to FORGET_BATCH ids of assertions that expired before `forgetBefore` in the same
     * transaction (they are refused as expired before their id is ever looked at).
     */
    const record = (request: DrainRequest, forgetBefore: Date) =>
      sql.withTransaction(
        Effect.gen(function* () {
          const inserted = yield* sql`
            INSERT INTO idle_wake_drain_requests (request_id, stack, phase, key_id, expires_at, received_at, correlation_id)
            VALUES (${request.requestId}, ${request.stack}, ${request.phase}, ${request.keyId}, ${request.expiresAt},
                    ${request.receivedAt}, ${request.correlationId})
            ON CONFLICT (request_id) DO NOTHING
            RETURNING 1 AS recorded`.withoutTransform
          yield* sql`
            DELETE FROM idle_wake_drain_requests
            WHERE request_id IN (
              SELECT request_id FROM idle_wake_drain_requests
              WHERE expires_at < ${forgetBefore}
              ORDER BY expires_at
              LIMIT ${FORGET_BATCH})`.withoutTransform
          return inserted.length === 1
        })
      ).pipe(storage(RECORD_OPERATION))

    return { record } as const
  })
}) {}
