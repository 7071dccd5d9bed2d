import { describe, expect, it } from "@effect/vitest"
import canonicalize from "canonicalize"
import { Effect, Either } from "effect"
import { Canonical } from "../src/index.ts"

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex")
const unhex = (text: string) => text.replace(/\s+/g, "")

// RFC 8785 section 3.2.2, given as JSON text so numbers parse exactly as a receiver's would.
const rfcSample = String.raw`{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`

// RFC 8785 section 3.2.3, property sorting by UTF-16 code units.
const sortingSample = String.raw`{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`

describe("Canonical (RFC 8785)", () => {
  it("serializes the section 3.2.2 sample exactly", () => {
    const text = Either.getOrThrow(Canonical.canonicalString(JSON.parse(rfcSample)))
    expect(text).toBe(
      String.raw`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`
    )
    // The UTF-8 bytes listed in RFC 8785 section 3.2.4.
    expect(hex(Either.getOrThrow(Canonical.canonicalBytes(JSON.parse(rfcSample))))).toBe(unhex(`
      7b 22 6c 69 74 65 72 61 6c 73 22 3a 5b 6e 75 6c 6c 2c 74 72
      75 65 2c 66 61 6c 73 65 5d 2c 22 6e 75 6d 62 65 72 73 22 3a
      5b 33 33 33 33 33 33 33 33 33 2e 33 33 33 33 33 33 33 2c 31
      65 2b 33 30 2c 34 2e 35 2c 30 2e 30 30 32 2c 31 65 2d 32 37
      5d 2c 22 73 74 72 69 6e 67 22 3a 22 e2 82 ac 24 5c 75 30 30
      30 66 5c 6e 41 27 42 5c 22 5c 5c 5c 5c 5c 22 2f 22 7d`))
  })

  it("sorts properties by UTF-16 code units (section 3.2.3)", () => {
    const bytes = Either.getOrThrow(Canonical.canonicalBytes(JSON.parse(sortingSample)))
    const expected = "{" + [
      String.raw`"\r":"Carriage Return"`,
      `"1":"One"`,
      `"\u0080":"Control"`,
      `"\u00f6":"Latin Small Letter O With Diaeresis"`,
      `"\u20ac":"Euro Sign"`,
      `"\ud83d\ude00":"Emoji: Grinning Face"`,
      `"\ufb33":"Hebrew Letter Dalet With Dagesh"`
    ].join(",") + "}"
    expect(hex(bytes)).toBe(Buffer.from(expected, "utf8").toString("hex"))
    // The non-ASCII keys stay raw UTF-8, not \u escapes.
    expect(hex(bytes)).toContain("22c280223a") // "\u0080":
    expect(hex(bytes)).toContain("22f09f9880223a") // "😀":
  })

  it("serializes -0 as 0 and nested structures without whitespace", () => {
    expect(Canonical.canonicalString({ b: [-0, { d: 1, c: "x" }], a: {} })).toEqual(
      Either.right(`{"a":{},"b":[0,{"c":"x","d":1}]}`)
    )
  })

  it("refuses values that are not JSON, member names included, with a typed error and the JSON-pointer path (RFC 6901)", () => {
    const refused = (value: unknown) => Either.getLeft(Canonical.canonicalString(value))
    const cyclic: Record<string, unknown> = { a: 1 }
    cyclic["self"] = cyclic
    const cases: Array<[unknown, string, string]> = [
      [undefined, "canonical-undefined", ""],
      [{ a: undefined }, "canonical-undefined", "/a"],
      [[1, undefined], "canonical-undefined", "/1"],
      [{ f: () => 1 }, "canonical-function", "/f"],
      [{ n: Number.NaN }, "canonical-non-finite-number", "/n"],
      [{ n: [Number.POSITIVE_INFINITY] }, "canonical-non-finite-number", "/n/0"],
      [{ n: Number.NEGATIVE_INFINITY }, "canonical-non-finite-number", "/n"],
      [{ big: 1n }, "canonical-bigint", "/big"],
      [{ s: Symbol("x") }, "canonical-symbol", "/s"],
      [{ "a/b": { d: new Date(0) } }, "canonical-non-plain-object", "/a~1b/d"],
      [new Map(), "canonical-non-plain-object", ""],
      [{ s: "\ud800" }, "canonical-lone-surrogate", "/s"],
      [cyclic, "canonical-cycle", "/self"],
      // A member name that is not JSON is refused at the object that holds it.
      [{ [Symbol("k")]: 1 }, "canonical-symbol", ""],
      [{ a: [{ ok: 1, [Symbol("k")]: 1 }] }, "canonical-symbol", "/a/0"],
      [{ ok: { "\udc00": 1 } }, "canonical-lone-surrogate", "/ok"],
      [{ "a\ud800b": 1 }, "canonical-lone-surrogate", ""],
      // RFC 6901 escapes: "~" as "~0" and "/" as "~1".
      [{ "a~b": { "c/d": { "~/": undefined } } }, "canonical-undefined", "/a~0b/c~1d/~0~1"]
    ]
    for (const [value, code, path] of cases) {
      const error = refused(value)
      expect(error._tag).toBe("Some")
      if (error._tag === "Some") {
        expect(error.value._tag).toBe("CanonicalJsonError")
        expect({ code: error.value.code, path: error.value.path }).toEqual({ code, path })
      }
    }
  })

  it("allows shared (non-cyclic) references and null-prototype objects", () => {
    const shared = { x: 1 }
    const bare = Object.assign(Object.create(null), { z: true })
    expect(Canonical.canonicalString({ a: shared, b: shared, c: bare })).toEqual(
      Either.right(`{"a":{"x":1},"b":{"x":1},"c":{"z":true}}`)
    )
  })

  it.effect("is usable as an Effect: a refusal is a failure, not a thrown exception", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Canonical.canonicalBytes({ n: Number.NaN }))
      expect(error.code).toBe("canonical-non-finite-number")
      const bytes = yield* Canonical.canonicalBytes({ ok: true })
      expect(new TextDecoder().decode(bytes)).toBe(`{"ok":true}`)
    }))

  // Bounds far above linear and far below quadratic, so that a loaded machine or instrumented code
  // (mutation runs) cannot fail them: the point is linear against quadratic, not a benchmark. Linear
  // takes well under 1 s at these sizes; the recursive check with a copied path took 11 s and 3.4 GB at
  // 20,000 deep, so about 100 s (and far more memory) at 60,000, and a quadratic walk over 200,000 items
  // takes minutes.
  const BOUND_MS = 20_000
  const timed = <A>(f: () => A): { readonly result: A; readonly ms: number } => {
    const start = performance.now()
    const result = f()
    return { result, ms: performance.now() - start }
  }
  const refusal = (value: unknown) =>
    Either.match(Canonical.canonicalString(value), {
      onLeft: ({ code, path }) => ({ code, path }),
      onRight: () => undefined
    })
  const nestedArrays = (depth: number, leaf: unknown) => {
    let value: unknown = leaf
    for (let i = 0; i < depth; i++) value = [value]
    return value
  }

  it("a 60,000-deep value costs linear time and memory and no recursion: it is serialized, and a refusal at its bottom names the whole path", () => {
    const depth = 60_000
    const deep = timed(() => Canonical.canonicalString(nestedArrays(depth, 1)))
    expect(deep.result).toEqual(Either.right("[".repeat(depth) + "1" + "]".repeat(depth)))
    expect(deep.ms).toBeLessThan(BOUND_MS)

    const refused = timed(() => refusal(nestedArrays(depth, Number.NaN)))
    expect(refused.result).toEqual({ code: "canonical-non-finite-number", path: "/0".repeat(depth) })
    expect(refused.ms).toBeLessThan(BOUND_MS)

    let objects: unknown = "\ud800"
    for (let i = 0; i < depth; i++) objects = { "a/b": objects }
    expect(refusal(objects)).toEqual({ code: "canonical-lone-surrogate", path: "/a~1b".repeat(depth) })

    // Far deeper than any call stack (the recursive version overflowed well before): the walk keeps its own stack.
    const abyss = timed(() => Canonical.canonicalString(nestedArrays(200_000, null)))
    expect(Either.map(abyss.result, (text) => text.length)).toEqual(Either.right(400_004))
    expect(abyss.ms).toBeLessThan(BOUND_MS)
  })

  it("a wide value (200,000 array items, 100,000 members) is serialized in bounded time, and a refusal names its position", () => {
    const items = Array.from({ length: 200_000 }, (_, i) => i)
    const wideArray = timed(() => Canonical.canonicalString(items))
    expect(Either.map(wideArray.result, (text) => text.length)).toEqual(Either.right(JSON.stringify(items).length))
    expect(wideArray.ms).toBeLessThan(BOUND_MS)

    const members = Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`k${i}`, i]))
    const wideObject = timed(() => Canonical.canonicalString(members))
    expect(wideObject.result).toEqual(Either.right(canonicalize(members)))
    expect(wideObject.ms).toBeLessThan(BOUND_MS)

    expect(refusal([...items, undefined])).toEqual({ code: "canonical-undefined", path: "/200000" })
  })

  it("agrees with the canonicalize package (RFC 8785) on 2,000 seeded random JSON values", () => {
    // A small seeded generator (mulberry32), so a failure is reproducible from the printed seed.
    const seed = Number(process.env.TEST_SEED ?? 0x5eed)
    let state = seed >>> 0
    const random = () => {
      state = (state + 0x6d2b79f5) >>> 0
      let t = state
      t = Math.imul(t ^ (t >>> 15), t | 1)
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296
    }
    const pick = <A>(xs: ReadonlyArray<A>): A => xs[Math.floor(random() * xs.length)]!
    const text = () =>
      Array.from({ length: Math.floor(random() * 6) }, () => pick(["a", "Z", "\u20ac", "\ud83d\ude00", "\n", "\u0001", "\"", "\\", "/", "\u0080", "\ufb33"])).join("")
    const number = () =>
      pick([0, -0, 1, -1, 0.1, 1e21, 1e-7, 333333333.33333329, Number.MAX_SAFE_INTEGER, Number.MIN_VALUE, (random() - 0.5) * 10 ** Math.floor(random() * 40 - 20)])
    const value = (depth: number): unknown => {
      const kind = depth > 4 ? Math.floor(random() * 4) : Math.floor(random() * 6)
      switch (kind) {
        case 0: return text()
        case 1: return number()
        case 2: return pick([true, false])
        case 3: return null
        case 4: return Array.from({ length: Math.floor(random() * 4) }, () => value(depth + 1))
        default: return Object.fromEntries(Array.from({ length: Math.floor(random() * 4) }, () => [text(), value(depth + 1)]))
      }
    }
    for (let i = 0; i < 2_000; i++) {
      const sample = value(0)
      expect(Canonical.canonicalString(sample), `seed ${seed}, sample ${i}`).toEqual(Either.right(canonicalize(sample)))
    }
  })

  it("hashes with SHA-256 (FIPS 180-2 vectors)", () => {
    expect(Canonical.sha256Hex("abc")).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    expect(Canonical.sha256Hex(new TextEncoder().encode("abc"))).toBe(
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )
    expect(Canonical.sha256Hex("")).toBe("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    expect(Canonical.sha256Base64Url("abc")).toBe("ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0")
  })
})
