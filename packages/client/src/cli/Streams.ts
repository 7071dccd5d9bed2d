import { Args, Command } from "@effect/cli"
import { Effect, Schema } from "effect"
import { answer } from "./Answers.ts"
import { producer, project, tenant } from "./Arguments.ts"
import { operatorClient } from "./Environment.ts"
import { group } from "./Group.ts"

const floor = Args.integer({ name: "floor" }).pipe(
  Args.withSchema(Schema.Int.pipe(Schema.between(0, Number.MAX_SAFE_INTEGER))),
  Args.withDescription("close sequences 1..floor (a floor is never lowered)")
)

const position = (stream: { tenant: string; project: string; producer: string; cursor: number; replayFloor: number; highSequence: number }) =>
  `stream ${stream.tenant}/${stream.project}/${stream.producer}: cursor ${stream.cursor}, replay floor ${stream.replayFloor}, high sequence ${stream.highSequence}`

const get = Command.make("get", { tenant, project, producer }, ({ producer, project, tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.inboxStreams.stream({ path: { tenant, project, producer } }).pipe(
      Effect.flatMap(answer("inboxStreams", "stream", (stream) => [position(stream)]))
    )
  })).pipe(Command.withDescription("An inbound stream's cursor, replay floor and highest retained sequence"))

const raiseFloor = Command.make("raise-floor", { tenant, project, producer, floor }, ({ floor, producer, project, tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.inboxStreams.raiseReplayFloor({ path: { tenant, project, producer }, payload: { floor } }).pipe(
      Effect.flatMap(answer("inboxStreams", "raiseReplayFloor", ({ outcome, stream }) => [`floor ${outcome}: ${position(stream)}`]))
    )
  })).pipe(Command.withDescription("Raise a stream's replay floor (never lowered)"))

export const streams = group("streams", "Read inbound streams and raise their replay floor", [get, raiseFloor])
