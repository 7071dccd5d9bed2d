import { expect, layer } from "@effect/vitest"
import { freePort, OPERATOR_TOKEN, runCli } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Context, Effect, Layer } from "effect"
import { type Cloud, makeStack, op, registerStack, reportKeyOf, type StackSpec, startCloud } from "../../backend/test/support/Cloud.ts"
import { call } from "../../backend/test/support/Http.ts"
import { tenantWithKey } from "../../backend/test/support/Receipts.ts"

// `delivery-admin cloud …` (docs/operations.md, "Command line") as real `bun` processes against one real ROLE=cloud
// process (`bun run start`) whose local compute provider starts and stops two real tenant stacks. Stack `a` is
// registered before the tests with the operator routes, stack `b` through the command line. The tests run in order
// and share the stacks' states.

class Suite extends Context.Tag("CloudCli.test/Suite")<Suite, {
  readonly cloud: Cloud
  readonly a: StackSpec
  readonly b: StackSpec
  readonly hostA: string
  readonly env: Readonly<Record<string, string>>
}>() {}

const SuiteLayer = Layer.scoped(
  Suite,
  Effect.gen(function* () {
    const a = yield* makeStack()
    const b = yield* makeStack()
    const cloud = yield* startCloud({ stacks: [a, b] })
    const hostA = `${a.id}.tenants.test`
    yield* registerStack(cloud, a, hostA)
    return { cloud, a, b, hostA, env: { DELIVERY_URL: `http://127.0.0.1:${cloud.port}`, OPERATOR_TOKEN } }
  })
).pipe(Layer.provideMerge(TestDatabaseLive))

/** No run may print the operator token. */
const cli = (args: ReadonlyArray<string>, env: Readonly<Record<string, string>>) =>
  runCli(args, env).pipe(Effect.tap((run) => expect(`${run.stdout}${run.stderr}`).not.toContain(OPERATOR_TOKEN)))

/** Runs with `--json` and parses the one document on stdout. */
const cliJson = (args: ReadonlyArray<string>, env: Readonly<Record<string, string>>) =>
  Effect.map(cli([...args, "--json"], env), (run) => {
    expect(run, run.stderr).toMatchObject({ code: 0, stderr: "" })
    return JSON.parse(run.stdout) as any
  })

/** A successful human run's lines. */
const cliLines = (args: ReadonlyArray<string>, env: Readonly<Record<string, string>>) =>
  Effect.map(cli(args, env), (run) => {
    expect(run, run.stderr).toMatchObject({ code: 0, stderr: "" })
    return run.stdout.trimEnd().split("\n")
  })

/** A human table's lines split into cells. */
const cells = (lines: ReadonlyArray<string>) => lines.map((line) => line.trim().split(/\s{2,}/))

/**
 * A refusal: exit 3 and one line naming reason, tag, status, correlation id and the refusal's other members; with
 * `json` the same run with `--json` too (concurrently), whose stderr is that refusal as a JSON object.
 */
const expectRefused = (
  args: ReadonlyArray<string>,
  env: Readonly<Record<string, string>>,
  refusal: { readonly tag: string; readonly reason: string; readonly status: number; readonly details?: Record<string, string>; readonly json?: boolean }
) =>
  Effect.gen(function* () {
    const { details, reason, status, tag } = refusal
    const [run, json] = yield* Effect.all([cli(args, env), refusal.json === true ? cli([...args, "--json"], env) : Effect.succeed(undefined)], {
      concurrency: 2
    })
    expect(run, run.stderr).toMatchObject({ code: 3, stdout: "" })
    const extra = Object.entries(details ?? {}).map(([key, value]) => `, ${key} ${value}`).join("")
    expect(run.stderr).toMatch(new RegExp(`^refused: ${reason} \\(${tag}, HTTP ${status}, correlation id [0-9a-f]+${extra}\\)\\n$`))
    if (json === undefined) return
    expect(json).toMatchObject({ code: 3, stdout: "" })
    expect(JSON.parse(json.stderr)).toEqual({
      error: "refused",
      exitCode: 3,
      _tag: tag,
      reason,
      status,
      correlationId: expect.stringMatching(/^[0-9a-f]+$/),
      ...(details === undefined ? {} : { details })
    })
  })

const stateOf = (cloud: Cloud, stack: StackSpec) =>
  Effect.map(call(cloud.port, "GET", `/operator/cloud/stacks/${stack.id}`, op), (answer) => answer.json)

layer(SuiteLayer, { excludeTestServices: true, timeout: 120_000 })("delivery-admin cloud against a real ROLE=cloud process", (it) => {
  it.scoped("cloud stacks and cloud stack print the operator view as tables and lines; --json prints exactly the route's answer", () =>
    Effect.gen(function* () {
      const { a, cloud, env, hostA } = yield* Suite
      const [listed, detail] = yield* Effect.all([call(cloud.port, "GET", "/operator/cloud/stacks", op), stateOf(cloud, a)])
      const [listJson, lines, detailJson, shown] = yield* Effect.all([
        cliJson(["cloud", "stacks"], env),
        cliLines(["cloud", "stacks"], env),
        cliJson(["cloud", "stack", a.id], env),
        cliLines(["cloud", "stack", a.id], env)
      ], { concurrency: 2 })

      expect(listJson).toEqual(listed.json)
      const view = listed.json.stacks.find((s: { stack: string }) => s.stack === a.id)
      expect(view).toMatchObject({ state: "awake", profiles: ["tenant-api-http-v2"], recoveryHold: false, receipt: null })
      const split = lines.indexOf("by state:")
      expect(cells(lines.slice(0, split))).toEqual([
        ["stack", "state", "hold", "keys", "bindings", "profiles", "since"],
        [a.id, "awake", "off", "-", "-", "tenant-api-http-v2", view.stateChangedAt]
      ])
      expect(cells(lines.slice(split + 1))).toEqual([["state", "stacks", "receipts"], ["awake", "1", "0"]])

      expect(detailJson).toEqual(detail)
      expect(detailJson).toMatchObject({ stack: a.id, state: "awake", hosts: [hostA] })
      expect(shown.slice(0, 6)).toEqual([
        `stack ${a.id}: awake since ${detail.stateChangedAt}`,
        "profiles: tenant-api-http-v2",
        `upstream: ${detail.upstream}`,
        "recovery hold: off",
        "receipt: none",
        `hosts: ${hostA}`
      ])
      expect(cells(shown.slice(6, 7))).toEqual([["at", "action", "correlation id", "detail"]])
      expect(shown.slice(7).map((line) => line.split(/\s{2,}/)[1])).toEqual(detail.audit.map((entry: { action: string }) => entry.action))
    }))

  it.scoped("cloud register registers a second stack with both profiles; host add adds a host, a host of another stack is refused host-taken (exit 3, correlation id), host remove; a second register is refused stack-exists; sleep is refused with the blocker codes while the tenant has API activity; archive ends the stack for good", () =>
    Effect.gen(function* () {
      const { b, env, hostA } = yield* Suite
      const hostB = `${b.id}.tenants.test`
      const register = ["cloud", "register", b.id, "--audience", b.audience, "--report-key", reportKeyOf(b), "--profile", "tenant-api-http-v2", "--profile", "github-broker-events-v1"]
      const registered = yield* cliLines(register, env)
      expect(registered[0]).toMatch(new RegExp(`^stack ${b.id}: awake since \\d{4}-`))
      expect(registered.slice(1)).toEqual([
        "profiles: tenant-api-http-v2, github-broker-events-v1",
        expect.stringMatching(/^upstream: http:\/\/127\.0\.0\.1:\d+/),
        "recovery hold: off",
        "receipt: none"
      ])

      const [added] = yield* Effect.all([
        cliLines(["cloud", "host", "add", b.id, hostB], env),
        expectRefused(register, env, { tag: "CloudConflict", reason: "stack-exists", status: 409 })
      ], { concurrency: 2 })
      expect(added).toEqual([`host ${hostB} added (stack ${b.id})`])
      yield* expectRefused(["cloud", "host", "add", b.id, hostA], env, { tag: "CloudConflict", reason: "host-taken", status: 409, json: true })
      const [removed] = yield* Effect.all([
        cliLines(["cloud", "host", "remove", b.id, hostB], env),
        // A 2xx on the stack's API holds its local API activity, so the sleep below is refused.
        Effect.flatMap(tenantWithKey(b.port, ["receipts:write"]), ({ token }) => call(b.port, "GET", "/api/whoami", { token }))
      ], { concurrency: 2 })
      expect(removed).toEqual([`host ${hostB} removed (stack ${b.id})`])
      yield* expectRefused(["cloud", "host", "remove", b.id, hostB], env, { tag: "CloudNotFound", reason: "host-unknown", status: 404 })

      const refused = yield* cliLines(["cloud", "sleep", b.id], env)
      expect(refused[0]).toMatch(/^refused: [a-z-]+$/)
      expect(cells(refused.slice(1, 2))).toEqual([["blocker", "count", "ids"]])
      expect(refused.slice(2).map((line) => line.split(/\s{2,}/)[0])).toContain("local-api-activity")

      expect(yield* cliJson(["cloud", "archive", b.id], env)).toMatchObject({ stack: b.id, state: "archived", stop: "Stopped", receipt: null })
      yield* expectRefused(["cloud", "resume", b.id], env, { tag: "CloudConflict", reason: "stack-archived", status: 409, details: { state: "archived" } })
    }))

  it.scoped("cloud sleep puts an idle stack to sleep (asleep), then answers not-awake; cloud wake wakes it; hold and release set and clear the recovery hold; suspend stops it (a wake is then refused stack-state, with the state), resume brings it back awake", () =>
    Effect.gen(function* () {
      const { a, cloud, env } = yield* Suite
      // Stack a never answered an API request: it sleeps.
      expect(yield* cliLines(["cloud", "sleep", a.id], env)).toEqual(["asleep"])
      expect(yield* stateOf(cloud, a)).toMatchObject({ state: "asleep", receipt: { keys: expect.any(Number) } })
      const [notAwake, stacks] = yield* Effect.all([cliJson(["cloud", "sleep", a.id], env), cliLines(["cloud", "stacks"], env)], { concurrency: 2 })
      expect(notAwake).toEqual({ outcome: "not-awake", state: "asleep" })
      expect(cells(stacks.slice(stacks.indexOf("by state:") + 1))).toEqual(
        expect.arrayContaining([["asleep", "1", "1"], ["archived", "1", "0"]])
      )
      expect(cells(stacks.slice(1, stacks.indexOf("by state:"))).find((row) => row[0] === a.id)?.slice(1, 3)).toEqual(["asleep", "off"])
      expect(yield* cliJson(["cloud", "wake", a.id], env)).toMatchObject({ stack: a.id, state: "awake", receipt: null })

      const held = yield* cliLines(["cloud", "hold", a.id], env)
      expect(held[0]).toMatch(new RegExp(`^stack ${a.id}: awake since `))
      expect(held).toContain("recovery hold: on")
      expect(yield* cliJson(["cloud", "release", a.id], env)).toMatchObject({ stack: a.id, state: "awake", recoveryHold: false })
      const suspended = yield* cliLines(["cloud", "suspend", a.id], env)
      expect(suspended[0]).toMatch(new RegExp(`^stack ${a.id}: suspended since `))
      expect(suspended.at(-1)).toBe("compute stop: Stopped")
      yield* expectRefused(["cloud", "wake", a.id], env, { tag: "CloudConflict", reason: "stack-state", status: 409, details: { state: "suspended" }, json: true })
      expect(yield* cliJson(["cloud", "resume", a.id], env)).toMatchObject({ stack: a.id, state: "awake" })
    }))

  it.scoped("cloud admission prints the process's counters; --json prints exactly the route's answer", () =>
    Effect.gen(function* () {
      const { cloud, env } = yield* Suite
      const answer = (yield* call(cloud.port, "GET", "/operator/cloud/admission", op)).json
      const [json, lines] = yield* Effect.all([cliJson(["cloud", "admission"], env), cliLines(["cloud", "admission"], env)], { concurrency: 2 })
      expect(json).toEqual(answer)
      expect(lines.slice(0, 4)).toEqual([
        `waiting: ${answer.waiting} requests for ${answer.waitingStacks} stacks`,
        `preparations: ${answer.preparations}`,
        `admitted: ${answer.admitted}`,
        `wakes started: ${answer.wakesStarted}`
      ])
      expect(cells(lines.slice(4, 5))).toEqual([["refusal", "count"]])
    }))

  it.scoped("an unknown stack is refused stack-unknown (exit 3); a wrong token is refused (exit 3); a missing token, bad arguments or a bare group are usage errors (exit 2) before any request; an unreachable cloud is unavailable (exit 4)", () =>
    Effect.gen(function* () {
      const { cloud, env } = yield* Suite
      const unreachable = { DELIVERY_URL: `http://127.0.0.1:${yield* freePort}`, OPERATOR_TOKEN }
      const noToken = { DELIVERY_URL: env.DELIVERY_URL! }
      const [wrong, missing, bare, badKey, badHost, down] = yield* Effect.all([
        cli(["cloud", "stacks"], { ...env, OPERATOR_TOKEN: `${OPERATOR_TOKEN}x` }),
        cli(["cloud", "admission", "--json"], noToken),
        cli(["cloud"], env),
        cli(["cloud", "register", "stack-x", "--audience", "tenant:x", "--report-key", "not-a-key", "--profile", "tenant-api-http-v2"], env),
        cli(["cloud", "host", "add", "stack-x", "Not.A.Host"], env),
        cli(["cloud", "sleep", "stack-x", "--json"], unreachable),
        expectRefused(["cloud", "stack", "stack-none"], env, { tag: "CloudNotFound", reason: "stack-unknown", status: 404, json: true })
      ], { concurrency: 2 })

      expect(wrong.code).toBe(3)
      expect(wrong.stderr).toMatch(/^refused: .*HTTP 40[13]/)
      expect(missing).toMatchObject({ code: 2, stdout: "" })
      expect(JSON.parse(missing.stderr)).toEqual({ error: "usage", exitCode: 2, _tag: "UsageError", message: "OPERATOR_TOKEN is not set" })
      expect(bare).toMatchObject({
        code: 2,
        stdout: "",
        stderr: "usage: cloud needs a command: stacks, stack, register, host, sleep, wake, recover, suspend, resume, archive, hold, release, admission (see --help)\n"
      })
      expect(badKey).toMatchObject({ code: 2, stdout: "" })
      expect(badKey.stderr).toContain("expected keyId:publicKey")
      expect(badHost).toMatchObject({ code: 2, stdout: "" })
      expect(badHost.stderr).toContain("lower-case DNS name")
      // The bad arguments sent nothing.
      expect((yield* call(cloud.port, "GET", "/operator/cloud/stacks/stack-x", op)).json).toMatchObject({ _tag: "CloudNotFound" })

      expect(down).toMatchObject({ code: 4, stdout: "" })
      expect(JSON.parse(down.stderr)).toMatchObject({ error: "unavailable", exitCode: 4, _tag: "RequestError" })
    }))
})
