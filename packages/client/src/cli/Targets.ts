import { Args, Command } from "@effect/cli"
import { Effect } from "effect"
import { answer } from "./Answers.ts"
import { project, tenant } from "./Arguments.ts"
import { operatorClient } from "./Environment.ts"
import { group } from "./Group.ts"
import { time } from "./Output.ts"

const url = Args.text({ name: "url" }).pipe(Args.withDescription("https anywhere, http only to loopback; no credentials, query or fragment"))

const set = Command.make("set", { tenant, project, url }, ({ project, tenant, url }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.outboxOperator.registerTarget({ path: { tenant, project }, payload: { endpoint: url } }).pipe(
      Effect.flatMap(answer("outboxOperator", "registerTarget", (target) => [`target of ${target.tenant}/${target.project}: ${target.endpoint}`]))
    )
  })).pipe(Command.withDescription("Register or replace the delivery target of a tenant/project"))

const get = Command.make("get", { tenant, project }, ({ project, tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.outboxOperator.target({ path: { tenant, project } }).pipe(
      Effect.flatMap(answer("outboxOperator", "target", (target) => [
        `target of ${target.tenant}/${target.project}: ${target.endpoint} (updated ${time(target.updatedAt)})`
      ]))
    )
  })).pipe(Command.withDescription("The delivery target of a tenant/project"))

export const targets = group("targets", "Set and read delivery targets", [set, get])
