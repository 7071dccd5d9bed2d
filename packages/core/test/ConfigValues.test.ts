import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect } from "effect"
import { integerBetween, positiveDuration } from "../src/index.ts"

const withEnv = (env: Record<string, string>) => Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))

describe("configuration readers: each refusal is reported under its variable's name", () => {
  it.effect("integerBetween: plain decimal digits within min..max, bounds included; the default when the variable is unset", () =>
    Effect.gen(function*() {
      const read = (value?: string) =>
        integerBetween("POOL", -5, 100, 7).pipe(withEnv(value === undefined ? {} : { POOL: value }), Effect.either)
      const value = (text?: string) => Effect.map(read(text), (result) => result._tag === "Right" ? result.right : "refused")
      expect(yield* value()).toBe(7)
      for (const [text, expected] of [["10", 10], ["-5", -5], ["100", 100], ["0", 0], ["0010", 10], ["0000000000000042", 42]] as const) {
        expect([text, yield* value(text)]).toEqual([text, expected])
      }
      // Out of range, another notation, more than 16 digits (even when the value itself would fit), or not a number.
      for (const text of ["-6", "101", "1e1", "0x10", " 10", "10 ", "x10", "10x", "10.0", "+10", "", "-", "00000000000000010"]) {
        const refused = yield* read(text)
        expect([text, refused._tag]).toEqual([text, "Left"])
        if (refused._tag === "Left") {
          expect(String(refused.left)).toContain("POOL")
          expect(String(refused.left)).toContain("Expected an integer between -5 and 100")
          expect(refused.left._op === "InvalidData" && refused.left.path).toEqual(["POOL"])
        }
      }
    }))

  it.effect("positiveDuration: a positive, finite duration; zero is refused under the variable's name; the default when unset", () =>
    Effect.gen(function*() {
      const read = (value?: string) =>
        positiveDuration("WAIT", "3 seconds").pipe(withEnv(value === undefined ? {} : { WAIT: value }), Effect.either)
      const unset = yield* read()
      expect(unset._tag === "Right" && Duration.toMillis(unset.right)).toBe(3_000)
      const set = yield* read("250 millis")
      expect(set._tag === "Right" && Duration.toMillis(set.right)).toBe(250)
      for (const text of ["0 seconds", "0 millis"]) {
        const refused = yield* read(text)
        expect([text, refused._tag]).toEqual([text, "Left"])
        if (refused._tag === "Left") {
          expect(String(refused.left)).toContain("Expected a positive, finite duration")
          expect(refused.left._op === "InvalidData" && refused.left.path).toEqual(["WAIT"])
        }
      }
      expect((yield* read("soon"))._tag).toBe("Left")
    }))
})
