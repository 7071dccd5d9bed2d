import { expect, layer } from "@effect/vitest"
import { freePort, OPERATOR_TOKEN, runCli, startBackend } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer } from "effect"

// `delivery-admin reset-mail summary` and `reset-mail ended` (docs/client.md, docs/operations.md "Command line") as
// real `bun` processes against a real backend process. The rows are fixtures written with SQL into
// reset_mail_outbox (the backend runs with PASSWORD_RESET_DELIVERY=disabled, so no worker moves them), each
// naming a real verification of an account with an e-mail address: neither the address nor the sealed token
// may ever appear in what the command prints.

class Backend extends Context.Tag("ResetMailCli.test/Backend")<Backend, { readonly baseUrl: string }>() {}

const north = "north"
const south = "south"
const email = "reset.user@north.example"
const created = new Date("2026-11-30T08:00:00.000Z")
const updated = new Date("2026-11-30T09:00:00.000Z")

const uuid = (n: number) => `00000000-0000-4000-8000-${n.toString(16).padStart(12, "0")}`
const verificationId = (n: number) => `11111111-0000-4000-8000-${n.toString(16).padStart(12, "0")}`
const sealed = (n: number) => Buffer.alloc(60, 0x30 + n)

interface Fixture {
  readonly id: string
  readonly tenant: string
  readonly state: "pending" | "sending" | "delivered" | "rejected" | "quarantined" | "stopped"
  readonly reason: string | null
  readonly attempt: number
  readonly providerStatus: number | null
}

const row = (n: number, tenant: string, state: Fixture["state"], reason: string | null, attempt: number, providerStatus: number | null = null): Fixture => ({
  id: uuid(n),
  tenant,
  state,
  reason,
  attempt,
  providerStatus
})

// Ids ascend in this order, so the pages of each state follow it.
const q = [
  row(1, north, "quarantined", "fingerprint-unknown", 1, 503),
  row(2, north, "quarantined", "fingerprint-unknown", 2),
  row(3, north, "quarantined", "stale-claim", 1),
  row(4, south, "quarantined", "provider-timeout", 1),
  row(5, south, "quarantined", "fingerprint-unknown", 3)
] as const
const r = [row(6, north, "rejected", "provider-rejected", 1, 422), row(7, south, "rejected", "provider-rejected", 1, 400)] as const
const s = [row(8, north, "stopped", "verification-expired", 0)] as const
const others = [
  row(9, north, "pending", null, 0),
  row(10, south, "pending", null, 0),
  row(11, north, "delivered", null, 1, 202),
  row(12, south, "sending", null, 1)
] as const
const fixtures: ReadonlyArray<Fixture> = [...q, ...r, ...s, ...others]

/** What `ended --json` answers for a fixture. */
const listed = (f: Fixture) => ({
  id: f.id,
  tenant: f.tenant,
  state: f.state,
  reason: f.reason,
  attempt: f.attempt,
  providerStatus: f.providerStatus,
  createdAt: created.toISOString(),
  updatedAt: updated.toISOString()
})

const insertFixtures = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  for (const tenant of [north, south]) {
    yield* sql`INSERT INTO identity_tenants (id) VALUES (${tenant})`
    yield* sql`INSERT INTO identity_accounts (tenant_id, id, email) VALUES (${tenant}, 'reader', ${tenant === north ? email : "other@south.example"})`
  }
  for (const [n, f] of fixtures.entries()) {
    yield* sql`INSERT INTO identity_reset_verifications (id, tenant_id, account_id, token_lookup, token_sealed, expires_at, created_at)
               VALUES (${verificationId(n)}, ${f.tenant}, 'reader', ${Buffer.alloc(32, n)}, ${sealed(n)},
                       ${new Date(created.getTime() + 3_600_000)}, ${created})`
    yield* sql`INSERT INTO reset_mail_outbox (id, verification_id, tenant_id, state, attempt, next_attempt_at, claimed_at, reason,
                                              provider_status, fingerprint, created_at, updated_at)
               VALUES (${f.id}, ${verificationId(n)}, ${f.tenant}, ${f.state}, ${f.attempt}, ${created},
                       ${f.state === "sending" ? updated : null}, ${f.reason}, ${f.providerStatus},
                       ${f.state === "delivered" ? "ab".repeat(32) : null}, ${created}, ${updated})`
  }
})

// One backend for the whole file; the fixtures are written once, and no test adds or changes a row.
const SuiteLayer = Layer.scoped(
  Backend,
  Effect.gen(function* () {
    const { baseUrl } = yield* startBackend()
    yield* insertFixtures
    return { baseUrl }
  })
).pipe(Layer.provideMerge(TestDatabaseLive))

/** Nothing a run prints may hold the operator token, an address, a sealed token or a verification id. */
const secrets = [
  OPERATOR_TOKEN,
  email,
  "reset.user",
  "other@south.example",
  ...fixtures.flatMap((_, n) => [sealed(n).toString("hex"), sealed(n).toString("base64"), sealed(n).toString("base64url"), verificationId(n)])
]

const cli = (args: ReadonlyArray<string>, env: Readonly<Record<string, string>>) =>
  runCli(args, env).pipe(
    Effect.tap((run) => {
      const printed = `${run.stdout}${run.stderr}`
      for (const secret of secrets) expect(printed).not.toContain(secret)
    })
  )

const operatorEnv = (baseUrl: string) => ({ DELIVERY_URL: baseUrl, OPERATOR_TOKEN })

/** Runs with `--json` and parses the one document on stdout. */
const cliJson = (args: ReadonlyArray<string>, env: Readonly<Record<string, string>>) =>
  Effect.map(cli([...args, "--json"], env), (run) => {
    expect(run, run.stderr).toMatchObject({ code: 0 })
    return JSON.parse(run.stdout) as any
  })

/** A human table's lines split into cells (the header included). */
const cells = (stdout: string) => stdout.trimEnd().split("\n").map((line) => line.trim().split(/\s{2,}/))

const ids = (page: { readonly rows: ReadonlyArray<{ readonly id: string }> }) => page.rows.map((row) => row.id)

layer(SuiteLayer, { excludeTestServices: true })("delivery-admin reset-mail against a real backend", (it) => {
  it.scoped("reset-mail summary prints a table of state, reason and count, one line per state and reason, sending and pending rows without a reason", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const run = yield* cli(["reset-mail", "summary"], operatorEnv(baseUrl))
      expect(run, run.stderr).toMatchObject({ code: 0, stderr: "" })
      expect(cells(run.stdout)).toEqual([
        ["state", "reason", "count"],
        ["delivered", "-", "1"],
        ["pending", "-", "2"],
        ["quarantined", "fingerprint-unknown", "3"],
        ["quarantined", "provider-timeout", "1"],
        ["quarantined", "stale-claim", "1"],
        ["rejected", "provider-rejected", "2"],
        ["sending", "-", "1"],
        ["stopped", "verification-expired", "1"]
      ])
      // The columns are aligned: every line starts its reason at the same place.
      const lines = run.stdout.trimEnd().split("\n")
      expect(new Set(lines.map((line) => line.indexOf(line.split(/\s{2,}/)[1]!))).size).toBe(1)
    }))

  it.scoped("reset-mail summary --json prints exactly the answer: {counts: [{state, reason, count}]}, a null reason for rows that did not end", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      expect(yield* cliJson(["reset-mail", "summary"], operatorEnv(baseUrl))).toEqual({
        counts: [
          { state: "delivered", reason: null, count: 1 },
          { state: "pending", reason: null, count: 2 },
          { state: "quarantined", reason: "fingerprint-unknown", count: 3 },
          { state: "quarantined", reason: "provider-timeout", count: 1 },
          { state: "quarantined", reason: "stale-claim", count: 1 },
          { state: "rejected", reason: "provider-rejected", count: 2 },
          { state: "sending", reason: null, count: 1 },
          { state: "stopped", reason: "verification-expired", count: 1 }
        ]
      })
      // --json is accepted anywhere, as for every other command.
      const first = yield* cli(["--json", "reset-mail", "summary"], operatorEnv(baseUrl))
      expect(JSON.parse(first.stdout).counts).toHaveLength(8)
    }))

  it.scoped("reset-mail ended --state lists only that state's rows, by id, with tenant, reason, attempts and provider status, and no next cursor on the last page", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const env = operatorEnv(baseUrl)
      expect(yield* cliJson(["reset-mail", "ended", "--state", "quarantined"], env)).toEqual({ rows: q.map(listed), next: null })
      expect(yield* cliJson(["reset-mail", "ended", "--state", "rejected"], env)).toEqual({ rows: r.map(listed), next: null })
      expect(yield* cliJson(["reset-mail", "ended", "--state", "stopped"], env)).toEqual({ rows: s.map(listed), next: null })

      const human = yield* cli(["reset-mail", "ended", "--state", "rejected"], env)
      expect(human, human.stderr).toMatchObject({ code: 0, stderr: "" })
      expect(cells(human.stdout)).toEqual([
        ["id", "tenant", "state", "reason", "attempts", "provider status", "created", "updated"],
        [r[0].id, north, "rejected", "provider-rejected", "1", "422", created.toISOString(), updated.toISOString()],
        [r[1].id, south, "rejected", "provider-rejected", "1", "400", created.toISOString(), updated.toISOString()]
      ])
      expect(human.stdout).not.toContain("more:")
      // A row without a provider status shows "-".
      const stopped = yield* cli(["reset-mail", "ended", "--state", "stopped"], env)
      expect(cells(stopped.stdout)[1]).toEqual([s[0].id, north, "stopped", "verification-expired", "0", "-", created.toISOString(), updated.toISOString()])
    }))

  it.scoped("reset-mail ended filters by --reason and --tenant, alone and together; no match is an empty table, (none)", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const env = operatorEnv(baseUrl)
      const ended = (...args: ReadonlyArray<string>) => cliJson(["reset-mail", "ended", "--state", "quarantined", ...args], env)
      expect(ids(yield* ended("--reason", "fingerprint-unknown"))).toEqual([q[0].id, q[1].id, q[4].id])
      expect(ids(yield* ended("--tenant", south))).toEqual([q[3].id, q[4].id])
      expect(ids(yield* ended("--reason", "fingerprint-unknown", "--tenant", north))).toEqual([q[0].id, q[1].id])
      expect(yield* ended("--reason", "provider-rejected")).toEqual({ rows: [], next: null })
      // The filters apply within the state asked for.
      expect(ids(yield* cliJson(["reset-mail", "ended", "--state", "rejected", "--tenant", south], env))).toEqual([r[1].id])

      const none = yield* cli(["reset-mail", "ended", "--state", "stopped", "--tenant", "nobody"], env)
      expect(none).toMatchObject({ code: 0, stderr: "" })
      expect(none.stdout.split("\n").slice(1)).toEqual(["(none)", ""])
    }))

  it.scoped("reset-mail ended pages with --limit and --after: a full page prints its next cursor (more: --after <id>), the page after it starts past that id, the last page has none", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const env = operatorEnv(baseUrl)
      const ended = (...args: ReadonlyArray<string>) => cliJson(["reset-mail", "ended", "--state", "quarantined", "--limit", "2", ...args], env)
      const first = yield* ended()
      expect(first).toEqual({ rows: [q[0], q[1]].map(listed), next: q[1].id })
      const second = yield* ended("--after", first.next)
      expect(second).toEqual({ rows: [q[2], q[3]].map(listed), next: q[3].id })
      const third = yield* ended("--after", second.next)
      expect(third).toEqual({ rows: [listed(q[4])], next: null })

      // Human output: the cursor on its own line after the table, ready to paste.
      const human = yield* cli(["reset-mail", "ended", "--state", "quarantined", "--limit", "2"], env)
      const lines = human.stdout.trimEnd().split("\n")
      expect(lines).toHaveLength(4)
      expect(lines.at(-1)).toBe(`more: --after ${q[1].id}`)
      const last = yield* cli(["reset-mail", "ended", "--state", "quarantined", "--limit", "2", "--after", q[3].id], env)
      expect(cells(last.stdout).map((line) => line[0])).toEqual(["id", q[4].id])

      // A page exactly as long as what is left is the last page: no cursor.
      const exact = yield* cliJson(["reset-mail", "ended", "--state", "rejected", "--limit", "2"], env)
      expect([ids(exact), exact.next]).toEqual([[r[0].id, r[1].id], null])
      // Paging and filters together.
      const filtered = yield* ended("--reason", "fingerprint-unknown", "--after", q[0].id)
      expect(filtered).toEqual({ rows: [q[1], q[4]].map(listed), next: null })
    }))

  it.scoped("usage errors exit 2 before any request: no --state, a state that is not an ended one, a bad reason, tenant, cursor or limit, the group alone, no OPERATOR_TOKEN", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const env = operatorEnv(baseUrl)
      const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
        [["reset-mail", "ended"], "Expected to find option: '--state'"],
        [["reset-mail", "ended", "--state", "delivered"], "rejected, quarantined, stopped"],
        [["reset-mail", "ended", "--state", "quarantined", "--reason", "Not A Reason"], "a reason is a stable code"],
        [["reset-mail", "ended", "--state", "quarantined", "--tenant", "Not A Tenant!"], "TenantId must match"],
        [["reset-mail", "ended", "--state", "quarantined", "--after", "not-a-uuid"], "--after takes a row id"],
        [["reset-mail", "ended", "--state", "quarantined", "--limit", "0"], "between 1 and 100"],
        [["reset-mail", "ended", "--state", "quarantined", "--limit", "101"], "between 1 and 100"],
        [["reset-mail", "frobnicate"], ""]
      ]
      // Independent processes: run side by side.
      const runs = yield* Effect.forEach(cases, ([args]) => cli(args, env), { concurrency: 4 })
      cases.forEach(([args, message], i) => {
        expect([args, runs[i]!.code, runs[i]!.stdout]).toEqual([args, 2, ""])
        expect(runs[i]!.stderr).toContain(message)
      })
      const group = yield* cli(["reset-mail"], env)
      expect(group).toMatchObject({ code: 2, stdout: "", stderr: "usage: reset-mail needs a command: summary, ended (see --help)\n" })
      const json = yield* cli(["reset-mail", "ended", "--json"], env)
      expect(json).toMatchObject({ code: 2, stdout: "" })
      expect(JSON.parse(json.stderr.trimEnd().split("\n").at(-1)!)).toMatchObject({ error: "usage", exitCode: 2 })

      const missing = yield* cli(["reset-mail", "summary"], { DELIVERY_URL: baseUrl })
      expect(missing).toMatchObject({ code: 2, stdout: "", stderr: "usage: OPERATOR_TOKEN is not set\n" })
    }))

  it.scoped("a refusal exits 3 with its reason and correlation id: a wrong operator token is unknown (Unauthenticated, HTTP 401); with --json the error is a JSON object on stderr", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const wrong = { DELIVERY_URL: baseUrl, OPERATOR_TOKEN: `${OPERATOR_TOKEN}x` }
      const summary = yield* cli(["reset-mail", "summary"], wrong)
      expect(summary).toMatchObject({ code: 3, stdout: "" })
      expect(summary.stderr).toMatch(/^refused: unknown \(Unauthenticated, HTTP 401, correlation id [0-9a-f]+\)\n$/)
      const ended = yield* cli(["reset-mail", "ended", "--state", "quarantined", "--json"], wrong)
      expect(ended).toMatchObject({ code: 3, stdout: "" })
      expect(JSON.parse(ended.stderr)).toMatchObject({
        error: "refused",
        exitCode: 3,
        _tag: "Unauthenticated",
        reason: "unknown",
        status: 401,
        correlationId: expect.stringMatching(/^[0-9a-f]+$/)
      })
    }))

  it.scoped("exit 4 when nothing listens at DELIVERY_URL", () =>
    Effect.gen(function* () {
      const port = yield* freePort
      const env = { DELIVERY_URL: `http://127.0.0.1:${port}`, OPERATOR_TOKEN }
      const summary = yield* cli(["reset-mail", "summary"], env)
      expect(summary).toMatchObject({ code: 4, stdout: "" })
      expect(summary.stderr).toMatch(/^unavailable: .*RequestError/)
      const ended = yield* cli(["reset-mail", "ended", "--state", "stopped", "--json"], env)
      expect(ended.code).toBe(4)
      expect(JSON.parse(ended.stderr)).toMatchObject({ error: "unavailable", exitCode: 4, _tag: "RequestError" })
    }))

  it.scoped("exit 4 when the backend cannot read the outbox: 503 storage-unavailable (ResetUnavailable) with its correlation id", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const sql = yield* SqlClient.SqlClient
      const env = operatorEnv(baseUrl)
      yield* Effect.acquireRelease(
        sql`ALTER TABLE reset_mail_outbox RENAME TO reset_mail_outbox_away`,
        () => Effect.orDie(sql`ALTER TABLE reset_mail_outbox_away RENAME TO reset_mail_outbox`)
      )
      const summary = yield* cli(["reset-mail", "summary"], env)
      expect(summary).toMatchObject({ code: 4, stdout: "" })
      expect(summary.stderr).toMatch(/^unavailable: storage-unavailable \(ResetUnavailable, HTTP 503, correlation id [0-9a-f]+\)\n$/)
      const ended = yield* cli(["reset-mail", "ended", "--state", "quarantined", "--json"], env)
      expect(ended).toMatchObject({ code: 4, stdout: "" })
      expect(JSON.parse(ended.stderr)).toMatchObject({ error: "unavailable", exitCode: 4, _tag: "ResetUnavailable", reason: "storage-unavailable", status: 503 })
    }))
})
