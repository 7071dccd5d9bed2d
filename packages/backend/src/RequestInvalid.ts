import { type HttpApi, type HttpApiEndpoint, HttpApiError, type HttpApp } from "@effect/platform"
import { requestCorrelationId } from "@delivery/core"
import { Effect, Option, Predicate, type SchemaAST as AST } from "effect"
import { type Issue, type IssueProblem, RequestInvalid } from "./Refusals.ts"

// The framework's decode error (`HttpApiDecodeError`) carries Schema's messages, which quote the submitted
// values, and paths that may hold the client's own member names. What leaves instead is `RequestInvalid`:
// a stable reason, the correlation id, and for each issue a path made only of names the API itself
// declares (anything else is `*`) and a problem from a closed set.

/** Every member name of every path, query, header and payload schema of `api`: the only names an issue may show. */
export const declaredMemberNames = (api: HttpApi.HttpApi.Any): ReadonlySet<string> => {
  const names = new Set<string>()
  const seen = new Set<AST.AST>()
  const visit = (ast: AST.AST): void => {
    if (seen.has(ast)) return
    seen.add(ast)
    switch (ast._tag) {
      case "TypeLiteral":
        for (const property of ast.propertySignatures) {
          if (typeof property.name === "string") names.add(property.name)
          visit(property.type)
        }
        for (const index of ast.indexSignatures) visit(index.type)
        return
      case "Union":
        return ast.types.forEach(visit)
      case "TupleType":
        ast.elements.forEach((element) => visit(element.type))
        return ast.rest.forEach((rest) => visit(rest.type))
      case "Refinement":
        return visit(ast.from)
      case "Transformation":
        visit(ast.from)
        return visit(ast.to)
      case "Suspend":
        return visit(ast.f())
      case "Declaration":
        return ast.typeParameters.forEach(visit)
    }
  }
  const { groups } = api as unknown as HttpApi.HttpApi.AnyWithProps
  for (const group of Object.values(groups)) {
    for (const endpoint of Object.values(group.endpoints) as ReadonlyArray<HttpApiEndpoint.HttpApiEndpoint.AnyWithProps>) {
      for (const schema of [endpoint.pathSchema, endpoint.urlParamsSchema, endpoint.headersSchema, endpoint.payloadSchema]) {
        if (Option.isSome(schema)) visit(schema.value.ast)
      }
    }
  }
  return names
}

const problemOf = (tag: string): IssueProblem => (tag === "Missing" ? "missing" : tag === "Unexpected" ? "unexpected-member" : "invalid")

/** At most 8 distinct issues, paths as JSON pointers without a single submitted value or unknown name. */
export const sanitizeIssues = (
  issues: HttpApiError.HttpApiDecodeError["issues"],
  declared: ReadonlySet<string>
): Array<Issue> => {
  const distinct = new Map<string, Issue>()
  for (const issue of issues) {
    // An unexpected member's name is the client's: it is reported at its parent.
    const path = issue._tag === "Unexpected" ? issue.path.slice(0, -1) : issue.path
    const pointer = path
      .map((key) => "/" + (typeof key === "number" || (typeof key === "string" && declared.has(key)) ? String(key) : "*"))
      .join("")
    const found: Issue = { path: pointer, problem: problemOf(issue._tag) }
    distinct.set(`${found.path} ${found.problem}`, found)
    if (distinct.size === 8) break
  }
  return [...distinct.values()]
}

const isDecodeError = (error: unknown): error is HttpApiError.HttpApiDecodeError =>
  Predicate.isTagged(error, "HttpApiDecodeError")

/** An API-level middleware: turns the framework's decode error into `RequestInvalid` before it is encoded. */
export const requestInvalid = (api: HttpApi.HttpApi.Any) => {
  const declared = declaredMemberNames(api)
  // The app's type says it cannot fail, but the routes' failures pass through here before they are encoded.
  return (app: HttpApp.Default): HttpApp.Default<RequestInvalid> =>
    Effect.catchIf(app as HttpApp.Default<unknown>, isDecodeError, (error) =>
      Effect.flatMap(requestCorrelationId, (correlationId) =>
        Effect.fail(new RequestInvalid({ reason: "request-invalid", correlationId, issues: sanitizeIssues(error.issues, declared) })))) as HttpApp.Default<RequestInvalid>
}

const refersToDecodeError = (value: unknown) =>
  Predicate.hasProperty(value, "$ref") && value.$ref === "#/components/schemas/HttpApiDecodeError"

/**
 * An OpenAPI transform: the framework lists its `HttpApiDecodeError` under 400 for every route, but no client
 * ever receives it (`requestInvalid` answers instead), so the document leaves it out.
 */
export const withoutDecodeError = (spec: Record<string, any>): Record<string, any> => {
  const prune = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.filter((item) => !refersToDecodeError(item)).map(prune)
    if (typeof value !== "object" || value === null) return value
    const result: Record<string, unknown> = {}
    for (const [key, member] of Object.entries(value)) result[key] = prune(member)
    // A union left with one member is that member.
    const keys = Object.keys(result)
    const union = keys.length === 1 && (keys[0] === "anyOf" || keys[0] === "oneOf") ? result[keys[0]] : undefined
    return Array.isArray(union) && union.length === 1 ? union[0] : result
  }
  const pruned = prune(spec) as Record<string, any>
  delete pruned.components?.schemas?.HttpApiDecodeError
  return pruned
}
