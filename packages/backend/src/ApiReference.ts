import { OpenApi } from "@effect/platform"
import { Api } from "./Api.ts"

// docs/api.md, generated from the same HttpApi definition the server runs and the client is derived from, so
// the page cannot drift from the routes: `bun scripts/api-reference.ts` writes it, a test compares it.

type JsonSchema = {
  readonly $ref?: string
  readonly type?: string
  readonly enum?: ReadonlyArray<unknown>
  readonly const?: unknown
  readonly anyOf?: ReadonlyArray<JsonSchema>
  readonly items?: JsonSchema
  readonly properties?: Readonly<Record<string, JsonSchema>>
  readonly required?: ReadonlyArray<string>
  readonly additionalProperties?: boolean | JsonSchema
  readonly pattern?: string
  readonly minLength?: number
  readonly maxLength?: number
  readonly minimum?: number
  readonly maximum?: number
  readonly maxItems?: number
  readonly format?: string
  readonly description?: string
  readonly examples?: ReadonlyArray<unknown>
}

interface Operation {
  readonly summary?: string
  readonly description?: string
  readonly security?: ReadonlyArray<Readonly<Record<string, unknown>>>
  readonly parameters?: ReadonlyArray<{ readonly name: string; readonly in: string; readonly required?: boolean; readonly schema: JsonSchema }>
  readonly requestBody?: { readonly content: Readonly<Record<string, { readonly schema: JsonSchema }>> }
  readonly responses: Readonly<Record<string, { readonly content?: Readonly<Record<string, { readonly schema: JsonSchema }>> }>>
}

const METHODS = ["get", "put", "post", "patch", "delete"] as const

// The edge's own refusals are on every route; docs/http.md describes them once.
const EDGE = new Set(["RequestInvalid", "PathInvalid", "BodyUnreadable", "BodyTooLarge", "UriTooLong", "JsonBodyRefused", "InternalError", "ShuttingDown"])

const SECURITY: Readonly<Record<string, string>> = {
  bearer: "tenant bearer (API key or device credential)",
  operatorBearer: "operator bearer (`OPERATOR_TOKEN`)"
}

const escape = (text: string) => text.replaceAll("|", "\\|").replaceAll("\n", " ")

export const apiReference = (): string => {
  const spec = OpenApi.fromApi(Api) as unknown as {
    readonly paths: Readonly<Record<string, Readonly<Record<string, Operation>>>>
    readonly components: { readonly schemas: Readonly<Record<string, JsonSchema>> }
  }
  const schemas = spec.components.schemas
  const refName = (schema: JsonSchema) => schema.$ref?.slice("#/components/schemas/".length)
  const resolve = (schema: JsonSchema): JsonSchema => {
    const name = refName(schema)
    return name === undefined ? schema : { ...schemas[name], ...schema, $ref: undefined as never }
  }

  const bounds = (s: JsonSchema): string => {
    const parts: Array<string> = []
    if (s.pattern !== undefined) parts.push(`\`${s.pattern}\``)
    if (s.minLength !== undefined || s.maxLength !== undefined) parts.push(`length ${s.minLength ?? 0}..${s.maxLength ?? "∞"}`)
    if (s.minimum !== undefined || s.maximum !== undefined) parts.push(`${s.minimum ?? "−∞"}..${s.maximum ?? "∞"}`)
    if (s.maxItems !== undefined) parts.push(`at most ${s.maxItems} items`)
    return parts.join(", ")
  }

  const typeOf = (raw: JsonSchema): string => {
    const name = refName(raw)
    const s = resolve(raw)
    if (s.anyOf !== undefined) return s.anyOf.map(typeOf).join(" \\| ")
    if (s.enum !== undefined) return s.enum.map((value) => `\`${JSON.stringify(value)}\``).join(" \\| ")
    if (s.const !== undefined) return `\`${JSON.stringify(s.const)}\``
    if (s.type === "array") return `array of ${s.items === undefined ? "anything" : typeOf(s.items)}`
    if (s.type === "object" || s.properties !== undefined) return name === undefined ? "object" : `object \`${name}\``
    if (name === "Date" || s.format === "date-time") return "date-time string"
    return s.type ?? name ?? "any"
  }

  /** Members of an object, nested objects as dotted names (bounded: the API's bodies are shallow). */
  const memberRows = (raw: JsonSchema, prefix = "", depth = 0): Array<string> => {
    const s = resolve(raw)
    if (s.properties === undefined || depth > 3) return []
    return Object.entries(s.properties).flatMap(([member, child]) => {
      const resolved = resolve(child)
      const required = (s.required ?? []).includes(member) ? "yes" : "no"
      const notes = [bounds(resolved), resolved.description !== undefined && !resolved.description.startsWith("a ") ? resolved.description : ""]
        .filter((note) => note !== "")
        .join("; ")
      const row = `| \`${prefix}${member}\` | ${typeOf(child)} | ${required} | ${escape(notes)} |`
      const items = resolved.type === "array" && resolved.items !== undefined ? resolve(resolved.items) : undefined
      const nested = resolved.properties !== undefined
        ? memberRows(resolved, `${prefix}${member}.`, depth + 1)
        : items?.properties !== undefined
        ? memberRows(items, `${prefix}${member}[].`, depth + 1)
        : []
      return [row, ...nested]
    })
  }

  const refusal = (raw: JsonSchema): Array<string> => {
    const s = resolve(raw)
    if (s.anyOf !== undefined) return s.anyOf.flatMap(refusal)
    const tag = resolve(s.properties?._tag ?? {}).enum?.[0]
    if (typeof tag !== "string" || EDGE.has(tag)) return []
    const reasons = resolve(s.properties?.reason ?? {}).enum
    return [reasons === undefined ? `\`${tag}\`` : `\`${tag}\` (${reasons.map((r) => `\`${String(r)}\``).join(", ")})`]
  }

  const lines: Array<string> = [
    "# HTTP API reference",
    "",
    "Generated from the backend's `HttpApi` definition (`packages/backend/src/Api.ts`) by `bun scripts/api-reference.ts`;",
    "`packages/backend/test/ApiReference.test.ts` fails when this page and the code differ. The same definition serves",
    "`/openapi.json` (and the page at `/docs`) and is what `packages/client` derives its typed client from.",
    "",
    "Every route may also answer the edge's refusals (400 `request-invalid`, `path-invalid`, `body-unreadable`; 413; 414;",
    "422 JSON bounds; 500; 503 `shutting-down`), described once in [http.md](http.md). Bodies are closed: a member not",
    "listed is refused (400 `request-invalid`, `unexpected-member`). Every refusal carries a stable `reason`.",
    ""
  ]
  for (const [path, item] of Object.entries(spec.paths)) {
    for (const method of METHODS) {
      const operation = item[method]
      if (operation === undefined) continue
      lines.push(`## \`${method.toUpperCase()} ${path}\``, "")
      if (operation.summary !== undefined) lines.push(operation.summary, "")
      if (operation.description !== undefined) lines.push(operation.description, "")
      const auth = (operation.security ?? []).flatMap((entry) => Object.keys(entry)).map((scheme) => SECURITY[scheme] ?? scheme)
      lines.push(`- **Credential:** ${auth.length === 0 ? "none" : auth.join(" or ")}`)
      for (const where of ["path", "query"] as const) {
        const params = (operation.parameters ?? []).filter((p) => p.in === where)
        if (params.length > 0) {
          const described = params.map((p) => {
            const detail = bounds(resolve(p.schema))
            return `\`${p.name}\`${p.required === true ? "" : " (optional)"}: ${typeOf(p.schema)}${detail === "" ? "" : `, ${detail}`}`
          })
          lines.push(`- **${where === "path" ? "Path" : "Query"}:** ${described.join("; ")}`)
        }
      }
      const answers = Object.entries(operation.responses).map(([status, response]) => {
        const schema = response.content?.["application/json"]?.schema
        return { status: Number(status), schema }
      })
      const successes = answers.filter((a) => a.status < 400)
      lines.push(`- **Answers:** ${successes.map((a) => `${a.status}${a.schema === undefined ? "" : ` ${typeOf(a.schema)}`}`).join("; ")}`)
      const refusals = answers
        .filter((a) => a.status >= 400 && a.schema !== undefined)
        .map((a) => ({ status: a.status, refusals: [...new Set(refusal(a.schema!))] }))
        .filter((a) => a.refusals.length > 0)
      if (refusals.length > 0) {
        lines.push(`- **Refusals:** ${refusals.map((a) => `${a.status} ${a.refusals.join(", ")}`).join("; ")}`)
      }
      const body = operation.requestBody?.content["application/json"]?.schema
      if (body !== undefined) {
        const name = refName(body)
        lines.push("", `Request body${name === undefined ? "" : ` (\`${name}\`)`}:`, "", "| member | type | required | bounds and notes |", "|---|---|---|---|")
        lines.push(...memberRows(body))
        const example = resolve(body).examples?.[0]
        if (example !== undefined) lines.push("", "```json", JSON.stringify(example), "```")
      }
      lines.push("")
    }
  }
  return lines.join("\n")
}
