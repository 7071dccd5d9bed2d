import { HttpApi } from "@effect/platform"
import { Api } from "@delivery/backend"
import { Option, SchemaAST } from "effect"

// The typed client decodes a refusal into its error class and drops the status. The exit code depends on the
// status (4xx refused, 429 and 5xx unavailable), so it is read back from the API definition the server
// answers with: every declared error `_tag` and the status it is declared at.

const tagsOf = (ast: SchemaAST.AST): ReadonlyArray<string> => {
  switch (ast._tag) {
    case "Union":
      return ast.types.flatMap(tagsOf)
    case "Transformation":
    case "Refinement":
      return tagsOf(ast.from)
    case "Suspend":
      return tagsOf(ast.f())
    case "TypeLiteral":
      return ast.propertySignatures.flatMap((property) =>
        property.name === "_tag" && SchemaAST.isLiteral(property.type) ? [String(property.type.literal)] : [])
    default:
      return []
  }
}

let statuses: ReadonlyMap<string, number> | undefined

const declaredStatuses = (): ReadonlyMap<string, number> => {
  const found = new Map<string, number>()
  HttpApi.reflect(Api, {
    onGroup: () => {},
    onEndpoint: ({ errors }) => {
      for (const [status, { ast }] of errors) {
        if (Option.isSome(ast)) for (const tag of tagsOf(ast.value)) found.set(tag, status)
      }
    }
  })
  return found
}

/** The status the API declares for a refusal's `_tag`; none for anything the server never answers with. */
export const statusOf = (tag: string): Option.Option<number> => Option.fromNullable((statuses ??= declaredStatuses()).get(tag))
