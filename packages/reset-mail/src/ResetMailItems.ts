import { encodeKeyset, isKeysetTime, readKeyset } from "@delivery/core"
import { Effect, Schema } from "effect"
import { ResetMailState } from "./ResetMailRepo.ts"

/** Rows per page of a tenant's reset mail, at most. */
export const RESET_MAIL_PAGE_LIMIT = 100

/**
 * A reset-mail row as an operator reads it: ids, state, attempts and stable codes. The table holds no address, token
 * or body, and this shape leaves out the verification id and the payload fingerprint as well.
 */
export class ResetMailItem extends Schema.Class<ResetMailItem>("ResetMailItem")({
  id: Schema.String,
  tenant: Schema.String,
  state: ResetMailState,
  attempt: Schema.Number,
  /** rejected, quarantined, stopped: why the row ended. */
  reason: Schema.NullOr(Schema.String),
  /** The last temporary failure's code (kept while a retry waits, and after the row ends). */
  lastError: Schema.NullOr(Schema.String),
  providerStatus: Schema.NullOr(Schema.Number),
  /** pending: when the next attempt is due. */
  nextAttemptAt: Schema.DateFromSelf,
  /** sending: when the claim was taken (a claim older than the stale-claim age is quarantined, never resent). */
  claimedAt: Schema.NullOr(Schema.DateFromSelf),
  createdAt: Schema.DateFromSelf,
  updatedAt: Schema.DateFromSelf
}) {}

/** One page of a tenant's reset mail; `nextCursor` continues after its last row, null on the last page. */
export class ResetMailPage extends Schema.Class<ResetMailPage>("ResetMailPage")({
  items: Schema.Array(ResetMailItem),
  nextCursor: Schema.NullOr(Schema.String)
}) {}

/** A reset-mail list's cursor that this package did not write. */
export class ResetMailCursorInvalid extends Schema.TaggedError<ResetMailCursorInvalid>()("ResetMailCursorInvalid", {
  reason: Schema.Literal("cursor-invalid")
}) {}

export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

// Cursor: base64url of "<created_at to the microsecond, UTC>|<id>", the last row of a page, as the database wrote the
// time: a millisecond form would skip or repeat rows whose times differ below the millisecond.
const CURSOR = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)\|([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/

export const encodeCursor = (at: string, id: string) => encodeKeyset(at, id)

export const decodeCursor = (cursor: string) => {
  const match = readKeyset(cursor, CURSOR)
  return match === null || !isKeysetTime(match[1]!)
    ? Effect.fail(new ResetMailCursorInvalid({ reason: "cursor-invalid" }))
    : Effect.succeed({ at: match[1]!, id: match[2]! })
}
