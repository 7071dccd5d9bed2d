/**
 * Keyset cursors of the operator lists: the last row's ordering values joined by `|`, as base64url, so a cursor is
 * opaque to clients and carries nothing but positions.
 */
export const encodeKeyset = (...parts: ReadonlyArray<string | number>): string =>
  Buffer.from(parts.join("|"), "utf8").toString("base64url")

/** The parts of a cursor this list handed out: bounded base64url whose text matches `pattern`; otherwise null. */
export const readKeyset = (cursor: string, pattern: RegExp): RegExpExecArray | null =>
  /^[A-Za-z0-9_-]{1,200}$/.test(cursor) ? pattern.exec(Buffer.from(cursor, "base64url").toString("utf8")) : null

/**
 * Whether a cursor's time (ISO, UTC, to the microsecond as the database writes it) names a real instant: `Date.parse`
 * rolls impossible dates over (February 30th), so the parsed instant must print back to the same milliseconds.
 */
export const isKeysetTime = (text: string): boolean => {
  const millis = Date.parse(text)
  return !Number.isNaN(millis) && new Date(millis).toISOString().slice(0, 23) === text.slice(0, 23)
}
