import { bunExecutable } from "@delivery/testing"
import { describe, expect, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, renameSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

// `bun run start` (packages/backend/src/start.ts) in a tree of its own: a copy of start.ts beside a small main.ts
// that prints which file it runs from, so each rule of start.ts is seen from outside.

const startSource = new URL("../src/start.ts", import.meta.url).pathname

const tree = () => {
  const root = realpathSync(mkdtempSync(join(tmpdir(), "start-")))
  mkdirSync(join(root, "packages/backend/src"), { recursive: true })
  mkdirSync(join(root, "migrations"))
  copyFileSync(startSource, join(root, "packages/backend/src/start.ts"))
  writeMain(root, "one")
  for (const file of ["package.json", "bun.lock", "tsconfig.json"]) writeFileSync(join(root, file), "{}")
  return root
}

const writeMain = (root: string, version: string) =>
  writeFileSync(
    join(root, "packages/backend/src/main.ts"),
    `console.log(JSON.stringify({ version: ${JSON.stringify(version)}, url: import.meta.url, bundle: process.env.BACKEND_BUNDLE ?? null }))\n`
  )

const start = (root: string, env: Record<string, string> = {}) => {
  const run = spawnSync(bunExecutable(), ["--no-env-file", join(root, "packages/backend/src/start.ts")], {
    cwd: root,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/tmp", ...env },
    encoding: "utf8",
    timeout: 60_000
  })
  const lines = run.stdout.trim().split("\n")
  return {
    code: run.status,
    stderr: run.stderr,
    ran: JSON.parse(lines[lines.length - 1]!) as { version: string; url: string; bundle: string | null }
  }
}

const bundles = (root: string) => readdirSync(join(root, ".build")).filter((name) => /^[0-9a-f]{24}$/.test(name)).sort()

describe("bun run start (start.ts)", () => {
  it("runs main.ts as one bundle under .build/<hash of the sources>/ with its source map, reuses it while the sources stay the same, and builds another when they change", () => {
    const root = tree()
    const first = start(root)
    expect(first.code).toBe(0)
    expect(first.ran.version).toBe("one")
    const [built] = bundles(root)
    expect(first.ran.url).toBe(`file://${join(root, ".build", built!, "main.js")}`)
    expect(first.ran.bundle).toBe(join(root, ".build", built!, "main.js"))
    expect(existsSync(join(root, ".build", built!, "main.js.map"))).toBe(true)
    // No scratch folder is left behind.
    expect(readdirSync(join(root, ".build"))).toEqual([built])

    expect(start(root).ran.url).toBe(first.ran.url)
    expect(bundles(root)).toEqual([built])

    writeMain(root, "two")
    const changed = start(root)
    expect(changed.ran.version).toBe("two")
    expect(changed.ran.url).not.toBe(first.ran.url)
    expect(bundles(root)).toHaveLength(2)
  })

  it("a checkout moved elsewhere builds its own bundle (a bundle holds some dependencies' absolute paths)", () => {
    const root = tree()
    const before = bundles((start(root), root))
    const moved = `${root}-moved`
    renameSync(root, moved)
    const after = start(moved)
    expect(after.ran.url.startsWith(`file://${join(moved, ".build")}/`)).toBe(true)
    expect(bundles(moved).filter((name) => !before.includes(name))).toHaveLength(1)
  })

  it("a supervised copy (WORKER_INDEX) runs the bundle its supervisor named in BACKEND_BUNDLE, even after the sources changed; one without WORKER_INDEX builds its own", () => {
    const root = tree()
    const supervisor = start(root)
    writeMain(root, "two")
    const copy = start(root, { WORKER_INDEX: "0", BACKEND_BUNDLE: supervisor.ran.bundle! })
    expect(copy.ran).toEqual(supervisor.ran)
    expect(start(root, { BACKEND_BUNDLE: supervisor.ran.bundle! }).ran.version).toBe("two")
  })

  it("a checkout where .build cannot be written runs main.ts from its sources and says so on stderr", () => {
    const root = tree()
    // A file where the folder should be: nothing can be written under it, whoever runs the test.
    writeFileSync(join(root, ".build"), "")
    const fallback = start(root)
    expect(fallback.code).toBe(0)
    expect(fallback.ran.url).toBe(`file://${join(root, "packages/backend/src/main.ts")}`)
    expect(fallback.stderr).toContain(`${join(root, ".build")} cannot be written: running packages/backend/src/main.ts from its sources`)
  })

  it("a build that fails exits 1 with the bundler's message and runs nothing", () => {
    const root = tree()
    writeFileSync(join(root, "packages/backend/src/main.ts"), `import "./missing.ts"\nconsole.log("ran")\n`)
    const run = spawnSync(bunExecutable(), ["--no-env-file", join(root, "packages/backend/src/start.ts")], { cwd: root, encoding: "utf8" })
    expect(run.status).toBe(1)
    expect(run.stdout).not.toContain("ran")
    expect(run.stderr).toContain("missing.ts")
    expect(run.stderr).toContain("the backend could not be built")
    expect(bundles(root)).toEqual([])
  })
})
