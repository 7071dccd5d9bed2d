import { HttpApi, HttpApiBuilder, type HttpServerRequest } from "@effect/platform"
import { JsonBodyRefused, parseBounded, requestCorrelationId } from "@delivery/core"
import { CurrentOperator, deliveryApiId, operatorActor } from "@delivery/identity"
import { Effect, Either, ParseResult, Schema } from "effect"
import { SignerApi, SigningKeyRequest, type SigningKeyView } from "./Api.ts"
import {
  AuditActor,
  type KeyActor,
  type KeyChange,
  KeyId,
  type SigningKey,
  SigningKeyNotFound,
  SigningKeyRequestInvalid,
  TenantId
} from "./Domain.ts"
import { Signer } from "./Signer.ts"

type Issue = SigningKeyRequestInvalid["issues"][number]

const invalid = (issues: ReadonlyArray<Issue>) =>
  new SigningKeyRequestInvalid({ reason: "request-invalid", issues: issues.slice(0, 8) })

const decodeId = <S extends Schema.Schema<any, string>>(schema: S, field: "tenant" | "keyId", text: string) =>
  Either.mapLeft(Schema.decodeUnknownEither(schema)(text), (): Issue => ({ field, problem: "invalid" }))

/** Stable fields and problems only: Schema's own messages may quote the submitted values. */
const issuesOf = (error: ParseResult.ParseError): Array<Issue> => {
  const issues = new Map<string, Issue>()
  for (const issue of ParseResult.ArrayFormatter.formatErrorSync(error)) {
    const member = issue.path[0]
    const found: Issue = issue._tag === "Unexpected"
      ? { field: "body", problem: "unknown-member" }
      : member === "keyId" || member === "publicKey"
      ? { field: member, problem: issue._tag === "Missing" ? "missing" : "invalid" }
      : { field: "body", problem: "invalid" }
    issues.set(`${found.field}:${found.problem}`, found)
  }
  return [...issues.values()]
}

// The body is read here rather than by the framework, so that a body that is not JSON is one more
// stable problem of the same 422. The HTTP edge's MAX_REQUEST_BODY_BYTES bounds the read before this
// runs, and core's JSON bounds come before the parse (422 JsonBodyRefused past them).
const readKeyRequest = (request: HttpServerRequest.HttpServerRequest) =>
  Effect.gen(function* () {
    const bytes = yield* Effect.orElseSucceed(Effect.map(request.arrayBuffer, (buffer) => new Uint8Array(buffer)), () => undefined)
    const json = bytes === undefined ? Either.left("json-malformed" as const) : parseBounded(bytes)
    if (Either.isLeft(json)) {
      if (json.left !== "json-malformed") return yield* JsonBodyRefused.of(json.left, yield* requestCorrelationId)
      return Either.left<Array<Issue>>([{ field: "body", problem: "not-json" }])
    }
    return Either.mapLeft(
      Schema.decodeUnknownEither(SigningKeyRequest, { errors: "all", onExcessProperty: "error" })(json.right),
      issuesOf
    )
  })

/** Path and body problems together, so one answer lists everything to fix. */
const validated = <A extends ReadonlyArray<Either.Either<any, Issue | Array<Issue>>>>(...parts: A) => {
  const issues = parts.flatMap((part) => (Either.isLeft(part) ? [part.left].flat() : []))
  return issues.length > 0
    ? Effect.fail(invalid(issues))
    : Effect.succeed(parts.map((part) => Either.getOrThrow(part)) as { [K in keyof A]: Either.Either.Right<A[K]> })
}

/**
 * Who acts and under which correlation id: the request's, assigned at the HTTP edge and on the response as
 * `x-correlation-id`, so an operator can find the audit rows.
 */
const attribution = Effect.gen(function* () {
  const operator = yield* CurrentOperator
  const correlationId = yield* requestCorrelationId
  return { actor: AuditActor.make(operatorActor(operator)), correlationId } satisfies KeyActor
})

const view = (key: SigningKey): SigningKeyView => ({
  keyId: key.keyId,
  publicKey: key.publicKey,
  state: key.state,
  createdAt: key.createdAt,
  retiredAt: key.retiredAt,
  revokedAt: key.revokedAt,
  verifyUntil: key.verifyUntil
})

const respond = <O extends "registered" | "rotated" | "revoked">(applied: O, by: KeyActor) => (change: KeyChange) => ({
  outcome: change.outcome === "applied" ? applied : "unchanged" as const,
  key: view(change.key),
  retired: change.retired.map(view),
  correlationId: by.correlationId
})

/** Every action is logged with its attribution; refusals too (they change nothing, so they have no audit row). */
const logged = (action: string, tenant: string, keyId: string, by: KeyActor) =>
<A extends { readonly outcome: string }, E extends { readonly _tag: string }, R>(effect: Effect.Effect<A, E, R>) =>
  effect.pipe(
    Effect.tap((result) => Effect.logInfo(`operator key action: ${action} ${result.outcome}`)),
    Effect.tapError((error) =>
      Effect.logInfo(`operator key action refused: ${action}`).pipe(
        Effect.annotateLogs({ refusal: "reason" in error ? String(error.reason) : error._tag })
      )),
    Effect.annotateLogs({ tenant, keyId, actor: by.actor, correlationId: by.correlationId })
  )

const SignerOnlyApi = HttpApi.make(deliveryApiId).add(SignerApi)

/** Handlers, one call deep into `Signer`. Requires `OperatorAuthenticationLive` (from identity) and `Signer`. */
export const SignerHttpLive = HttpApiBuilder.group(SignerOnlyApi, "signer", (handlers) =>
  Effect.gen(function* () {
    const signer = yield* Signer
    return handlers
      .handle("list", ({ path }) =>
        Effect.gen(function* () {
          const [tenant] = yield* validated(decodeId(TenantId, "tenant", path.tenant))
          const keys = yield* signer.keys(tenant)
          return { tenant, keys: keys.map(view) }
        }))
      .handleRaw("register", ({ path, request }) =>
        Effect.gen(function* () {
          const by = yield* attribution
          const [tenant, body] = yield* validated(decodeId(TenantId, "tenant", path.tenant), yield* readKeyRequest(request))
          return yield* signer.registerKeyAs(tenant, body.keyId, body.publicKey, by).pipe(
            Effect.map(respond("registered", by)),
            logged("register", tenant, body.keyId, by)
          )
        }))
      .handleRaw("rotate", ({ path, request }) =>
        Effect.gen(function* () {
          const by = yield* attribution
          const [tenant, body] = yield* validated(decodeId(TenantId, "tenant", path.tenant), yield* readKeyRequest(request))
          return yield* signer.rotateAs(tenant, body.keyId, body.publicKey, by).pipe(
            Effect.map(respond("rotated", by)),
            logged("rotate", tenant, body.keyId, by)
          )
        }))
      .handle("revoke", ({ path }) =>
        Effect.gen(function* () {
          const by = yield* attribution
          const [tenant, keyId] = yield* validated(
            decodeId(TenantId, "tenant", path.tenant),
            decodeId(KeyId, "keyId", path.keyId)
          )
          return yield* signer.revokeAs(tenant, keyId, by).pipe(
            // Not `KeyRefused`: that is a verification outcome, whose status the inbox's routes decide.
            Effect.catchTag("KeyRefused", (refused) =>
              Effect.fail(new SigningKeyNotFound({ reason: "key-unknown", tenant: refused.tenant, keyId: refused.keyId }))),
            Effect.map(respond("revoked", by)),
            logged("revoke", tenant, keyId, by)
          )
        }))
  }))
