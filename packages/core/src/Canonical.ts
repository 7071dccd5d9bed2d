import canonicalize from "canonicalize"
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

const pointer = (path: ReadonlyArray<string | number>): string =>
  path.map((p) => "/" + String(p).replaceAll("~", "~0").replaceAll("/", "~1")).join("")

// `canonicalize` follows JSON.stringify: it silently drops undefined members,
// turns undefined array items into null and calls toJSON. Signed bytes must
// never depend on such guesses, so anything but plain JSON is refused first.
const findNonJson = (
  value: unknown,
  path: Array<string | number>,
  ancestors: Set<object>
): CanonicalJsonError | undefined => {
  const fail = (code: CanonicalErrorCode) => new CanonicalJsonError({ code, path: pointer(path) })
  switch (typeof value) {
    case "string":
      return isWellFormed(value) ? undefined : fail("canonical-lone-surrogate")
    case "number":
      return Number.isFinite(value) ? undefined : fail("canonical-non-finite-number")
    case "boolean":
      return undefined
    case "undefined":
      return fail("canonical-undefined")
    case "function":
      return fail("canonical-function")
    case "symbol":
      return fail("canonical-symbol")
    case "bigint":
      return fail("canonical-bigint")
  }
  if (value === null) return undefined
  const object = value as object
  if (ancestors.has(object)) return fail("canonical-cycle")
  const proto = Object.getPrototypeOf(object)
  const isArray = Array.isArray(object)
  if (!isArray && proto !== Object.prototype && proto !== null) return fail("canonical-non-plain-object")
  if (Object.getOwnPropertySymbols(object).length > 0) return fail("canonical-symbol")
  ancestors.add(object)
  try {
    if (isArray) {
      for (let i = 0; i < object.length; i++) {
        const found = findNonJson(object[i], [...path, i], ancestors)
        if (found) return found
      }
      return undefined
    }
    for (const key of Object.keys(object)) {
      if (!isWellFormed(key)) return new CanonicalJsonError({ code: "canonical-lone-surrogate", path: pointer(path) })
      const found = findNonJson((object as Record<string, unknown>)[key], [...path, key], ancestors)
      if (found) return found
    }
    return undefined
  } finally {
    ancestors.delete(object)
  }
}

/**
 * RFC 8785 (JCS) canonical JSON text. Returns an `Either`, which is also an
 * Effect: `yield*` it in `Effect.gen`, or inspect it synchronously.
 */
export const canonicalString = (value: unknown): Either.Either<string, CanonicalJsonError> => {
  const refused = findNonJson(value, [], new Set())
  if (refused) return Either.left(refused)
  // Validation above leaves canonicalize nothing to drop or throw on.
  return Either.right(canonicalize(value) as string)
}

const utf8 = new TextEncoder()

/** The UTF-8 bytes of the RFC 8785 form: what gets hashed and signed. */
export const canonicalBytes = (value: unknown): Either.Either<Uint8Array, CanonicalJsonError> =>
  Either.map(canonicalString(value), (text) => utf8.encode(text))

const digest = (input: Uint8Array | string) => createHash("sha256").update(input).digest()

/** Lower-case hex SHA-256; strings are hashed as UTF-8. */
export const sha256Hex = (input: Uint8Array | string): string => digest(input).toString("hex")

/** Base64url SHA-256 without padding; strings are hashed as UTF-8. */
export const sha256Base64Url = (input: Uint8Array | string): string => digest(input).toString("base64url")
