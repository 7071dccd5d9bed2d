import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { backendMain, spawnBun } from "./BunProcess.ts"
import { freePort } from "./PgCluster.ts"
import { TestDatabase } from "./TestDatabase.ts"

/** The operator token of every backend a test starts: random per run, long enough for the backend's bounds. */
export const OPERATOR_TOKEN = `op-${randomBytes(32).toString("base64url")}`

/** The real backend (`packages/backend/src/main.ts`) on the suite's database, with operator routes enabled. */
export const startBackend = (env: Readonly<Record<string, string>> = {}, entry = backendMain) =>
  Effect.gen(function* () {
    const db = yield* TestDatabase
    const port = yield* freePort
    const backend = yield* spawnBun(entry, {
      DATABASE_URL: db.url,
      PORT: String(port),
      OPERATOR_TOKEN,
      IDENTITY_PEER_LIMIT: "1000000",
      PASSWORD_RESET_DELIVERY: "disabled",
      RECEIPT_DELIVERY: "disabled",
      ...env
    })
    yield* backend.waitForOutput(/listening on http:/)
    return { port, backend, baseUrl: `http://127.0.0.1:${port}` }
  })
