import { expect, layer } from "@effect/vitest"
import { freePort, LoopbackProvider, LoopbackReply, OPERATOR_TOKEN, runCli, startBackend } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Context, Effect, Layer, Redacted, Schedule } from "effect"
import { createPrivateKey, createPublicKey, randomBytes } from "node:crypto"
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { makeFetchClient } from "../src/index.ts"
import { keyPair, operatorClient, provisionTenant } from "./support/World.ts"

// The operator's command line (docs/operations.md, "Command line") as a real `bun` process against a real
// backend process: provisioning, refusals and their exit codes, key files, envelopes, streams.

const unique = (prefix: string) => `${prefix}-${randomBytes(4).toString("hex")}`

class Backend extends Context.Tag("Cli.test/Backend")<Backend, { readonly baseUrl: string }>() {}

// One backend for the whole file: every test works in tenants of its own.
const SuiteLayer = Layer.scoped(Backend, Effect.map(startBackend(), ({ baseUrl }) => ({ baseUrl }))).pipe(
  Layer.provideMerge(TestDatabaseLive),
  Layer.merge(LoopbackProvider.Default)
)

const cli = (args: ReadonlyArray<string>, env: Readonly<Record<string, string>>) =>
  runCli(args, env).pipe(
    // No run, whatever it does, ever prints the operator token.
    Effect.tap((run) => expect(`${run.stdout}${run.stderr}`).not.toContain(OPERATOR_TOKEN))
  )

const operatorEnv = (baseUrl: string) => ({ DELIVERY_URL: baseUrl, OPERATOR_TOKEN })

/** Runs with `--json` and parses the one document on stdout. */
const cliJson = (args: ReadonlyArray<string>, env: Readonly<Record<string, string>>) =>
  Effect.map(cli([...args, "--json"], env), (run) => {
    expect(run, run.stderr).toMatchObject({ code: 0 })
    return JSON.parse(run.stdout) as any
  })

const iso = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/

/** A folder under /tmp for one test's files, removed after it. */
const scratch = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync("/tmp/cli-test-")),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
)

layer(SuiteLayer, { excludeTestServices: true })("the delivery-admin command line against a real backend", (it) => {
  it.scoped("provisioning through the CLI: tenants create, accounts create, api-keys issue and devices issue each print one JSON document with --json (the answer re-encoded: ISO dates, the one-time token), and the lists show the same ids without any token", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const env = operatorEnv(baseUrl)
      const tenant = unique("cli")

      const created = yield* cliJson(["tenants", "create", tenant], env)
      expect(created).toMatchObject({ tenant: { id: tenant, createdAt: expect.stringMatching(iso) }, correlationId: expect.any(String) })

      // The password is read from the variable --password-env names, never from an argument.
      const account = yield* cliJson(["accounts", "create", tenant, `Ops@${tenant}.example`, "--password-env", "CLI_PASSWORD"], {
        ...env,
        CLI_PASSWORD: "correct horse battery staple"
      })
      expect(account.account).toMatchObject({ tenant, email: `ops@${tenant}.example`, enabled: true, hasPassword: true })
      const accountId: string = account.account.id

      const apiKey = yield* cliJson([
        "api-keys", "issue", tenant, "--account", accountId, "--kind", "agent", "--name", "scheduler",
        "--permission", "outbox:enqueue", "--permission", "receipts:write", "--expires-in", "3600"
      ], env)
      expect(apiKey.apiKey).toMatchObject({ account: accountId, kind: "agent", name: "scheduler", permissions: ["outbox:enqueue", "receipts:write"], state: "active" })
      expect(apiKey.apiKey.expiresAt).toMatch(iso)
      expect(apiKey.token).toMatch(new RegExp(`^agent_${apiKey.apiKey.id}_`))

      const device = yield* cliJson(["devices", "issue", tenant, "--account", accountId, "--device", "laptop-1"], env)
      expect(device.deviceCredential).toMatchObject({ account: accountId, device: "laptop-1", state: "active", expiresAt: null })
      expect(device.token).toMatch(new RegExp(`^device_${device.deviceCredential.id}_`))

      const keys = yield* cli(["api-keys", "list", tenant, "--account", accountId], env)
      expect(keys.code).toBe(0)
      expect(keys.stdout).toContain(apiKey.apiKey.id)
      expect(keys.stdout).not.toContain(apiKey.token)
      const devices = yield* cliJson(["devices", "list", tenant], env)
      expect(devices).toEqual({ items: [device.deviceCredential], next: null })
      const tenants = yield* cli(["tenants", "list"], env)
      expect(tenants.stdout.split("\n")[0]).toMatch(/^tenant\s+created$/)
      expect(tenants.stdout).toMatch(new RegExp(`^${tenant}\\s+\\d{4}-`, "m"))
    }))

  it.scoped("the one-time token printed by devices issue is the device's bearer: it authenticates at GET /api/whoami as that device", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const env = operatorEnv(baseUrl)
      const tenant = unique("who")
      yield* cliJson(["tenants", "create", tenant], env)
      const { account } = yield* cliJson(["accounts", "create", tenant, `dev@${tenant}.example`], env)
      const issued = yield* cli(["devices", "issue", tenant, "--account", account.id, "--device", "sensor-7"], env)
      expect(issued.code).toBe(0)
      const token = /token \(shown once, store it now\): (device_\S+)/.exec(issued.stdout)?.[1]
      expect(token).toBeDefined()

      const device = yield* makeFetchClient({ baseUrl, token: Redacted.make(token!) })
      expect(yield* device.identity.whoami()).toEqual({ _tag: "Device", tenant, account: account.id, device: "sensor-7" })
    }))

  it.scoped("a refusal exits 3 and names the stable reason and the correlation id: a taken tenant id is tenant-exists (409), an unknown tenant is tenant-not-found (404); with --json the error is a JSON object on stderr and stdout stays empty", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const env = operatorEnv(baseUrl)
      const tenant = unique("dup")
      expect((yield* cli(["tenants", "create", tenant], env))).toMatchObject({ code: 0, stdout: `tenant ${tenant} created\n` })

      const taken = yield* cli(["tenants", "create", tenant], env)
      expect(taken).toMatchObject({ code: 3, stdout: "" })
      expect(taken.stderr).toMatch(/^refused: tenant-exists \(ProvisioningConflict, HTTP 409, correlation id [0-9a-f]+\)\n$/)

      const unknown = yield* cli(["accounts", "list", unique("nobody"), "--json"], env)
      expect(unknown).toMatchObject({ code: 3, stdout: "" })
      expect(JSON.parse(unknown.stderr)).toMatchObject({
        error: "refused",
        exitCode: 3,
        _tag: "ProvisioningNotFound",
        reason: "tenant-not-found",
        status: 404,
        correlationId: expect.stringMatching(/^[0-9a-f]+$/)
      })

      // 401 is a refusal too: a wrong operator token, named by its reason.
      const wrong = yield* cli(["tenants", "list"], { DELIVERY_URL: baseUrl, OPERATOR_TOKEN: `${OPERATOR_TOKEN}x` })
      expect(wrong.code).toBe(3)
      expect(wrong.stderr).toMatch(/^refused: unknown \(Unauthenticated, HTTP 401/)
    }))

  it.scoped("usage errors exit 2 before any request: a missing OPERATOR_TOKEN is named (no secret printed), an unknown command, a bad argument, an invalid DELIVERY_SIGNING_KEY (its value never printed)", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const missing = yield* cli(["tenants", "list"], { DELIVERY_URL: baseUrl })
      expect(missing).toMatchObject({ code: 2, stdout: "", stderr: "usage: OPERATOR_TOKEN is not set\n" })
      const missingJson = yield* cli(["tenants", "list", "--json"], { DELIVERY_URL: baseUrl })
      expect(missingJson.code).toBe(2)
      expect(JSON.parse(missingJson.stderr)).toEqual({ error: "usage", exitCode: 2, _tag: "UsageError", message: "OPERATOR_TOKEN is not set" })

      const env = operatorEnv(baseUrl)
      const unknownCommand = yield* cli(["tenants", "destroy", "acme"], env)
      expect(unknownCommand.code).toBe(2)
      expect(unknownCommand.stdout).toBe("")
      expect((yield* cli(["frobnicate"], env)).code).toBe(2)
      expect((yield* cli([], env)).code).toBe(2)

      const badTenant = yield* cli(["tenants", "create", "Not A Tenant!"], env)
      expect(badTenant.code).toBe(2)
      expect(badTenant.stderr).toContain("TenantId must match")
      expect((yield* cli(["tenants", "list", "--limit", "many"], env)).code).toBe(2)
      expect((yield* cli(["api-keys", "issue", "acme", "--account", "a1", "--kind", "root", "--name", "x"], env)).code).toBe(2)
      // Nothing was created by the refused arguments.
      const operator = yield* operatorClient(baseUrl)
      const page = yield* operator.provisioning.listTenants({ urlParams: {} })
      expect(page.items.map((t) => t.id)).not.toContain("not a tenant!")

      const secret = `not-a-seed-${randomBytes(12).toString("hex")}`
      const deviceToken = `device_${randomBytes(12).toString("hex")}_${randomBytes(16).toString("hex")}`
      const dir = yield* scratch
      const events = join(dir, "one.json")
      writeFileSync(events, JSON.stringify({ route: { tenant: "acme", project: "web", producer: "p" }, sequence: 1, metadata: { kind: "task.proposed", subject: "t" } }))
      const badKey = yield* cli(["envelopes", "send", events], { DELIVERY_URL: baseUrl, DELIVERY_DEVICE_TOKEN: deviceToken, DELIVERY_SIGNING_KEY: secret })
      expect(badKey).toMatchObject({ code: 2, stdout: "" })
      expect(badKey.stderr).toContain("DELIVERY_SIGNING_KEY is invalid")
      expect(badKey.stderr).not.toContain(secret)
      expect(badKey.stderr).not.toContain(deviceToken)
      expect((yield* cli(["envelopes", "send", join(dir, "absent.json")], { DELIVERY_URL: baseUrl })).code).toBe(2)
    }))

  it.scoped("exit 4 when nothing listens at DELIVERY_URL: a refused connection is unavailable, not a refusal", () =>
    Effect.gen(function* () {
      const port = yield* freePort
      const run = yield* cli(["tenants", "list"], { DELIVERY_URL: `http://127.0.0.1:${port}`, OPERATOR_TOKEN })
      expect(run).toMatchObject({ code: 4, stdout: "" })
      expect(run.stderr).toMatch(/^unavailable: .*RequestError/)
      const json = yield* cli(["--json", "tenants", "list"], { DELIVERY_URL: `http://127.0.0.1:${port}`, OPERATOR_TOKEN })
      expect(json.code).toBe(4)
      expect(JSON.parse(json.stderr)).toMatchObject({ error: "unavailable", exitCode: 4, _tag: "RequestError" })
    }))

  it.scoped("signing-keys generate writes the seed to a new file of mode 0600 in the SIGNER_KEYS_FILE form and refuses to overwrite it; register --key-file registers the public key it printed", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const env = operatorEnv(baseUrl)
      const tenant = unique("keys")
      yield* cliJson(["tenants", "create", tenant], env)
      const dir = yield* scratch
      const file = join(dir, "signing-key.json")

      // No server is involved: it runs with no environment at all.
      const generated = yield* cliJson(["signing-keys", "generate", tenant, "k1", "--out", file], {})
      expect(generated).toMatchObject({ tenant, keyId: "k1", file, publicKey: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/) })
      expect(statSync(file).mode & 0o777).toBe(0o600)
      const content = JSON.parse(readFileSync(file, "utf8"))
      expect(Object.keys(content)).toEqual([tenant])
      const seed: string = content[tenant].k1
      expect(seed).toMatch(/^[A-Za-z0-9_-]{43}$/)
      const privateKey = createPrivateKey({ key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), Buffer.from(seed, "base64url")]), format: "der", type: "pkcs8" })
      expect(createPublicKey(privateKey).export({ format: "jwk" }).x).toBe(generated.publicKey)

      const again = yield* cli(["signing-keys", "generate", tenant, "k2", "--out", file], {})
      expect(again.code).toBe(2)
      expect(`${again.stdout}${again.stderr}`).not.toContain(seed)
      expect(readFileSync(file, "utf8")).toBe(`${JSON.stringify(content)}\n`)

      const registered = yield* cliJson(["signing-keys", "register", tenant, "k1", "--key-file", file], env)
      expect(registered).toMatchObject({ outcome: "registered", key: { keyId: "k1", publicKey: generated.publicKey, state: "active" } })
      expect(JSON.stringify(registered)).not.toContain(seed)
      const operator = yield* operatorClient(baseUrl)
      const { keys } = yield* operator.signer.list({ path: { tenant } })
      expect(keys.map((key) => [key.keyId, Buffer.from(key.publicKey).toString("base64url"), key.state])).toEqual([["k1", generated.publicKey, "active"]])

      // The key file names its tenant and key id: another key id is not in it.
      const wrongId = yield* cli(["signing-keys", "rotate", tenant, "k2", "--key-file", file], env)
      expect(wrongId.code).toBe(2)
      expect(wrongId.stderr).toContain(`has no key k2 of tenant ${tenant}`)
      expect(existsSync(file)).toBe(true)
    }))

  it.scoped("envelopes send: a file of 3 events is signed and sent (progress on stderr, one JSON array of accepted outcomes on stdout); the same file sent again gives 3 duplicates and exit 0; a refused event stops the run with exit 3 unless --keep-going", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const world = yield* provisionTenant(baseUrl, unique("env"))
      const env = {
        DELIVERY_URL: baseUrl,
        DELIVERY_DEVICE_TOKEN: Redacted.value(world.device.token),
        DELIVERY_SIGNING_KEY: world.key.seed
      }
      const event = (sequence: number, eventId: string) => ({
        route: { tenant: world.tenant, project: "web", producer: "laptop-1" },
        sequence,
        eventId,
        createdAt: "2026-11-30T09:30:00.000Z",
        metadata: { kind: "task.proposed", subject: `task-${sequence}`, attributes: { title: "Réviser le plan" } }
      })
      const dir = yield* scratch
      const three = join(dir, "three.json")
      writeFileSync(three, JSON.stringify([1, 2, 3].map((n) => event(n, `evt-cli-${n}-0000000000`))))

      const first = yield* cli(["envelopes", "send", three, "--json"], env)
      expect(first.code, first.stderr).toBe(0)
      expect(first.stderr).toBe("sent 1/3\nsent 2/3\nsent 3/3\n")
      const accepted = JSON.parse(first.stdout)
      expect(accepted.map((o: any) => [o.outcome, o.sequence, o.eventId, o.cursor])).toEqual([
        ["accepted", 1, "evt-cli-1-0000000000", 1],
        ["accepted", 2, "evt-cli-2-0000000000", 2],
        ["accepted", 3, "evt-cli-3-0000000000", 3]
      ])

      const again = yield* cli(["envelopes", "send", three, "--key-id", "k1"], env)
      expect(again.code, again.stderr).toBe(0)
      expect(again.stdout.trim().split("\n").map((line) => line.split(" ")[0])).toEqual(["duplicate", "duplicate", "duplicate"])
      const againJson = JSON.parse((yield* cli(["--json", "envelopes", "send", three], env)).stdout)
      expect(againJson.map((o: any) => [o.outcome, o.eventIdentity])).toEqual(accepted.map((o: any) => ["duplicate", o.eventIdentity]))

      // Sequence 2 again under another event id is refused (409); the event after it is sent only with --keep-going.
      const mixed = join(dir, "mixed.json")
      writeFileSync(mixed, JSON.stringify([event(2, "evt-cli-other-000000"), event(4, "evt-cli-4-0000000000")]))
      const stopped = yield* cli(["envelopes", "send", mixed, "--json"], env)
      expect(stopped.code).toBe(3)
      expect(JSON.parse(stopped.stdout)).toMatchObject([{ outcome: "refused", sequence: 2, _tag: "EnvelopeConflict", status: 409, exitCode: 3 }])
      expect(stopped.stderr).toContain('"reason":"sequence-conflict"')
      const operator = yield* operatorClient(baseUrl)
      const stream = { tenant: world.tenant, project: "web" as never, producer: "laptop-1" as never }
      expect((yield* operator.inboxStreams.stream({ path: stream })).cursor).toBe(3)

      const kept = yield* cli(["envelopes", "send", mixed, "--keep-going"], env)
      expect(kept.code).toBe(3)
      expect(kept.stderr).toMatch(/^refused: sequence-conflict \(EnvelopeConflict, HTTP 409, correlation id [0-9a-f]+\)$/m)
      expect(kept.stdout).toBe(`accepted ${world.tenant}/web/laptop-1 sequence 4 (event evt-cli-4-0000000000, cursor 4)\n`)
      expect((yield* operator.inboxStreams.stream({ path: stream })).cursor).toBe(4)
    }))

  it.scoped("streams raise-floor raises a stream's replay floor and never lowers it; streams get reads the cursor and floor back; an unknown stream is 404 stream-not-found", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const env = operatorEnv(baseUrl)
      const tenant = unique("floor")
      yield* cliJson(["tenants", "create", tenant], env)

      const raised = yield* cliJson(["streams", "raise-floor", tenant, "web", "laptop-1", "5"], env)
      expect(raised).toMatchObject({ outcome: "raised", stream: { tenant, project: "web", producer: "laptop-1", cursor: 5, replayFloor: 5 } })
      const lower = yield* cli(["streams", "raise-floor", tenant, "web", "laptop-1", "3"], env)
      expect(lower).toMatchObject({ code: 0, stdout: `floor unchanged: stream ${tenant}/web/laptop-1: cursor 5, replay floor 5, high sequence 0\n` })
      expect(yield* cliJson(["streams", "get", tenant, "web", "laptop-1"], env)).toEqual({
        tenant,
        project: "web",
        producer: "laptop-1",
        cursor: 5,
        replayFloor: 5,
        highSequence: 0
      })

      const unknown = yield* cli(["streams", "get", tenant, "web", "nobody"], env)
      expect(unknown.code).toBe(3)
      expect(unknown.stderr).toMatch(/^refused: stream-not-found \(StreamNotFound, HTTP 404/)
      expect((yield* cli(["streams", "raise-floor", tenant, "web", "laptop-1", "-1"], env)).code).toBe(2)
    }))

  it.scoped("messages enqueue (DELIVERY_API_KEY) is delivered by the backend; a 4xx from the receiver makes it a dead letter that dead-letters list shows, dead-letters redrive gives it new attempts, and messages get reads it delivered; the same file again is the same message", () =>
    Effect.gen(function* () {
      const receiver = yield* LoopbackProvider
      yield* receiver.reset
      yield* receiver.script({ times: 1, reply: LoopbackReply.status(400) })
      const tenant = unique("dl")
      const key = keyPair()
      const { baseUrl } = yield* startBackend({ SIGNER_KEYS: `${tenant}:k1:${key.seed}`, OUTBOX_POLL_INTERVAL: "100 millis" })
      const world = yield* provisionTenant(baseUrl, tenant, key)
      const env = operatorEnv(baseUrl)
      expect((yield* cli(["targets", "set", tenant, "web", receiver.urlFor("/hooks")], env)).code).toBe(0)
      const dir = yield* scratch
      const file = join(dir, "message.json")
      writeFileSync(file, JSON.stringify({
        envelope: {
          type: "controlplane/v1",
          route: { tenant, project: "web", producer: "scheduler" },
          eventId: "evt-cli-dead-letter-0001",
          idempotencyKey: "cli:dead-letter:1",
          sequence: 1,
          createdAt: "2026-11-30T12:00:00Z",
          schemaVersion: 1,
          metadata: { kind: "task.proposed", subject: "task-1", attributes: {} }
        }
      }))
      const apiKeyEnv = { DELIVERY_URL: baseUrl, DELIVERY_API_KEY: Redacted.value(world.apiKey.token) }
      const enqueued = yield* cliJson(["messages", "enqueue", file], apiKeyEnv)
      expect(enqueued).toMatchObject({ replayed: false, message: { state: "pending", tenant, project: "web" } })
      const id: string = enqueued.message.id
      expect(yield* cliJson(["messages", "enqueue", file], apiKeyEnv)).toMatchObject({ replayed: true, message: { id } })
      expect(yield* cli(["messages", "enqueue", file], { DELIVERY_URL: baseUrl })).toMatchObject({ code: 2 })

      const deadLetters = yield* cliJson(["dead-letters", "list", tenant, "web"], env).pipe(
        Effect.filterOrFail((page) => page.items.length === 1, () => "no dead letter yet"),
        Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo("30 seconds")))
      )
      expect(deadLetters.items[0]).toMatchObject({ id, state: "dead" })
      expect(yield* cliJson(["dead-letters", "redrive", tenant, "web", id], env)).toMatchObject({ id, state: "pending" })
      const delivered = yield* cliJson(["messages", "get", tenant, "web", id], env).pipe(
        Effect.filterOrFail((message) => message.state === "delivered", () => "not delivered yet"),
        Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo("30 seconds")))
      )
      expect(delivered).toMatchObject({ id, state: "delivered" })
      expect((yield* receiver.deliveries).filter((d) => d.idempotencyKey === id).length).toBeGreaterThanOrEqual(1)
      expect(yield* cli(["dead-letters", "redrive", tenant, "web", id], env)).toMatchObject({ code: 3 })
    }))
})
