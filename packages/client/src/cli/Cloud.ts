import { Args, Command, Options } from "@effect/cli"
import { HttpApi, HttpApiClient, type HttpApiEndpoint, type HttpApiGroup, HttpClient, HttpClientRequest } from "@effect/platform"
import { Api } from "@delivery/backend"
import { IdleWakeCloudApi, StackId } from "@delivery/idle-wake"
import { Effect, Option, Redacted, Schema, SchemaAST } from "effect"
import { baseUrl, operatorToken } from "./Environment.ts"
import { ExitCode, type Failure, report, Reported } from "./Failure.ts"
import { group } from "./Group.ts"
import { show, table } from "./Output.ts"
import { statusOf } from "./Statuses.ts"

// The cloud role's operator routes (spec 001, cloud side; docs/operations.md "Command line"): stacks, their hosts,
// sleep, wake, recovery and the admission counters. DELIVERY_URL names the ROLE=cloud process. The views carry
// states and counts only, never a receipt's fingerprints or a key, so neither can print here.

/**
 * What a ROLE=cloud process serves the operator: the cloud group, and the refusals of the HTTP edge as the main
 * `Api` declares them (the cloud process has the same edge), so the typed client decodes both.
 */
const CloudOperatorApi = HttpApi.make("delivery").add(IdleWakeCloudApi).addError(Api.errorSchema)

const cloudClient = Effect.gen(function* () {
  const url = yield* baseUrl
  const token = yield* operatorToken
  return yield* HttpApiClient.make(CloudOperatorApi, {
    baseUrl: url,
    transformClient: HttpClient.mapRequest((request) => HttpClientRequest.bearerToken(request, Redacted.value(token)))
  })
})

type Endpoints = Effect.Effect.Success<typeof cloudClient>["idleWakeCloud"]
type Endpoint = HttpApiGroup.HttpApiGroup.Endpoints<typeof IdleWakeCloudApi>
type Name = Endpoint["name"]
type Answer<N extends Name> = HttpApiEndpoint.HttpApiEndpoint.Success<Extract<Endpoint, { readonly name: N }>>
type Payload<N extends Name> = HttpApiEndpoint.HttpApiEndpoint.Payload<Extract<Endpoint, { readonly name: N }>>

const endpoints = (IdleWakeCloudApi as unknown as HttpApiGroup.HttpApiGroup.AnyWithProps).endpoints

/** One member of an endpoint's payload schema, so an argument is checked by the rule the route applies. */
const payloadField = <N extends Name, K extends keyof Payload<N> & string, I>(name: N, key: K) => {
  const payload = Option.getOrUndefined(endpoints[name]!.payloadSchema)
  const property = payload === undefined ? undefined : SchemaAST.getPropertySignatures(payload.ast).find((p) => p.name === key)
  if (property === undefined) throw new TypeError(`the ${name} payload has no member ${key}`)
  return Schema.make<Payload<N>[K], I>(property.type)
}

// The statuses the cloud group declares for its own refusals (the shared classification knows the edge's), read
// from the group itself so the exit code follows the declaration.
let statuses: ReadonlyMap<string, number> | undefined

const declaredStatuses = (): ReadonlyMap<string, number> => {
  const found = new Map<string, number>()
  HttpApi.reflect(HttpApi.make("cloud").add(IdleWakeCloudApi), {
    onGroup: () => {},
    onEndpoint: ({ errors }) => {
      for (const [status, { ast }] of errors) {
        if (Option.isNone(ast)) continue
        for (const member of SchemaAST.isUnion(ast.value) ? ast.value.types : [ast.value]) {
          const from = SchemaAST.isTransformation(member) ? member.from : member
          const tag = SchemaAST.getPropertySignatures(from).find((p) => p.name === "_tag")?.type
          if (tag !== undefined && SchemaAST.isLiteral(tag)) found.set(String(tag.literal), status)
        }
      }
    }
  })
  return found
}

/**
 * CloudNotFound, CloudConflict and CloudUnavailable are not in the main `Api`, so they are reported here with the
 * status the cloud group declares: exit 3 for a 4xx, 4 for 429 and 5xx, with the reason, the correlation id and
 * the refusal's other stable members (a conflict's `state`). Everything else goes on to the shared classification.
 */
const cloudRefusal = <E extends { readonly _tag: string }>(error: E): Effect.Effect<never, E | Reported> => {
  const status = (statuses ??= declaredStatuses()).get(error._tag)
  if (status === undefined || Option.isSome(statusOf(error._tag))) return Effect.fail(error)
  const members = Object.entries(error).filter(([key, value]) =>
    !["_tag", "reason", "correlationId"].includes(key) && (typeof value === "string" || typeof value === "number" || typeof value === "boolean"))
  const kind = status === 429 || status >= 500 ? "unavailable" : "refused"
  const text = (key: string) => {
    const value = (error as Record<string, unknown>)[key]
    return typeof value === "string" ? value : undefined
  }
  const failure: Failure = {
    kind,
    exitCode: kind === "refused" ? ExitCode.refused : ExitCode.unavailable,
    tag: error._tag,
    reason: text("reason"),
    status,
    correlationId: text("correlationId"),
    details: members.length === 0 ? undefined : Object.fromEntries(members) as Record<string, string | number | boolean>
  }
  return Effect.zipRight(report(failure), Effect.fail(new Reported({ exitCode: failure.exitCode })))
}

/** Calls one cloud route and prints its answer (see `show`): with `--json` re-encoded by the route's own schema. */
const run = <N extends Name, E extends { readonly _tag: string }>(
  name: N,
  request: (client: Endpoints) => Effect.Effect<Answer<N>, E>,
  human: (value: Answer<N>) => ReadonlyArray<string>
) =>
  Effect.gen(function* () {
    const client = yield* cloudClient
    const value = yield* Effect.catchAll(request(client.idleWakeCloud), cloudRefusal)
    yield* show(endpoints[name]!.successSchema as Schema.Schema<Answer<N>, unknown>, value, human)
  })

type View = Answer<"wake">

const receiptText = (receipt: View["receipt"]) =>
  receipt === null ? "none" : `stored ${receipt.storedAt}, ${receipt.keys} keys, ${receipt.connectorBindings} connector bindings`

const viewLines = (view: View): ReadonlyArray<string> => [
  `stack ${view.stack}: ${view.state} since ${view.stateChangedAt}`,
  `profiles: ${view.profiles.join(", ")}`,
  `upstream: ${view.upstream ?? "-"}`,
  `recovery hold: ${view.recoveryHold ? "on" : "off"}`,
  `receipt: ${receiptText(view.receipt)}`
]

const stoppedLines = (view: Answer<"suspend">): ReadonlyArray<string> => [...viewLines(view), `compute stop: ${view.stop}`]

/** An audit row's detail holds stable codes and attempt numbers; only its scalar members are printed. */
const detailText = (detail: unknown): string => {
  if (typeof detail !== "object" || detail === null) return "-"
  const parts = Object.entries(detail)
    .filter(([, value]) => typeof value === "string" || typeof value === "number" || typeof value === "boolean")
    .map(([key, value]) => `${key}=${value}`)
  return parts.length === 0 ? "-" : parts.join(" ")
}

const stack = Args.text({ name: "stack" }).pipe(Args.withSchema(StackId), Args.withDescription("stack id"))
const host = Args.text({ name: "host" }).pipe(
  Args.withSchema(payloadField<"addHost", "host", string>("addHost", "host")),
  Args.withDescription("a lower-case DNS name without port")
)
const audience = Options.text("audience").pipe(
  Options.withSchema(payloadField<"registerStack", "audience", string>("registerStack", "audience")),
  Options.withDescription("the stack's drain audience (its IDLE_WAKE_AUDIENCE)")
)
const reportKey = Options.text("report-key").pipe(
  Options.withSchema(payloadField<"registerStack", "reportKey", string>("registerStack", "reportKey")),
  Options.withDescription("the public half of the stack's IDLE_WAKE_REPORT_KEY: keyId:publicKey (raw Ed25519 key, unpadded base64url)")
)
const profiles = Options.text("profile").pipe(
  Options.repeated,
  Options.withSchema(payloadField<"registerStack", "profiles", Array<string>>("registerStack", "profiles")),
  Options.withDescription("tenant-api-http-v2 or github-broker-events-v1, the wake profiles each sleep asks for (repeat for both)")
)

const stacks = Command.make("stacks", {}, () =>
  run("listStacks", (client) => client.listStacks(), ({ counts, stacks }) => [
    ...table(
      ["stack", "state", "hold", "keys", "bindings", "profiles", "since"],
      stacks.map((view) => [
        view.stack,
        view.state,
        view.recoveryHold ? "on" : "off",
        view.receipt === null ? "-" : String(view.receipt.keys),
        view.receipt === null ? "-" : String(view.receipt.connectorBindings),
        view.profiles.join(","),
        view.stateChangedAt
      ])
    ),
    "by state:",
    ...table(["state", "stacks", "receipts"], counts.map((row) => [row.state, String(row.stacks), String(row.receipts)]))
  ])).pipe(Command.withDescription("Stacks with their states, recovery holds and receipt counts; stacks and receipts counted by state"))

const stackDetail = Command.make("stack", { stack }, ({ stack }) =>
  run("getStack", (client) => client.getStack({ path: { stack } }), (detail) => [
    ...viewLines(detail),
    `hosts: ${detail.hosts.length === 0 ? "(none)" : detail.hosts.join(", ")}`,
    ...table(
      ["at", "action", "correlation id", "detail"],
      detail.audit.map((entry) => [entry.at, entry.action, entry.correlationId ?? "-", detailText(entry.detail)])
    )
  ])).pipe(Command.withDescription("One stack: state, profiles, upstream, recovery hold, receipt counts, hosts and its latest audit rows"))

const register = Command.make("register", { stack, audience, reportKey, profiles }, ({ audience, profiles, reportKey, stack }) =>
  run("registerStack", (client) => client.registerStack({ payload: { stack, audience, reportKey, profiles } }), viewLines)).pipe(
    Command.withDescription("Register a stack: its compute is started and it is awake")
  )

const hostAdd = Command.make("add", { stack, host }, ({ host, stack }) =>
  run("addHost", (client) => client.addHost({ path: { stack }, payload: { host } }), (change) => [
    `host ${change.host} ${change.outcome} (stack ${change.stack})`
  ])).pipe(Command.withDescription("Add a host to the registry: the wake proxy serves it for this stack only"))

const hostRemove = Command.make("remove", { stack, host }, ({ host, stack }) =>
  run("removeHost", (client) => client.removeHost({ path: { stack, host } }), (change) => [
    `host ${change.host} ${change.outcome} (stack ${change.stack})`
  ])).pipe(Command.withDescription("Remove a host from the registry"))

const hosts = group("host", "A stack's hosts in the wake proxy's registry", [hostAdd, hostRemove])

const sleep = Command.make("sleep", { stack }, ({ stack }) =>
  run("sleep", (client) => client.sleep({ path: { stack } }), (result) => {
    switch (result.outcome) {
      case "asleep":
        return ["asleep"]
      case "refused":
        return [
          `refused: ${result.code}`,
          ...table(
            ["blocker", "count", "ids"],
            result.blockers.map((blocker) => [blocker.code, blocker.count === undefined ? "-" : String(blocker.count), blocker.ids?.join(",") || "-"])
          )
        ]
      case "stop-uncertain":
        return [`stop-uncertain: ${result.code} (the receipt is kept: see cloud recover)`]
      case "not-awake":
        return [`not-awake: the stack is ${result.state}`]
      case "lease-lost":
        return ["lease-lost: another operation moved the stack first"]
    }
  })).pipe(Command.withDescription("Run one sleep cycle: drain reads, the proof comparison, the receipt, the stop; prints its outcome"))

const stackCommand = (name: "wake" | "recover" | "resume", description: string) =>
  Command.make(name, { stack }, ({ stack }) => run(name, (client) => client[name]({ path: { stack } }), viewLines)).pipe(
    Command.withDescription(description)
  )

const stopCommand = (name: "suspend" | "archive", description: string) =>
  Command.make(name, { stack }, ({ stack }) => run(name, (client) => client[name]({ path: { stack } }), stoppedLines)).pipe(
    Command.withDescription(description)
  )

const holdCommand = (name: string, hold: boolean, description: string) =>
  Command.make(name, { stack }, ({ stack }) =>
    run("recoveryHold", (client) => client.recoveryHold({ path: { stack }, payload: { hold } }), viewLines)).pipe(
      Command.withDescription(description)
    )

const admission = Command.make("admission", {}, () =>
  run("admission", (client) => client.admission(), (view) => [
    `waiting: ${view.waiting} requests for ${view.waitingStacks} stacks`,
    `preparations: ${view.preparations}`,
    `admitted: ${view.admitted}`,
    `wakes started: ${view.wakesStarted}`,
    ...table(["refusal", "count"], Object.entries(view.refusals).map(([reason, count]) => [reason, String(count)]))
  ])).pipe(Command.withDescription("This cloud process's admission: held requests, pending preparations, wakes started and refusals by reason"))

export const cloud = group("cloud", "The idle-wake cloud (ROLE=cloud at DELIVERY_URL): stacks, hosts, sleep, wake, recovery and admission", [
  stacks,
  stackDetail,
  register,
  hosts,
  sleep,
  stackCommand("wake", "Wake an asleep stack (the coalesced, fenced wake)"),
  stackCommand("recover", "Recover an uncertain stop: asleep (receipt kept) when compute is down, awake (receipt cleared) when it runs"),
  stopCommand("suspend", "Suspend: no wake, receipt cleared, compute stopped"),
  stackCommand("resume", "Resume a suspended stack: compute started, then awake"),
  stopCommand("archive", "Archive: receipt cleared, hosts removed, compute stopped; for good"),
  holdCommand("hold", true, "Set a deployment recovery hold: no wake while it is set"),
  holdCommand("release", false, "Release the recovery hold"),
  admission
])
