import type { HttpApi, HttpApiEndpoint, HttpApiGroup } from "@effect/platform"
import { Api } from "@delivery/backend"
import type { Schema } from "effect"
import { show } from "./Output.ts"

// `--json` prints an answer re-encoded with the very schema the server encoded it with, taken from the same
// `Api` the typed client is derived from, so the two cannot drift apart.

type Groups = typeof Api extends HttpApi.HttpApi<string, infer G, infer _E, infer _R> ? G : never
export type GroupName = Groups["identifier"]
type Endpoint<G extends GroupName, E extends string> = Extract<HttpApiGroup.HttpApiGroup.EndpointsWithName<Groups, G>, { readonly name: E }>
export type EndpointName<G extends GroupName> = HttpApiGroup.HttpApiGroup.EndpointsWithName<Groups, G>["name"]
export type Answer<G extends GroupName, E extends string> = HttpApiEndpoint.HttpApiEndpoint.Success<Endpoint<G, E>>

/** The success schema of one endpoint (a union when it declares several successes). */
export const answerSchema = <G extends GroupName, E extends string>(group: G, endpoint: E): Schema.Schema<Answer<G, E>, unknown> =>
  (Api.groups as unknown as Record<string, HttpApiGroup.HttpApiGroup.AnyWithProps>)[group]!.endpoints[endpoint]!.successSchema as Schema.Schema<
    Answer<G, E>,
    unknown
  >

/** Prints an endpoint's answer (see `show`): `Effect.flatMap(client.group.endpoint(...), answer("group", "endpoint", lines))`. */
export const answer = <G extends GroupName, E extends EndpointName<G>>(
  group: G,
  endpoint: E,
  human: (value: Answer<G, E>) => ReadonlyArray<string>
) =>
(value: Answer<G, E>) => show(answerSchema(group, endpoint), value, human)
