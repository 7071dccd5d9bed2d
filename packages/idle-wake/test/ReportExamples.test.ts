import { AccountId, DeviceId, Email, TenantId } from "@delivery/identity"
import { privateKeyFromSeed } from "@delivery/signer"
import { PgClusterFromVitest } from "@delivery/testing/vitest"
import { expect, layer } from "@effect/vitest"
import { Context, Deferred, Duration, Effect, Fiber, Option, Redacted, Schema } from "effect"
import { createHash, createPublicKey } from "node:crypto"
import { readFileSync, writeFileSync } from "node:fs"
import { BLOCKER_ROWS } from "../src/BlockerReasons.ts"
import { TRANSPORTS } from "../src/Ingress.ts"
import type { ConnectorId, SignerKeyId, StackId } from "../src/Domain.ts"
import { RuntimeRegistries } from "../src/LocalWork.ts"
import { type Blocker, type BlockerCode, BlockerCode as BlockerCodeSchema, DrainReport } from "../src/Protocol.ts"
import { API_ONLY, assertion, type AssertionOptions, BOTH, BROKER_ONLY, clockAt, correlationId, tenantSettings, tenantWorld, withCapability } from "./support/Tenant.ts"

// docs/idle-wake.md's example reports and its blocker table, produced by a real tenant (TenantDrain on PostgreSQL, a
// database per world) at a fixed time with the page's own keys: the worked example's assertion is read from the page
// and answered, and every blocker code is produced by a state that causes it. IDLE_WAKE_WRITE_EXAMPLES=1 rewrites the
// page's generated parts instead of comparing them (after a deliberate change of the protocol).

const pagePath = new URL("../../../docs/idle-wake.md", import.meta.url)
const page = readFileSync(pagePath, "utf8")
const writing = process.env["IDLE_WAKE_WRITE_EXAMPLES"] === "1"
const produced = new Map<string, string>()

const region = (name: string): string | undefined => {
  const match = new RegExp(`<!-- begin ${name} -->\\n([\\s\\S]*?)<!-- end ${name} -->`).exec(page)
  return match?.[1]
}
const labelled = (label: string): string => {
  const match = new RegExp("^```[a-z]+ " + label + "\\n([\\s\\S]*?)\\n```$", "m").exec(page)
  if (match === null) throw new Error(`docs/idle-wake.md has no block labelled "${label}"`)
  return match[1]!
}

const AT = Date.parse("2026-12-01T10:00:30.000Z")
const fixedClock = clockAt(AT)
const atFixedTime = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.withClock(effect, fixedClock)

const seed = (label: string) => new Uint8Array(Buffer.from(labelled(label), "hex"))
const cloudKey = privateKeyFromSeed(seed("cloud-seed-hex"))
const exampleSettings = tenantSettings({
  stack: "stack-example" as StackId,
  audience: "tenant:stack-example",
  cloudKeys: new Map([["cloud-2026-12", createPublicKey(cloudKey)]]),
  reportKeyId: "stack-example-report" as SignerKeyId,
  reportKey: Redacted.make(privateKeyFromSeed(seed("report-seed-hex")))
})
const idleHold = labelled("idle-hold")

type World = Effect.Effect.Success<ReturnType<typeof tenantWorld>>

const world = (ingress: ReadonlyArray<string> = []) => tenantWorld({ tenant: Option.some(exampleSettings), ingress })

const by = { actor: "operator:environment", correlationId: correlationId() }
const id = (text: string) => text as ConnectorId

const owner = (w: World) =>
  Effect.gen(function* () {
    const tenant = TenantId.make("example")
    yield* w.identity.createTenant(tenant)
    const account = yield* w.identity.createAccount({ tenant, email: Schema.decodeSync(Email)("ops@example.com") })
    return { tenant, account }
  })

/** The page's two keys, as Identity stores them (the token's secret only as SHA-256): a fixture of known tokens. */
const exampleKeys = (w: World) =>
  Effect.gen(function* () {
    const { tenant, account } = yield* owner(w)
    for (const label of ["board-token", "agent-token"]) {
      const [kind, lookupId, ...rest] = labelled(label).split("_") as [string, string, ...Array<string>]
      const secret = rest.join("_")
      const expiresAt = kind === "board" ? new Date("2027-01-01T00:00:00.000Z") : null
      yield* w.sql`
        INSERT INTO identity_api_keys (lookup_id, tenant_id, account_id, kind, name, secret_hash, expires_at)
        VALUES (${lookupId}, ${tenant}, ${account}, ${kind}, 'example', ${createHash("sha256").update(secret).digest()}, ${expiresAt})`
    }
    return { tenant, account }
  })

/** One enrolled connector instance and one complete GitHub binding, through the writers. */
const exampleBinding = (w: World) =>
  Effect.gen(function* () {
    yield* w.connectors.enrollInstance(id("connector-1"), by)
    yield* w.connectors.addConnection({ id: id("conn-1"), tenant: TenantId.make("example"), kind: "broker", owner: AccountId.make("acct-example") }, by)
    yield* w.connectors.startBotRegistration({ id: id("reg-1"), connection: id("conn-1"), appId: 1001 }, by)
    yield* w.connectors.completeBotRegistration({ id: id("reg-1"), installationId: 2002 }, by)
    yield* w.connectors.addEndpoint({ id: id("endpoint-1"), channel: id("channel-1"), connection: id("conn-1"), registration: id("reg-1") }, by)
  })

const read = (w: World, requestId: string, options: AssertionOptions = {}) =>
  atFixedTime(w.drain.read(
    assertion({
      requestId,
      stack: "stack-example",
      audience: "tenant:stack-example",
      keyId: "cloud-2026-12",
      signWith: cloudKey,
      idleHold: idleHold as never,
      issuedAt: new Date("2026-12-01T10:00:00.000Z"),
      expiresAt: new Date("2026-12-01T10:02:00.000Z"),
      ...options
    }),
    correlationId()
  ))

const show = (value: unknown) => JSON.stringify(value, null, 2)
/** Records the report for the page and, unless rewriting it, checks it against the page at once. */
const reportBlock = (name: string, report: unknown) => {
  const content = "```json " + name + "\n" + show(report) + "\n```\n"
  produced.set(name, content)
  if (!writing) expect(region(name), name).toBe(content)
}

/** The page's example of each blocker, from its table (the third column). */
const pageExamples = new Map<string, string>(
  [...(region("blockers-table") ?? "").matchAll(/^\| `([a-z0-9-]+)` \| [^|]* \| `(.*?)` \| .* \|$/gm)].map((m) => [m[1]!, m[2]!.replaceAll("\\|", "|")])
)

const blockerExamples = new Map<BlockerCode, Blocker>()
const collect = (report: { readonly blockers: ReadonlyArray<unknown> }, codes: ReadonlyArray<BlockerCode>) => {
  for (const code of codes) {
    const entry = (report.blockers as ReadonlyArray<Blocker>).find((blocker) => blocker.code === code)
    if (entry === undefined) throw new Error(`the state for ${code} did not produce it: ${JSON.stringify(report.blockers)}`)
    blockerExamples.set(code, entry)
    if (!writing) expect(JSON.stringify(entry), code).toBe(pageExamples.get(code))
  }
}

/** A fixture of an older schema: the identity constraints that today's writer relies on are not there. */
const legacyKeys = (w: World) => w.sql`
  ALTER TABLE identity_api_keys DROP CONSTRAINT identity_api_keys_pkey,
    DROP CONSTRAINT identity_api_keys_kind_check, DROP CONSTRAINT identity_api_keys_lookup_id_check`

const legacyKey = (w: World, account: { tenant: string; account: string }, kind: string, lookupId: string) => w.sql`
  INSERT INTO identity_api_keys (lookup_id, tenant_id, account_id, kind, name, secret_hash)
  VALUES (${lookupId}, ${account.tenant}, ${account.account}, ${kind}, 'legacy', sha256(${lookupId}::bytea))`

layer(PgClusterFromVitest, { excludeTestServices: true, timeout: 180_000 })("docs/idle-wake.md: example reports and blockers from a real tenant", (it) => {
  it.scoped("the worked example's assertion, read from the page, is answered with the page's report (both profiles, idle)", () =>
    Effect.gen(function* () {
      const w = yield* world()
      yield* exampleKeys(w)
      yield* exampleBinding(w)
      const answer = yield* atFixedTime(w.drain.read(JSON.parse(labelled("assertion")), correlationId()))
      expect(answer).toMatchObject({ version: 3, idle: true })
      reportBlock("report-both", answer)
    }))

  it.scoped("reports for a stack with nothing configured and for each profile", () =>
    Effect.gen(function* () {
      const bare = yield* world()
      reportBlock("report-nothing-configured", yield* read(bare, "drain-2026-12-01-initial-0002", { version: 2 }))

      const keys = yield* world()
      yield* exampleKeys(keys)
      reportBlock("report-tenant-api", yield* read(keys, "drain-2026-12-01-initial-0003", { capability: withCapability(API_ONLY) }))

      const broker = yield* world()
      yield* exampleBinding(broker)
      reportBlock("report-github-broker", yield* read(broker, "drain-2026-12-01-initial-0004", { capability: withCapability(BROKER_ONLY) }))
    }))

  it.scoped("a report with blockers of several kinds", () =>
    Effect.gen(function* () {
      const w = yield* world(["slack-webhook"])
      yield* exampleKeys(w)
      yield* exampleBinding(w)
      yield* w.connectors.addConnection({ id: id("conn-personal-1"), tenant: TenantId.make("example"), kind: "personal-mcp", owner: AccountId.make("acct-example") }, by)
      w.switches.pending.add("outbox")
      yield* atFixedTime(w.activity.observe({ _tag: "ApiKey", tenant: "example", account: "a", keyId: "k", kind: "board", permissions: [] } as never, 200))
      reportBlock("report-blocked", yield* read(w, "drain-2026-12-01-initial-0005", { capability: withCapability(BOTH) }))
    }))

  it.scoped("every ingress transport's blocker, and the control-plane inbox made an ingress by a device credential", () =>
    Effect.gen(function* () {
      const configurable = BLOCKER_ROWS.filter((row) => row.transport !== "" && !["tenant-api-http", "github-broker-events", "controlplane-envelopes"].includes(row.transport))
      const w = yield* world(configurable.map((row) => row.transport))
      const account = yield* owner(w)
      yield* w.identity.issueDeviceCredential({ tenant: account.tenant, account: account.account, device: DeviceId.make("laptop-1") })
      yield* exampleBinding(w)
      const report = yield* read(w, "drain-2026-12-01-ingress-0001", { version: 2 })
      collect(report, BLOCKER_ROWS.filter((row) => row.transport !== "").map((row) => row.code))
    }))

  it.scoped("the key projection's fail-closed blockers (rows of an older, laxer schema)", () =>
    Effect.gen(function* () {
      const overflow = yield* world()
      const account = yield* owner(overflow)
      yield* overflow.sql`
        INSERT INTO identity_api_keys (lookup_id, tenant_id, account_id, kind, name, secret_hash)
        SELECT lpad(to_hex(n), 24, '0'), ${account.tenant}, ${account.account}, 'agent', 'bulk', sha256(n::text::bytea)
        FROM generate_series(1, 1001) AS n`
      collect(yield* read(overflow, "drain-keys-overflow-0001", { capability: withCapability(API_ONLY) }), ["api-key-projection-overflow"])

      const cases: ReadonlyArray<[BlockerCode, ReadonlyArray<[string, string]>]> = [
        ["api-key-projection-unknown", [["service", "0123456789abcdef01234567"]]],
        ["api-key-projection-malformed", [["board", "LEGACY-KEY"]]],
        ["api-key-projection-duplicate", [["board", "0123456789abcdef01234567"], ["board", "0123456789abcdef01234567"]]]
      ]
      for (const [code, rows] of cases) {
        const w = yield* world()
        const who = yield* owner(w)
        yield* legacyKeys(w)
        for (const [kind, lookupId] of rows) yield* legacyKey(w, who, kind, lookupId)
        collect(yield* read(w, `drain-${code}`, { capability: withCapability(API_ONLY) }), [code])
      }
    }))

  it.scoped("a proof changed between the reads of one cycle", () =>
    Effect.gen(function* () {
      const w = yield* world()
      const who = yield* exampleKeys(w)
      yield* read(w, "drain-changed-initial-0001", { capability: withCapability(API_ONLY) })
      yield* legacyKey(w, who, "agent", "00000000000000000000abcd")
      collect(yield* read(w, "drain-changed-final-0001", { capability: withCapability(API_ONLY), phase: "final" }), ["incoming-proof-changed"])
    }))

  it.scoped("the GitHub binding blockers", () =>
    Effect.gen(function* () {
      // One stack with a binding of every broken kind next to the good one.
      const w = yield* world()
      yield* exampleBinding(w)
      const tenant = TenantId.make("example")
      const owner = AccountId.make("acct-example")
      yield* w.connectors.addConnection({ id: id("conn-personal-1"), tenant, kind: "personal-mcp", owner }, by)
      yield* w.connectors.acquireLease({ endpoint: id("endpoint-1"), holder: "delivery-7", ttl: Duration.hours(1) }, by)
      // A connection whose registration has not finished, and so has no endpoint yet.
      yield* w.connectors.addConnection({ id: id("conn-2"), tenant, kind: "broker", owner }, by)
      yield* w.connectors.startBotRegistration({ id: id("reg-2"), connection: id("conn-2"), appId: 1001 }, by)
      // A second, complete binding whose registration row went missing, one of another transport, a removal left
      // half done and an archived endpoint of another transport: rows the writers never leave like this.
      yield* w.connectors.addConnection({ id: id("conn-3"), tenant, kind: "broker", owner }, by)
      yield* w.connectors.startBotRegistration({ id: id("reg-3"), connection: id("conn-3"), appId: 1001 }, by)
      yield* w.connectors.completeBotRegistration({ id: id("reg-3"), installationId: 3003 }, by)
      for (const n of ["3", "4", "5", "6"]) {
        yield* w.connectors.addEndpoint({ id: id(`endpoint-${n}`), channel: id(`channel-${n}`), connection: id("conn-3"), registration: id("reg-3") }, by)
      }
      yield* w.sql`DELETE FROM idle_wake_github_bot_registrations WHERE id = 'reg-3'`
      yield* w.sql`UPDATE idle_wake_github_endpoints SET registration_id = 'reg-1', connection_id = 'conn-1' WHERE id IN ('endpoint-4', 'endpoint-5', 'endpoint-6')`
      yield* w.sql`UPDATE idle_wake_channel_connections SET transport = 'slack' WHERE id = 'channel-4'`
      yield* w.connectors.removeEndpoint(id("endpoint-5"), by)
      yield* w.sql`UPDATE idle_wake_github_endpoints SET credential_ref = 'vault:github-endpoint/endpoint-5' WHERE id = 'endpoint-5'`
      yield* w.connectors.removeEndpoint(id("endpoint-6"), by)
      yield* w.sql`UPDATE idle_wake_github_endpoints SET transport = 'slack' WHERE id = 'endpoint-6'`
      const report = yield* read(w, "drain-github-0001", { capability: withCapability(BROKER_ONLY) })
      collect(report, [
        "github-binding-missing",
        "github-binding-unsettled",
        "github-binding-unsupported",
        "github-endpoint-leased",
        "github-removal-incomplete",
        "archived-transport-retained",
        "github-personal-mcp"
      ])

      const foreign = yield* world()
      yield* exampleBinding(foreign)
      yield* foreign.connectors.enrollInstance(id("connector-2"), by)
      collect(yield* read(foreign, "drain-github-foreign-0001", { capability: withCapability(BROKER_ONLY) }), ["github-binding-foreign"])

      const missing = yield* world()
      yield* exampleBinding(missing)
      yield* missing.sql`UPDATE idle_wake_connector_instances SET state = 'retired', retired_at = now()`
      collect(yield* read(missing, "drain-github-missing-0001", { capability: withCapability(BROKER_ONLY) }), ["github-connector-missing"])

      const overflow = yield* world()
      yield* exampleBinding(overflow)
      yield* overflow.sql`
        INSERT INTO idle_wake_github_endpoints (id, tenant_id, transport, connector_instance_id, connection_id, registration_id, channel_connection_id, generation, created_at)
        SELECT 'bulk-' || n, 'example', 'github', 'connector-1', 'conn-1', 'reg-1', 'bulk-channel-' || n, 1, now()
        FROM generate_series(1, 1000) AS n`
      collect(yield* read(overflow, "drain-github-overflow-0001", { capability: withCapability(BROKER_ONLY) }), ["github-binding-overflow"])
    }))

  it.scoped("the local-work probe's blockers and pending work", () =>
    Effect.gen(function* () {
      const w = yield* world()
      const [registry] = Context.get(w.context, RuntimeRegistries)
      yield* registry!.begin("sandbox-1", "agent-runner")
      for (const name of ["sandbox-2", "sandbox-3", "sandbox-4"]) {
        yield* registry!.begin(name, "agent-runner")
        yield* registry!.ready(name)
      }
      yield* Effect.exit(registry!.retire("sandbox-2", "agent-runner", Effect.fail("stuck")))
      yield* Effect.exit(registry!.shutdown((runtime) => (runtime.id === "sandbox-3" ? Effect.fail("stuck") : Effect.void)))
      const stopping = yield* Deferred.make<void>()
      yield* registry!.begin("sandbox-5", "agent-runner")
      yield* registry!.ready("sandbox-5")
      const retiring = yield* Effect.fork(registry!.retire("sandbox-5", "agent-runner", Deferred.await(stopping)))
      yield* Effect.yieldNow()
      yield* w.workers.register("outbox-delivery")
      yield* w.workers.markFailed("outbox-delivery")
      yield* atFixedTime(w.activity.observe({ _tag: "ApiKey", tenant: "example", account: "a", keyId: "k", kind: "agent", permissions: [] } as never, 200))
      yield* w.gate.admit
      w.switches.pending.add("outbox")
      w.switches.pending.add("team-applications")
      const report = yield* read(w, "drain-local-0001", { capability: withCapability(BOTH) })
      collect(report, [
        "runtime-initializing",
        "runtime-retiring",
        "runtime-retirement-failed",
        "runtime-failed",
        "service-shutdown-failed",
        "local-api-activity",
        "requests-in-flight",
        "work-pending"
      ])
      yield* Deferred.succeed(stopping, undefined)
      yield* Fiber.join(retiring)
      yield* w.gate.leave
    }))

  it("every blocker code was produced, and the page shows each report and each blocker as produced", () => {
    expect([...blockerExamples.keys()].sort()).toEqual([...BlockerCodeSchema.literals].sort())
    expect(BLOCKER_ROWS.map((row) => row.code).sort()).toEqual([...BlockerCodeSchema.literals].sort())
    const cell = (text: string) => text.replaceAll("|", "\\|")
    produced.set(
      "blockers-table",
      "| code | transport | example (from a real report) | why |\n|---|---|---|---|\n" +
        BLOCKER_ROWS.map((row) =>
          `| \`${row.code}\` | ${row.transport === "" ? "" : `\`${row.transport}\``} | \`${cell(JSON.stringify(blockerExamples.get(row.code)))}\` | ${cell(row.reason)} |`
        ).join("\n") + "\n" +
        TRANSPORTS.filter((transport) => transport.blocker === null)
          .map((transport) => `| (none: passive) | \`${transport.name}\` | never blocks | ${cell(transport.reason)} |`)
          .join("\n") + "\n"
    )
    for (const name of ["report-both", "report-nothing-configured", "report-tenant-api", "report-github-broker", "report-blocked"]) {
      const report = JSON.parse(produced.get(name)!.split("\n").slice(1, -2).join("\n"))
      expect(Schema.decodeUnknownEither(DrainReport, { onExcessProperty: "error" })(report)._tag).toBe("Right")
    }
    if (writing) {
      let text = page
      for (const [name, content] of produced) {
        const pattern = new RegExp(`<!-- begin ${name} -->\\n[\\s\\S]*?<!-- end ${name} -->`)
        if (!pattern.test(text)) throw new Error(`docs/idle-wake.md has no region ${name}`)
        text = text.replace(pattern, () => `<!-- begin ${name} -->\n${content}<!-- end ${name} -->`)
      }
      writeFileSync(pagePath, text)
      return
    }
    for (const [name, content] of produced) expect(region(name), name).toBe(content)
  })
})
