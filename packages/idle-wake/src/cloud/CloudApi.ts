import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { OperatorAuthentication } from "@delivery/identity"
import { Schema } from "effect"
import { Audience, Blocker } from "../Protocol.ts"
import { StackId } from "../Domain.ts"
import { CloudConflict, CloudNotFound, CloudProfile, CloudUnavailable, StackState } from "./CloudDomain.ts"
import { isReportKey } from "./CloudStacks.ts"

// The cloud role's operator routes (spec 001, cloud side): stacks, their hosts, the sleep operation, wakes and
// recovery, and the admission counters. Views carry states and counts, never a receipt's fingerprints or a key.

const closed = { parseOptions: { onExcessProperty: "error" } } as const

const ReportKey = Schema.String.pipe(
  Schema.filter(isReportKey, { message: () => "expected keyId:publicKey, the raw 32-byte Ed25519 key in unpadded base64url" })
)

export const RegisterStack = Schema.Struct({
  stack: StackId,
  audience: Audience,
  /** The stack's report key (IDLE_WAKE_REPORT_KEY's public half): `keyId:publicKey`. */
  reportKey: ReportKey,
  /** The incoming-wake profiles each sleep cycle asks for. */
  profiles: Schema.Array(CloudProfile).pipe(Schema.minItems(1), Schema.maxItems(2))
}).annotations({ ...closed, identifier: "RegisterCloudStack" })

export const HostName = Schema.String.pipe(
  Schema.pattern(/^[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?$/, { message: () => "expected a lower-case DNS name without port" })
)

export const AddHost = Schema.Struct({ host: HostName }).annotations({ ...closed, identifier: "AddCloudHost" })
export const SetRecoveryHold = Schema.Struct({ hold: Schema.Boolean }).annotations({ ...closed, identifier: "SetRecoveryHold" })

export const ReceiptCounts = Schema.Struct({
  storedAt: Schema.String,
  /** Projected keys in the receipt (counts only). */
  keys: Schema.Int,
  connectorBindings: Schema.Int
}).annotations({ identifier: "CloudReceiptCounts" })

export const StackView = Schema.Struct({
  stack: Schema.String,
  state: StackState,
  profiles: Schema.Array(Schema.String),
  upstream: Schema.NullOr(Schema.String),
  recoveryHold: Schema.Boolean,
  receipt: Schema.NullOr(ReceiptCounts),
  stateChangedAt: Schema.String
}).annotations({ identifier: "CloudStackView" })

export const StackDetail = Schema.Struct({
  ...StackView.fields,
  hosts: Schema.Array(Schema.String),
  audit: Schema.Array(Schema.Struct({
    action: Schema.String,
    detail: Schema.Unknown,
    correlationId: Schema.NullOr(Schema.String),
    at: Schema.String
  }))
}).annotations({ identifier: "CloudStackDetail" })

export const StackList = Schema.Struct({
  stacks: Schema.Array(StackView),
  /** Stacks and stored receipts by state. */
  counts: Schema.Array(Schema.Struct({ state: Schema.String, stacks: Schema.Int, receipts: Schema.Int }))
}).annotations({ identifier: "CloudStackList" })

export const HostChange = Schema.Struct({
  host: Schema.String,
  stack: Schema.String,
  outcome: Schema.Literal("added", "unchanged", "removed")
}).annotations({ identifier: "CloudHostChange" })

export const SleepResult = Schema.Union(
  Schema.Struct({ outcome: Schema.Literal("asleep") }),
  Schema.Struct({ outcome: Schema.Literal("refused"), code: Schema.String, blockers: Schema.Array(Blocker) }),
  Schema.Struct({ outcome: Schema.Literal("stop-uncertain"), code: Schema.String }),
  Schema.Struct({ outcome: Schema.Literal("not-awake"), state: Schema.String }),
  Schema.Struct({ outcome: Schema.Literal("lease-lost") })
).annotations({ identifier: "CloudSleepResult" })

export const StoppedView = Schema.Struct({ ...StackView.fields, stop: Schema.String }).annotations({ identifier: "CloudStackStopped" })

export const AdmissionView = Schema.Struct({
  waiting: Schema.Int,
  waitingStacks: Schema.Int,
  preparations: Schema.Int,
  admitted: Schema.Int,
  wakesStarted: Schema.Int,
  /** Refusals of this process since it started, by reason. */
  refusals: Schema.Record({ key: Schema.String, value: Schema.Int })
}).annotations({ identifier: "CloudAdmission" })

const StackPath = Schema.Struct({ stack: StackId })
const HostPath = Schema.Struct({ stack: StackId, host: HostName })
const base = "/operator/cloud/stacks"
const audited = "Each change and its `idle_wake_cloud_audit` row commit in one statement; a refusal writes nothing."

const stackRoute = <N extends string>(name: N, path: string) =>
  HttpApiEndpoint.post(name, `${base}/:stack${path}`)
    .setPath(StackPath)
    .addError(CloudNotFound, { status: 404 })
    .addError(CloudConflict, { status: 409 })

/** The cloud role's operator routes, behind `OperatorAuthentication`; served by ROLE=cloud processes only. */
export class IdleWakeCloudApi extends HttpApiGroup.make("idleWakeCloud")
  .add(
    HttpApiEndpoint.get("listStacks", base)
      .addSuccess(StackList)
      .annotate(OpenApi.Summary, "Stacks with their states, and stacks and stored receipts counted by state")
  )
  .add(
    HttpApiEndpoint.post("registerStack", base)
      .setPayload(RegisterStack)
      .addSuccess(StackView, { status: 201 })
      .addError(CloudConflict, { status: 409 })
      .annotate(OpenApi.Summary, "Register a stack (its compute is started if it was not running; the stack is awake)")
      .annotate(OpenApi.Description, `409 \`stack-exists\`. ${audited}`)
  )
  .add(
    HttpApiEndpoint.get("getStack", `${base}/:stack`)
      .setPath(StackPath)
      .addSuccess(StackDetail)
      .addError(CloudNotFound, { status: 404 })
      .annotate(OpenApi.Summary, "One stack: state, receipt counts, hosts and its latest audit rows")
  )
  .add(
    HttpApiEndpoint.post("addHost", `${base}/:stack/hosts`)
      .setPath(StackPath)
      .setPayload(AddHost)
      .addSuccess(HostChange, { status: 201 })
      .addError(CloudNotFound, { status: 404 })
      .addError(CloudConflict, { status: 409 })
      .annotate(OpenApi.Summary, "Add a host to the verified host registry: the proxy serves it for this stack only")
      .annotate(OpenApi.Description, `409 \`host-taken\` when another stack has it. ${audited}`)
  )
  .add(
    HttpApiEndpoint.del("removeHost", `${base}/:stack/hosts/:host`)
      .setPath(HostPath)
      .addSuccess(HostChange)
      .addError(CloudNotFound, { status: 404 })
      .annotate(OpenApi.Summary, "Remove a host from the registry")
  )
  .add(
    stackRoute("sleep", "/sleep")
      .addSuccess(SleepResult)
      .annotate(OpenApi.Summary, "Run one sleep cycle: initial and final drain reads, the proof comparison, the receipt, the stop")
  )
  .add(stackRoute("wake", "/wake").addSuccess(StackView).annotate(OpenApi.Summary, "Wake an asleep stack (the coalesced, fenced wake)"))
  .add(
    stackRoute("recover", "/recover")
      .addSuccess(StackView)
      .annotate(OpenApi.Summary, "Recover an uncertain stop: asleep (receipt kept) when compute is down, awake (receipt cleared) when it runs")
  )
  .add(stackRoute("suspend", "/suspend").addSuccess(StoppedView).annotate(OpenApi.Summary, "Suspend: no wake, receipt cleared, compute stopped"))
  .add(stackRoute("resume", "/resume").addSuccess(StackView).annotate(OpenApi.Summary, "Resume a suspended stack: compute started, then awake"))
  .add(stackRoute("archive", "/archive").addSuccess(StoppedView).annotate(OpenApi.Summary, "Archive: receipt cleared, hosts removed, compute stopped; for good"))
  .add(
    stackRoute("recoveryHold", "/recovery-hold")
      .setPayload(SetRecoveryHold)
      .addSuccess(StackView)
      .annotate(OpenApi.Summary, "Set or release a deployment recovery hold: no wake while it is set")
  )
  .add(
    HttpApiEndpoint.get("connectorEvents", "/operator/cloud/connector-events")
      .addSuccess(Schema.Struct({
        states: Schema.Array(Schema.Struct({ state: Schema.String, events: Schema.Int, oldestSeconds: Schema.NullOr(Schema.Int) }))
      }).annotations({ identifier: "CloudConnectorEvents" }))
      .annotate(OpenApi.Summary, "The connector event queue: events by state and the age of the oldest of each")
  )
  .add(
    HttpApiEndpoint.get("admission", "/operator/cloud/admission")
      .addSuccess(AdmissionView)
      .annotate(OpenApi.Summary, "This process's admission: held requests, pending preparations, wakes and refusals by reason")
  )
  .addError(CloudUnavailable, { status: 503 })
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Title, "Idle wake, cloud (operator)")
{}
