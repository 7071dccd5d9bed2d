import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freePort, get, spawnBunScript } from "@delivery/testing"

// The only test on the embedded database: everything else runs on real PostgreSQL.
describe("embedded development default", () => {
  it.live("Without DATABASE_URL the backend must still start for a first look (bun run start, PGlite loaded from its installed package, not from the bundle): embedded PostgreSQL, clearly logged as a development default, PASSWORD_RESET_DELIVERY taken as disabled with a warning", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const dataDir = yield* Effect.acquireRelease(
          Effect.sync(() => mkdtempSync(join(tmpdir(), "delivery-pglite-"))),
          (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
        )
        const port = yield* freePort
        const backend = yield* spawnBunScript("start", { PORT: String(port), EMBEDDED_DATA_DIR: dataDir })
        // A first start initialises the data folder (several seconds on a small machine).
        yield* backend.waitForOutput(/listening on http:/, "50 seconds")

        expect((yield* get(port, "/health")).status).toBe(200)
        const ready = yield* get(port, "/ready")
        expect(ready.status).toBe(200)
        expect(JSON.parse(ready.body)).toMatchObject({ status: "ready", role: "backend" })

        const output = yield* backend.output
        expect(output).toMatch(/WARN.*EMBEDDED DEVELOPMENT DATABASE.*NOT for production or tests/)
        expect(output).toContain(`dataDir: ${dataDir}`)
        // The README's first command sets no PASSWORD_RESET_DELIVERY: the embedded default gives it an explicit,
        // loudly logged value instead of weakening the rule for real deployments.
        expect(output).toMatch(/WARN.*PASSWORD_RESET_DELIVERY is unset: with the embedded development database it is taken as `disabled`/)
        expect(output).toContain("passwordResetDelivery: disabled")
        expect(output).toMatch(/WARN.*RECEIPT_DELIVERY is unset: with the embedded development database it is taken as `disabled`/)
        expect(output).toContain("receiptDelivery: disabled")

        yield* backend.signal("SIGTERM")
        expect(yield* backend.exitCode()).toBe(0)
        expect(yield* backend.output).toContain("shutdown: embedded database closed")
      })
    ), 60_000)
})
