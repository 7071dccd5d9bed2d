import { expect, layer } from "@effect/vitest"
import { freePort, OPERATOR_TOKEN, runCli, startBackend } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer } from "effect"

// `delivery-admin team-applications get` and `team-applications summary` (docs/operations.md, "Command line") as
// real `bun` processes against a real backend process. The applications are submitted through the tenant route
// with an API key holding `team-applications:write`; the backend runs with TEAM_APPLICATION_DELIVERY=disabled,
// so no worker takes a notification and both of each application stay pending. No address, name or message
// submitted may ever appear in what the command prints.

class Backend extends Context.Tag("TeamApplicationsCli.test/Backend")<Backend, {
  readonly baseUrl: string
  readonly tenant: string
  readonly applications: ReadonlyArray<{ readonly id: string; readonly createdAt: string; readonly notifications: ReadonlyArray<{ readonly effectId: string; readonly audience: string }> }>
}>() {}

const tenant = "north"
const applicant = { name: "Dana Applicant", email: "dana.applicant@north.example" }
const team = { slug: "platform", name: "Platform Crew", email: "platform.crew@north.example" }
const message = "I would like to join the platform crew."

const post = (baseUrl: string, path: string, body: unknown, token: string) =>
  Effect.promise(async () => {
    const response = await fetch(`${baseUrl}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(body)
    })
    return { status: response.status, json: await response.json() as any }
  })

// One backend for the whole file; two applications are submitted once, and no test adds or changes a row.
const SuiteLayer = Layer.scoped(
  Backend,
  Effect.gen(function* () {
    const { baseUrl } = yield* startBackend({ TEAM_APPLICATION_DELIVERY: "disabled", TEAM_APPLICATION_FROM: "teams@example.com" })
    expect((yield* post(baseUrl, "/operator/tenants", { id: tenant }, OPERATOR_TOKEN)).status).toBe(201)
    const account = yield* post(baseUrl, `/operator/tenants/${tenant}/accounts`, { email: `ops@${tenant}.example` }, OPERATOR_TOKEN)
    const key = yield* post(baseUrl, `/operator/tenants/${tenant}/api-keys`, {
      account: account.json.account.id,
      kind: "agent",
      name: "join-form",
      permissions: ["team-applications:write"]
    }, OPERATOR_TOKEN)
    expect(key.status).toBe(201)
    const applications = []
    for (const commandId of ["cli-1", "cli-2"]) {
      const submitted = yield* post(baseUrl, "/api/team-applications", { commandId, team, applicant, message }, key.json.token)
      expect(submitted.status, JSON.stringify(submitted.json)).toBe(201)
      applications.push({ ...submitted.json.application, notifications: submitted.json.notifications })
    }
    return { baseUrl, tenant, applications }
  })
).pipe(Layer.provideMerge(TestDatabaseLive))

/** Nothing a run prints may hold the operator token, an address, a name or the message. */
const secrets = [OPERATOR_TOKEN, applicant.email, applicant.name, team.email, team.name, message, "dana", "crew@"]

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
    expect(run, run.stderr).toMatchObject({ code: 0, stderr: "" })
    return JSON.parse(run.stdout) as any
  })

/** A human table's lines split into cells (the header included). */
const cells = (lines: ReadonlyArray<string>) => lines.map((line) => line.trim().split(/\s{2,}/))

const unknownId = "00000000-0000-4000-8000-000000000000"

layer(SuiteLayer, { excludeTestServices: true, timeout: 60_000 })("delivery-admin team-applications against a real backend", (it) => {
  it.scoped("team-applications get prints the application, then one line per notification (applicant, then team): pending, 0 attempts, no next attempt, lease or outcome, no failures, no last error; never an address, a name or the message", () =>
    Effect.gen(function* () {
      const { applications, baseUrl } = yield* Backend
      const application = applications[0]!
      const run = yield* cli(["team-applications", "get", tenant, application.id], operatorEnv(baseUrl))
      expect(run, run.stderr).toMatchObject({ code: 0, stderr: "" })
      const lines = run.stdout.trimEnd().split("\n")
      expect(lines[0]).toBe(`team application ${application.id} to team ${team.slug} of ${tenant}, submitted ${application.createdAt}`)
      const effectOf = (audience: string) => application.notifications.find((n) => n.audience === audience)!.effectId
      expect(cells(lines.slice(1))).toEqual([
        ["effect", "audience", "state", "attempts", "next attempt", "lease ends", "outcome", "failures", "last error"],
        [effectOf("applicant"), "applicant", "pending", "0", "-", "-", "-", "0", "-"],
        [effectOf("team"), "team", "pending", "0", "-", "-", "-", "0", "-"]
      ])
      // The columns are aligned: every line starts its state at the same place.
      expect(new Set(lines.slice(1).map((line) => line.indexOf(line.split(/\s{2,}/)[2]!))).size).toBe(1)
    }))

  it.scoped("team-applications get --json prints exactly the operator answer: {id, tenant, team, createdAt, notifications: [{effectId, audience, state, attempts, nextAttemptAt, leaseExpiresAt, failures, lastError, outcomeAt}]}", () =>
    Effect.gen(function* () {
      const { applications, baseUrl } = yield* Backend
      const application = applications[1]!
      const pending = (audience: string) => ({
        effectId: application.notifications.find((n) => n.audience === audience)!.effectId,
        audience,
        state: "pending",
        attempts: 0,
        nextAttemptAt: null,
        leaseExpiresAt: null,
        failures: 0,
        lastError: null,
        outcomeAt: null
      })
      expect(yield* cliJson(["team-applications", "get", tenant, application.id], operatorEnv(baseUrl))).toEqual({
        id: application.id,
        tenant,
        team: team.slug,
        createdAt: application.createdAt,
        notifications: [pending("applicant"), pending("team")]
      })
      // --json is accepted anywhere, as for every other command.
      const first = yield* cli(["--json", "team-applications", "get", tenant, application.id], operatorEnv(baseUrl))
      expect(JSON.parse(first.stdout).notifications).toHaveLength(2)
    }))

  it.scoped("team-applications summary prints the notifications counted by state (pending = 2 per application) and the ended queue items (0: no worker runs); --json prints exactly {states: [{state, count}], endedQueueItems}", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const run = yield* cli(["team-applications", "summary"], operatorEnv(baseUrl))
      expect(run, run.stderr).toMatchObject({ code: 0, stderr: "" })
      const lines = run.stdout.trimEnd().split("\n")
      expect(cells(lines.slice(0, -1))).toEqual([["state", "count"], ["pending", "4"]])
      expect(lines.at(-1)).toBe("ended queue items: 0")
      expect(yield* cliJson(["team-applications", "summary"], operatorEnv(baseUrl))).toEqual({
        states: [{ state: "pending", count: 4 }],
        endedQueueItems: 0
      })
    }))

  it.scoped("an unknown application exits 3 with its reason and correlation id, refused: application-not-found (TeamApplicationNotFound, HTTP 404), as does an application asked under another tenant; with --json the error is a JSON object on stderr", () =>
    Effect.gen(function* () {
      const { applications, baseUrl } = yield* Backend
      const env = operatorEnv(baseUrl)
      for (const args of [[tenant, unknownId], ["south", applications[0]!.id]]) {
        const run = yield* cli(["team-applications", "get", ...args], env)
        expect(run).toMatchObject({ code: 3, stdout: "" })
        expect(run.stderr).toMatch(/^refused: application-not-found \(TeamApplicationNotFound, HTTP 404, correlation id [0-9a-f]+\)\n$/)
      }
      const json = yield* cli(["team-applications", "get", tenant, unknownId, "--json"], env)
      expect(json).toMatchObject({ code: 3, stdout: "" })
      expect(JSON.parse(json.stderr)).toMatchObject({
        error: "refused",
        exitCode: 3,
        _tag: "TeamApplicationNotFound",
        reason: "application-not-found",
        status: 404,
        correlationId: expect.stringMatching(/^[0-9a-f]+$/)
      })
    }))

  it.scoped("usage errors exit 2 before any request: a malformed application id or tenant, a missing argument, the group alone, no OPERATOR_TOKEN", () =>
    Effect.gen(function* () {
      const { applications, baseUrl } = yield* Backend
      const env = operatorEnv(baseUrl)
      const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
        [["team-applications", "get", tenant, "not-an-id"], "an application id (a lower-case UUID)"],
        [["team-applications", "get", tenant, applications[0]!.id.toUpperCase()], "an application id (a lower-case UUID)"],
        [["team-applications", "get", "Not A Tenant!", applications[0]!.id], "TenantId must match"],
        [["team-applications", "get", tenant], ""],
        [["team-applications", "frobnicate"], ""]
      ]
      // Independent processes: run side by side.
      const runs = yield* Effect.forEach(cases, ([args]) => cli(args, env), { concurrency: 4 })
      cases.forEach(([args, message], i) => {
        expect([args, runs[i]!.code, runs[i]!.stdout]).toEqual([args, 2, ""])
        expect(runs[i]!.stderr).toContain(message)
      })
      const group = yield* cli(["team-applications"], env)
      expect(group).toMatchObject({ code: 2, stdout: "", stderr: "usage: team-applications needs a command: get, summary (see --help)\n" })

      for (const args of [["team-applications", "summary"], ["team-applications", "get", tenant, applications[0]!.id]]) {
        const missing = yield* cli(args, { DELIVERY_URL: baseUrl })
        expect(missing).toMatchObject({ code: 2, stdout: "", stderr: "usage: OPERATOR_TOKEN is not set\n" })
      }
    }))

  it.scoped("a wrong operator token is refused, exit 3: unknown (Unauthenticated, HTTP 401) with its correlation id", () =>
    Effect.gen(function* () {
      const { applications, baseUrl } = yield* Backend
      const wrong = { DELIVERY_URL: baseUrl, OPERATOR_TOKEN: `${OPERATOR_TOKEN}x` }
      for (const args of [["team-applications", "summary"], ["team-applications", "get", tenant, applications[0]!.id]]) {
        const run = yield* cli(args, wrong)
        expect(run).toMatchObject({ code: 3, stdout: "" })
        expect(run.stderr).toMatch(/^refused: unknown \(Unauthenticated, HTTP 401, correlation id [0-9a-f]+\)\n$/)
      }
    }))

  it.scoped("exit 4 when nothing listens at DELIVERY_URL", () =>
    Effect.gen(function* () {
      const port = yield* freePort
      const env = { DELIVERY_URL: `http://127.0.0.1:${port}`, OPERATOR_TOKEN }
      const summary = yield* cli(["team-applications", "summary"], env)
      expect(summary).toMatchObject({ code: 4, stdout: "" })
      expect(summary.stderr).toMatch(/^unavailable: .*RequestError/)
      const get = yield* cli(["team-applications", "get", tenant, unknownId, "--json"], env)
      expect(get.code).toBe(4)
      expect(JSON.parse(get.stderr)).toMatchObject({ error: "unavailable", exitCode: 4, _tag: "RequestError" })
    }))

  it.scoped("exit 4 when the backend cannot read the delivery states: 503 storage-unavailable (TeamApplicationsUnavailable) with its correlation id", () =>
    Effect.gen(function* () {
      const { applications, baseUrl } = yield* Backend
      const sql = yield* SqlClient.SqlClient
      const env = operatorEnv(baseUrl)
      yield* Effect.acquireRelease(
        sql`ALTER VIEW team_application_delivery_state RENAME TO team_application_delivery_state_away`,
        () => Effect.orDie(sql`ALTER VIEW team_application_delivery_state_away RENAME TO team_application_delivery_state`)
      )
      const summary = yield* cli(["team-applications", "summary"], env)
      expect(summary).toMatchObject({ code: 4, stdout: "" })
      expect(summary.stderr).toMatch(/^unavailable: storage-unavailable \(TeamApplicationsUnavailable, HTTP 503, correlation id [0-9a-f]+\)\n$/)
      const get = yield* cli(["team-applications", "get", tenant, applications[0]!.id, "--json"], env)
      expect(get).toMatchObject({ code: 4, stdout: "" })
      expect(JSON.parse(get.stderr)).toMatchObject({
        error: "unavailable",
        exitCode: 4,
        _tag: "TeamApplicationsUnavailable",
        reason: "storage-unavailable",
        status: 503
      })
    }))
})
