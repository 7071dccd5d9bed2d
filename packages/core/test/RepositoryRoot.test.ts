import { describe, expect, it } from "@effect/vitest"
import { mkdirSync, mkdtempSync, realpathSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { pathToFileURL } from "node:url"
import { defaultMigrationsDirectory, findRepositoryRoot, repositoryRootOf } from "../src/index.ts"

// Run-time files are found from the repository's root, not by a fixed climb from a module: `bun run start` runs one
// bundle (.build/<hash>/main.js), where every module's URL is the bundle's.
describe("the repository root", () => {
  const tree = () => {
    const root = realpathSync(mkdtempSync(join(tmpdir(), "root-")))
    mkdirSync(join(root, "migrations"))
    writeFileSync(join(root, "package.json"), "{}")
    mkdirSync(join(root, "packages/core/src"), { recursive: true })
    mkdirSync(join(root, ".build/0123abcd"), { recursive: true })
    // A package's own package.json without migrations/ beside it is not the root.
    writeFileSync(join(root, "packages/core/package.json"), "{}")
    return root
  }

  it("is the nearest folder holding package.json and migrations/, from a source module and from the bundle alike", () => {
    const root = tree()
    expect(findRepositoryRoot(join(root, "packages/core/src"))).toBe(root)
    expect(findRepositoryRoot(root)).toBe(root)
    expect(repositoryRootOf(pathToFileURL(join(root, ".build/0123abcd/main.js")).href)).toBe(root)
    expect(repositoryRootOf(pathToFileURL(join(root, "packages/core/src/Migrations.ts")).href)).toBe(root)
  })

  it("without a root above it (core bundled into the client for Node) nothing is found and importing never fails: the module's own folder stands in", () => {
    const alone = realpathSync(mkdtempSync(join(tmpdir(), "alone-")))
    writeFileSync(join(alone, "package.json"), "{}")
    expect(findRepositoryRoot(alone)).toBeUndefined()
    expect(repositoryRootOf(pathToFileURL(join(alone, "node-client.mjs")).href)).toBe(alone)
  })

  it("the migrations the backend runs are this repository's", () => {
    expect(defaultMigrationsDirectory).toBe(join(new URL("../../../", import.meta.url).pathname, "migrations"))
  })
})
