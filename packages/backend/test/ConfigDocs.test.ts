import { describe, expect, it } from "@effect/vitest"
import { readFileSync } from "node:fs"
import { CONFIG } from "../src/Config.ts"
import { withConfigTable } from "../src/ConfigTable.ts"

describe("documented configuration", () => {
  it("docs/operations.md lists every variable the backend reads, with its current default (regenerate: bun scripts/config-table.ts)", () => {
    const page = readFileSync(new URL("../../../docs/operations.md", import.meta.url), "utf8")
    expect(withConfigTable(page)).toBe(page)
    for (const entry of CONFIG) expect(page).toContain(`| \`${entry.name}\` |`)
  })
})
