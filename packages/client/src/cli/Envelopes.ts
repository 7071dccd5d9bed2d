import { Args, Command, Options } from "@effect/cli"
import { FileSystem } from "@effect/platform"
import { type Envelope, KeyId } from "@delivery/signer"
import { Console, Effect, ParseResult, Schema } from "effect"
import { makeProducer, type Sent } from "../Producer.ts"
import { baseUrl, deviceToken, signingKey } from "./Environment.ts"
import { classifyHere, type ExitCode, type Failure, report, Reported, UsageError } from "./Failure.ts"
import { group } from "./Group.ts"
import { JsonOutput } from "./Output.ts"

// `envelopes send`: events from a file, signed with the tenant's key and sent with the device credential by the
// client's producer, which sends again after 429, 503 and lost connections. Every event is checked and signed
// before the first is sent, so a bad file sends nothing.

const file = Args.file({ name: "file", exists: "yes" }).pipe(Args.withDescription("one event or a JSON array of events"))
const keyId = Options.text("key-id").pipe(
  Options.withSchema(KeyId),
  Options.withDefault(KeyId.make("k1")),
  Options.withDescription("the registered key id DELIVERY_SIGNING_KEY belongs to")
)
const keepGoing = Options.boolean("keep-going").pipe(
  Options.withDescription("after a refused event, send the rest (the exit code is still the worst one seen)")
)

/** The producer's `EventToSend`, closed: a misspelt member is refused rather than silently left out. */
const Event = Schema.Struct({
  route: Schema.Struct({ tenant: Schema.String, project: Schema.String, producer: Schema.String }),
  sequence: Schema.Number,
  metadata: Schema.Struct({
    kind: Schema.String,
    subject: Schema.String,
    attributes: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String }))
  }),
  eventId: Schema.optional(Schema.String),
  idempotencyKey: Schema.optional(Schema.String),
  createdAt: Schema.optional(Schema.String)
})
const EventsFile = Schema.parseJson(Schema.Union(Event, Schema.Array(Event)))
const decodeEvents = Schema.decodeUnknown(EventsFile, { onExcessProperty: "error", errors: "first" })

const Delivered = Schema.Struct({
  outcome: Schema.Literal("accepted", "duplicate"),
  eventId: Schema.String,
  idempotencyKey: Schema.String,
  sequence: Schema.Number,
  eventIdentity: Schema.String,
  cursor: Schema.Number,
  attempts: Schema.Number,
  correlationId: Schema.String
})
const NotDelivered = Schema.Struct({
  outcome: Schema.Literal("refused", "unavailable", "unexpected", "usage"),
  eventId: Schema.String,
  idempotencyKey: Schema.String,
  sequence: Schema.Number,
  exitCode: Schema.Number,
  _tag: Schema.String,
  reason: Schema.optional(Schema.String),
  status: Schema.optional(Schema.Number),
  correlationId: Schema.optional(Schema.String)
})
const Outcomes = Schema.Array(Schema.Union(Delivered, NotDelivered))
type Outcome = typeof Outcomes.Type[number]

/** Which exit code wins when events ended differently: an unexpected failure over unavailability over a refusal. */
const severity: Record<ExitCode, number> = { 0: 0, 2: 1, 3: 2, 4: 3, 1: 4, 130: 5 }

const readEvents = (path: string) =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const text = yield* fs.readFileString(path).pipe(Effect.mapError(() => new UsageError({ message: `cannot read ${path}` })))
    const decoded = yield* decodeEvents(text).pipe(
      Effect.mapError((error) => {
        const [issue] = ParseResult.ArrayFormatter.formatErrorSync(error)
        const at = issue === undefined || issue.path.length === 0 ? "" : ` at ${issue.path.join(".")}`
        return new UsageError({ message: `${path} is not an event or an array of events${at}: ${issue?.message ?? "invalid"}` })
      })
    )
    const events = Array.isArray(decoded) ? decoded : [decoded]
    if (events.length === 0) return yield* new UsageError({ message: `${path} holds no event` })
    return events as ReadonlyArray<typeof Event.Type>
  })

const delivered = (sent: Sent): Outcome => ({
  outcome: sent.outcome,
  eventId: sent.envelope.eventId,
  idempotencyKey: sent.envelope.idempotencyKey,
  sequence: sent.sequence,
  eventIdentity: sent.eventIdentity,
  cursor: sent.cursor,
  attempts: sent.attempts,
  correlationId: sent.correlationId
})

const notDelivered = (envelope: Envelope, f: Failure): Outcome => ({
  outcome: f.kind,
  eventId: envelope.eventId,
  idempotencyKey: envelope.idempotencyKey,
  sequence: envelope.sequence,
  exitCode: f.exitCode,
  _tag: f.tag,
  ...(f.reason === undefined ? {} : { reason: f.reason }),
  ...(f.status === undefined ? {} : { status: f.status }),
  ...(f.correlationId === undefined ? {} : { correlationId: f.correlationId })
})

const send = Command.make("send", { file, keyId, keepGoing }, ({ file, keepGoing, keyId }) =>
  Effect.gen(function* () {
    const events = yield* readEvents(file)
    const url = yield* baseUrl
    const token = yield* deviceToken
    const privateKey = yield* signingKey
    const producer = yield* makeProducer({ baseUrl: url, token, key: { keyId, privateKey } })
    const envelopes = yield* Effect.forEach(events, (event, index) =>
      Effect.mapError(producer.sign(event), (invalid) =>
        new UsageError({ message: `event ${index + 1} of ${file}: ${invalid.reason} (${invalid.problem} at ${invalid.at})` })))

    const json = yield* JsonOutput
    const outcomes: Array<Outcome> = []
    let worst: ExitCode = 0
    for (const [index, envelope] of envelopes.entries()) {
      const result = yield* Effect.either(producer.sendSigned(envelope))
      if (result._tag === "Right") {
        outcomes.push(delivered(result.right))
        const { route } = envelope
        if (!json) {
          yield* Console.log(
            `${result.right.outcome} ${route.tenant}/${route.project}/${route.producer} sequence ${envelope.sequence} (event ${envelope.eventId}, cursor ${result.right.cursor})`
          )
        }
      } else {
        const f = yield* classifyHere(result.left)
        yield* report(f)
        outcomes.push(notDelivered(envelope, f))
        if (severity[f.exitCode] > severity[worst]) worst = f.exitCode
      }
      // Progress is for people watching a long run: stderr, so stdout stays one document.
      if (envelopes.length > 1) yield* Console.error(`sent ${index + 1}/${envelopes.length}`)
      if (result._tag === "Left" && !(keepGoing && outcomes[outcomes.length - 1]!.outcome === "refused")) break
    }
    if (json) yield* Console.log(JSON.stringify(yield* Schema.encode(Outcomes)(outcomes)))
    if (worst !== 0) return yield* new Reported({ exitCode: worst })
  })).pipe(Command.withDescription("Sign events with DELIVERY_SIGNING_KEY and send them with DELIVERY_DEVICE_TOKEN"))

export const envelopes = group("envelopes", "Send signed envelopes to the inbox", [send])
