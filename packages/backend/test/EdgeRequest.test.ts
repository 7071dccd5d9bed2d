import { describe, expect, it } from "@effect/vitest"
import { pathOf, targetProblem } from "../src/EdgeRequest.ts"

const at = (path: string) => targetProblem(`http://127.0.0.1:3000${path}`)

describe("request targets", () => {
  it("refuse what is ambiguous: ';', escaped '/', '\\', ';' or '%', control characters, malformed escapes, empty segments", () => {
    const refused = [
      "/operator/outbox/targets/ta/ta;x",
      "/a;b/c",
      "/a/b%2Fc",
      "/a/b%2fc",
      "/a/b%5Cc",
      "/a/b%3Bc",
      "/a/b%25",
      "/a/b%00",
      "/a/b%1f",
      "/a/b%7F",
      "/a/b%zz",
      "/a/b%",
      "/a/b%2",
      "//a",
      "/a//b",
      "/a/b/",
      "/a/b%2?x=1"
    ]
    for (const path of refused) expect([path, at(path)]).toEqual([path, "path-invalid"])
    const accepted = ["/", "/health", "/a/b%20c", "/a/%C3%A9", "/a/b%2ec", "/a/b?x=;&y=%2F", "/a/b?", "/api/outbox/messages"]
    for (const path of accepted) expect([path, at(path)]).toEqual([path, undefined])
    // An HTTP/1.0 request without Host reaches the server in origin form.
    expect(targetProblem("/a;b")).toBe("path-invalid")
    expect(targetProblem("/a/b")).toBeUndefined()
  })

  it("path and query longer than 2048 characters are uri-too-long", () => {
    expect(at(`/${"a".repeat(2047)}`)).toBeUndefined()
    expect(at(`/${"a".repeat(2048)}`)).toBe("uri-too-long")
    expect(at(`/a?${"q".repeat(2046)}`)).toBe("uri-too-long")
  })

  it("log lines name the path without its query", () => {
    expect(pathOf("http://127.0.0.1:3000/operator/outbox/dead-letters/t/p?cursor=abc")).toBe("/operator/outbox/dead-letters/t/p")
    expect(pathOf("/a?b")).toBe("/a")
  })
})
