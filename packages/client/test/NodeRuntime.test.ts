import { expect, layer } from "@effect/vitest"
import { bunExecutable, OPERATOR_TOKEN, startBackend } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Effect } from "effect"
import { execFile, execFileSync } from "node:child_process"
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { delimiter, join } from "node:path"
import { randomBytes } from "node:crypto"

// The client is plain TypeScript for Bun; on Node 20 (no TypeScript loader) it runs bundled for Node, as a
// Node user consumes it: `bun build --target=node`. This runs that bundle with the machine's `node`.

const fixture = join(import.meta.dirname, "fixtures/node-client.ts")

/** The machine's Node.js: `bunx --bun` puts a `node` that is Bun first on PATH, so that one is skipped. */
const realNode = () => {
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    const candidate = join(dir, "node")
    if (dir.includes("bun-node") || !existsSync(candidate)) continue
    const version = execFileSync(candidate, ["-p", "process.versions.bun ? '' : process.version"], { encoding: "utf8" }).trim()
    if (version !== "") return { path: candidate, version }
  }
  throw new Error("no Node.js on PATH")
}

layer(TestDatabaseLive, { excludeTestServices: true })("the client on Node 20", (it) => {
  it.scoped("bundled for Node, the typed client provisions (a taken tenant id is its typed 409), the producer's envelope is accepted then a duplicate, and the verifier's key lookup reads the key", () =>
    Effect.gen(function* () {
      const node = realNode()
      expect(node.version).toMatch(/^v(20|2[1-9])\./)
      const { baseUrl } = yield* startBackend()
      const dir = mkdtempSync(join(tmpdir(), "client-node-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
      const bundle = join(dir, "node-client.mjs")
      execFileSync(bunExecutable(), ["build", fixture, "--target=node", "--outfile", bundle], { stdio: "pipe" })
      const tenant = `node-${randomBytes(4).toString("hex")}`
      const output = yield* Effect.promise(() =>
        new Promise<string>((resolve, reject) => {
          execFile(node.path, [bundle], { env: { PATH: process.env.PATH ?? "", BASE_URL: baseUrl, OPERATOR_TOKEN, TENANT: tenant }, timeout: 60_000 },
            (error, stdout, stderr) => (error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(stdout)))
        }))
      expect(JSON.parse(output.trim())).toEqual({
        node: node.version,
        conflict: "tenant-exists",
        accepted: "accepted",
        duplicate: "duplicate",
        sameIdentity: true,
        keyState: "active"
      })
    }))
})
