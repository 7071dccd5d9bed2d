import { Either, Schema } from "effect"
import { createHash } from "node:crypto"
import { CanonicalErrorCode } from "./ErrorCodes.ts"

/**
 * The value is not JSON, so it has no RFC 8785 form. `path` names where
 * (JSON-pointer style, keys only), never the offending value.
 */
export class CanonicalJsonError extends Schema.TaggedError<CanonicalJsonError>()("CanonicalJsonError", {
  code: CanonicalErrorCode,
  path: Schema.String
}) {}

// With the u flag, a well-formed pair is one code point, so only lone surrogates match.
const LONE_SURROGATE = /\p{Surrogate}/u
const isWellFormed = (text: string): boolean => !LONE_SURROGATE.test(text)

/** A container being written: its members in output order and the one being written now. */
interface Frame {
  readonly container: object
  /** Sorted member names of an object; undefined for an array. */
  readonly keys: ReadonlyArray<string> | undefined
  readonly length: number
  index: number
}

const segment = (frame: Frame): string | number => (frame.keys === undefined ? frame.index : frame.keys[frame.index]!)

// Built only when a refusal is reported: the walk itself never copies a path.
const pointer = (stack: ReadonlyArray<Frame>): string =>
  stack.map((frame) => "/" + String(segment(frame)).replaceAll("~", "~0").replaceAll("/", "~1")).join("")

const scalarRefusal = (value: unknown): CanonicalErrorCode | undefined => {
  switch (typeof value) {
    case "string":
      return isWellFormed(value) ? undefined : "canonical-lone-surrogate"
    case "number":
      return Number.isFinite(value) ? undefined : "canonical-non-finite-number"
    case "undefined":
      return "canonical-undefined"
    case "function":
      return "canonical-function"
    case "symbol":
      return "canonical-symbol"
    case "bigint":
      return "canonical-bigint"
  }
  // Booleans and null.
  return undefined
}

/**
 * One pass that checks and writes. It keeps its own stack of open containers, so the cost is linear in
 * the size of the value (plus sorting each object's member names) and no depth exhausts the call stack.
 * Anything but plain JSON is refused: `JSON.stringify`-style serializers silently drop undefined members,
 * turn undefined array items into null and call toJSON, and signed bytes must never depend on such guesses.
 */
const serialize = (root: unknown): Either.Either<string, CanonicalJsonError> => {
  const out: Array<string> = []
  const stack: Array<Frame> = []
  // The containers on the current path: meeting one again is a cycle (a shared, non-cyclic one is fine).
  const open = new Set<object>()
  const refuse = (code: CanonicalErrorCode) => Either.left(new CanonicalJsonError({ code, path: pointer(stack) }))
  let value = root
  for (;;) {
    // Write `value`: a scalar whole, a container's opening and the way down to its first member.
    if (typeof value !== "object" || value === null) {
      const refused = scalarRefusal(value)
      if (refused !== undefined) return refuse(refused)
      // For strings, numbers, booleans and null, JSON.stringify is exactly RFC 8785's serialization
      // (ECMAScript number formatting, -0 as 0, shortest escapes with lower-case hex).
      out.push(JSON.stringify(value))
    } else {
      if (open.has(value)) return refuse("canonical-cycle")
      const isArray = Array.isArray(value)
      const proto = Object.getPrototypeOf(value)
      if (!isArray && proto !== Object.prototype && proto !== null) return refuse("canonical-non-plain-object")
      if (Object.getOwnPropertySymbols(value).length > 0) return refuse("canonical-symbol")
      // RFC 8785: members sorted by the UTF-16 code units of their names, which is what sort() compares.
      const keys = isArray ? undefined : Object.keys(value).sort()
      if (keys !== undefined && !keys.every(isWellFormed)) return refuse("canonical-lone-surrogate")
      const length = keys === undefined ? (value as ReadonlyArray<unknown>).length : keys.length
      if (length === 0) {
        out.push(isArray ? "[]" : "{}")
      } else {
        open.add(value)
        const frame: Frame = { container: value, keys, length, index: 0 }
        stack.push(frame)
        out.push(isArray ? "[" : "{")
        value = member(frame, out)
        continue
      }
    }
    // Climb back up past every container that is now complete, then go down into the next member.
    let next: Frame | undefined
    while ((next = stack.at(-1)) !== undefined && ++next.index === next.length) {
      stack.pop()
      open.delete(next.container)
      out.push(next.keys === undefined ? "]" : "}")
    }
    if (next === undefined) return Either.right(out.join(""))
    out.push(",")
    value = member(next, out)
  }
}

/** Writes the member name of an object's current member and returns the member's value. */
const member = (frame: Frame, out: Array<string>): unknown => {
  if (frame.keys === undefined) return (frame.container as ReadonlyArray<unknown>)[frame.index]
  const key = frame.keys[frame.index]!
  out.push(JSON.stringify(key), ":")
  return (frame.container as Record<string, unknown>)[key]
}

/**
 * RFC 8785 (JCS) canonical JSON text. Returns an `Either`, which is also an
 * Effect: `yield*` it in `Effect.gen`, or inspect it synchronously.
 */
export const canonicalString = (value: unknown): Either.Either<string, CanonicalJsonError> => serialize(value)

const utf8 = new TextEncoder()

/** The UTF-8 bytes of the RFC 8785 form: what gets hashed and signed. */
export const canonicalBytes = (value: unknown): Either.Either<Uint8Array, CanonicalJsonError> =>
  Either.map(canonicalString(value), (text) => utf8.encode(text))

const digest = (input: Uint8Array | string) => createHash("sha256").update(input).digest()

/** Lower-case hex SHA-256; strings are hashed as UTF-8. */
export const sha256Hex = (input: Uint8Array | string): string => digest(input).toString("hex")

/** Base64url SHA-256 without padding; strings are hashed as UTF-8. */
export const sha256Base64Url = (input: Uint8Array | string): string => digest(input).toString("base64url")
