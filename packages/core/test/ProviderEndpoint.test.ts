import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import { ProviderHttp } from "../src/index.ts"

const codeOf = (input: string) => {
  const result = ProviderHttp.ProviderEndpoint.parse(input)
  return Either.isRight(result) ? "ok" : result.left.code
}

describe("ProviderEndpoint (edges of the validation table)", () => {
  it("'http only to loopback': every address of 127.0.0.0/8 is loopback, whatever the width of its parts", () => {
    for (const input of ["http://127.100.200.255/send", "http://127.0.10.1/", "http://127.1.2.30/", "http://127.10.0.1/"]) {
      expect([input, codeOf(input)]).toEqual([input, "ok"])
    }
    // Written as a bare number or in hex, it is still 127.0.0.1 once URL has read it.
    expect(codeOf("http://2130706433/")).toBe("ok")
    expect(codeOf("http://0x7f.1/")).toBe("ok")
    expect(codeOf("http://128.0.0.1/")).toBe("endpoint-insecure-scheme")
  })

  it("'Endpoints cannot contain credentials': a password without a user name is a credential too", () => {
    expect(codeOf("https://:secret@mail.example.com/")).toBe("endpoint-has-credentials")
  })

  it("a refusal is a tagged ProviderEndpointError", () => {
    const error = Either.getLeft(ProviderHttp.ProviderEndpoint.parse("https://user:hunter2@example.com/"))
    expect(error._tag === "Some" && error.value._tag).toBe("ProviderEndpointError")
    expect(error._tag === "Some" && error.value).toBeInstanceOf(ProviderHttp.ProviderEndpointError)
  })
})
