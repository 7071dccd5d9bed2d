import { describe, expect, it } from "@effect/vitest"
import { readFileSync } from "node:fs"
import { apiReference } from "../src/ApiReference.ts"

describe("documented HTTP API", () => {
  it("docs/api.md is the reference generated from the HttpApi definition the server runs (regenerate: bun scripts/api-reference.ts)", () => {
    const page = readFileSync(new URL("../../../docs/api.md", import.meta.url), "utf8")
    expect(page).toBe(apiReference())
  })

  it("the reference lists each route's request body members and its stable refusal reasons", () => {
    const page = apiReference()
    expect(page).toContain("## `POST /operator/tenants/{tenant}/api-keys`")
    expect(page).toContain("| `expiresInSeconds` | integer | no | 1..315360000")
    expect(page).toContain("`ProvisioningConflict` (`tenant-exists`, `account-email-taken`)")
    expect(page).toContain("## `POST /controlplane/v1/envelopes`")
    expect(page).toContain("| `metadata.kind` |")
  })
})
