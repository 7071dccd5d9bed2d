import { describe, expect, it } from "@effect/vitest"
import { freePort } from "@delivery/testing"
import { Duration, Effect, Schedule } from "effect"
import { spawn } from "node:child_process"
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { delimiter, join } from "node:path"

// docs/quickstart.md, run as written: its labelled shell blocks in order, in one bash, from the repository root,
// against the processes they start (the backend on its embedded database, the receiver). The install block is
// the suite's own install command, already run; running it again here would rewrite node_modules under the
// other test files. Only the environment differs from a user's: a throwaway HOME, free ports, and a throwaway
// embedded data folder.

const root = new URL("../../../", import.meta.url).pathname
const page = readFileSync(join(root, "docs/quickstart.md"), "utf8")

const blocks = [...page.matchAll(/```(\w+) (quickstart-[\w-]+)\n([\s\S]*?)```/g)].map((match) => ({
  label: match[2]!,
  text: match[3]!
}))
const block = (label: string) => {
  const found = blocks.find((b) => b.label === label)
  if (found === undefined) throw new Error(`docs/quickstart.md has no block labelled "${label}"`)
  return found.text
}

// `bunx --bun` puts a `node` that is Bun first on PATH; the page is for a machine's own Node.js and npm.
const userPath = (process.env.PATH ?? "").split(delimiter).filter((dir) => !dir.includes("bun-node")).join(delimiter)

const eventually = <A>(what: string, probe: () => A | undefined, within: Duration.DurationInput) =>
  Effect.suspend(() => {
    const value = probe()
    return value === undefined ? Effect.fail(what) : Effect.succeed(value)
  }).pipe(
    Effect.retry(Schedule.spaced("250 millis")),
    Effect.timeoutFail({ duration: within, onTimeout: () => `timed out: ${what}` }),
    Effect.orDie
  )

describe("docs/quickstart.md", () => {
  it.live("the quickstart's commands as written: install done, key generated, backend and receiver started, tenant provisioned with the CLI, and the enqueued message reaches the receiver as a verified signed webhook (a second enqueue is the same message)", () =>
    Effect.scoped(Effect.gen(function* () {
      expect(blocks.map((b) => b.label)).toEqual([
        "quickstart-install",
        "quickstart-prepare",
        "quickstart-start",
        "quickstart-provision",
        "quickstart-send",
        "quickstart-receiver-output"
      ])
      expect(block("quickstart-install").trim()).toBe("npx --yes bun@1.4.4 install --frozen-lockfile")

      const home = yield* Effect.acquireRelease(
        Effect.sync(() => mkdtempSync(join(tmpdir(), "delivery-quickstart-"))),
        (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
      )
      const [port, receiverPort] = [yield* freePort, yield* freePort]
      const script = [
        "set -euo pipefail",
        block("quickstart-prepare"),
        block("quickstart-start"),
        block("quickstart-provision"),
        block("quickstart-send"),
        // Checks of what the page says after the blocks, in the same shell.
        `echo "again: $(npx bun run admin -- messages enqueue "$QUICKSTART/message.json" | head -n 1)"`
      ].join("\n")

      const shell = yield* Effect.acquireRelease(
        Effect.sync(() => {
          const child = spawn("bash", ["-c", script], {
            cwd: root,
            detached: true,
            env: {
              PATH: userPath,
              HOME: home,
              PORT: String(port),
              RECEIVER_PORT: String(receiverPort),
              EMBEDDED_DATA_DIR: join(home, "pglite")
            },
            stdio: ["ignore", "pipe", "pipe"]
          })
          let output = ""
          child.stdout.on("data", (chunk) => (output += chunk))
          child.stderr.on("data", (chunk) => (output += chunk))
          const exit = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
          return { child, output: () => output, exit }
        }),
        // The backend and the receiver were started in the background of that shell, in its process group.
        ({ child }) =>
          Effect.sync(() => {
            try {
              process.kill(-child.pid!, "SIGTERM")
            } catch {
              // Already gone.
            }
          }).pipe(Effect.zipRight(Effect.sleep("1 second")))
      )

      const code = yield* Effect.promise(() => shell.exit).pipe(Effect.timeout("150 seconds"), Effect.orDie)
      const output = shell.output()
      expect(code, output).toBe(0)
      expect(output).toMatch(/message [0-9a-f-]{36} enqueued/)
      expect(output).toMatch(/again: message [0-9a-f-]{36} already enqueued/)

      const quickstart = join(home, "delivery-quickstart")
      expect(statSync(join(quickstart, "acme-keys.json")).mode & 0o777).toBe(0o600)
      const expected = block("quickstart-receiver-output").trim()
        .replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
        .replace("<message id>", "[0-9a-f-]{36}")
      const receiverLog = join(quickstart, "receiver.log")
      const line = yield* eventually(
        "the receiver logs the verified delivery",
        () => (existsSync(receiverLog) ? new RegExp(expected).exec(readFileSync(receiverLog, "utf8"))?.[0] : undefined),
        "30 seconds"
      )
      expect(output).toContain(`message ${line.split(" ")[1]} enqueued`)
      expect(readFileSync(receiverLog, "utf8")).not.toContain("rejected")
      // Delivered once: the repeated enqueue named the same message.
      expect(readFileSync(receiverLog, "utf8").match(/^verified /gm)?.length).toBe(1)
      expect(readFileSync(join(quickstart, "backend.log"), "utf8")).toContain("EMBEDDED DEVELOPMENT DATABASE")
    })), 200_000)
})
