import { Command } from "@effect/cli"
import { Effect, Option } from "effect"
import { answer } from "./Answers.ts"
import { page, tenant } from "./Arguments.ts"
import { operatorClient } from "./Environment.ts"
import { group } from "./Group.ts"
import { nextPage, table, time } from "./Output.ts"

const create = Command.make("create", { tenant }, ({ tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.provisioning.createTenant({ payload: { id: tenant } }).pipe(
      Effect.flatMap(answer("provisioning", "createTenant", (created) => [`tenant ${created.tenant.id} created`]))
    )
  })).pipe(Command.withDescription("Create a tenant"))

const list = Command.make("list", page, ({ after, limit }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.provisioning.listTenants({ urlParams: { limit: Option.getOrUndefined(limit), after: Option.getOrUndefined(after) } }).pipe(
      Effect.flatMap(answer("provisioning", "listTenants", (tenants) => [
        ...table(["tenant", "created"], tenants.items.map((item) => [item.id, time(item.createdAt)])),
        ...nextPage("--after", tenants.next)
      ]))
    )
  })).pipe(Command.withDescription("List tenants, by id"))

export const tenants = group("tenants", "Create and list tenants", [create, list])
