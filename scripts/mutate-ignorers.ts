import type { Ignorer, NodePath } from "@stryker-mutator/api/ignore"
import { declareValuePlugin, PluginKind } from "@stryker-mutator/api/plugin"

/**
 * Stryker ignorers (plugin kind `Ignore`) for code whose mutants can only be equivalent: nothing a test can or
 * should observe changes when they are applied. Ignored mutants are listed as "Ignored" in the report, are
 * never run, and do not count in the score.
 *
 * - `effect-logs`: the whole call `Effect.log*(...)`, `Effect.annotateLogs(...)` or `Effect.withLogSpan(...)`
 *   (message text, annotation keys and values). Only that call is skipped: in
 *   `Effect.logWarning("...").pipe(Effect.annotateLogs(...), Effect.zipRight(Effect.fail(...)))` the failure is
 *   still mutated, and so is the removal of a block that contains a log call.
 * - `effect-service-keys`: the key string of `Context.Tag("key")` and `Effect.Service<S>()("key", ...)`. A key
 *   is an identity; one mutant at a time cannot make two services collide.
 * - `effect-span-names`: the name string of `Effect.fn("name")`, `Effect.withSpan("name", ...)` and
 *   `Effect.useSpan("name", ...)`, which only a tracer reads.
 */

/** The parts of Babel's AST that the ignorers read (Stryker hands over Babel `NodePath`s). */
interface Node {
  readonly type: string
  readonly [field: string]: unknown
}
interface BabelPath extends NodePath {
  readonly node: Node
  readonly parent: Node | null
}

const LOG_CALLS = new Set([
  "log",
  "logTrace",
  "logDebug",
  "logInfo",
  "logWarning",
  "logError",
  "logFatal",
  "annotateLogs",
  "withLogSpan"
])

const isNode = (value: unknown): value is Node =>
  typeof value === "object" && value !== null && typeof (value as { type?: unknown }).type === "string"

/** `object.property` with plain identifiers, e.g. `Effect.logInfo`. */
const memberName = (node: unknown, object: string): string | undefined => {
  if (!isNode(node) || node.type !== "MemberExpression" || node.computed === true) return undefined
  const target = node.object
  const property = node.property
  if (!isNode(target) || target.type !== "Identifier" || target.name !== object) return undefined
  return isNode(property) && property.type === "Identifier" && typeof property.name === "string"
    ? property.name
    : undefined
}

export const effectLogs: Ignorer = {
  shouldIgnore(path) {
    const { node } = path as BabelPath
    if (node.type !== "CallExpression") return undefined
    const name = memberName(node.callee, "Effect")
    return name !== undefined && LOG_CALLS.has(name)
      ? `Effect.${name}: log text and annotations are not behaviour`
      : undefined
  }
}

export const effectServiceKeys: Ignorer = {
  shouldIgnore(path) {
    const { node, parent } = path as BabelPath
    if (node.type !== "StringLiteral" || parent === null || parent.type !== "CallExpression") return undefined
    const args = parent.arguments
    if (!Array.isArray(args) || args[0] !== node) return undefined
    const callee = parent.callee
    const contextTag = memberName(callee, "Context")
    if (contextTag === "Tag" || contextTag === "GenericTag") return "Context.Tag key: an identity, not behaviour"
    if (isNode(callee) && callee.type === "CallExpression" && memberName(callee.callee, "Effect") === "Service") {
      return "Effect.Service key: an identity, not behaviour"
    }
    return undefined
  }
}

const SPAN_CALLS = new Set(["fn", "withSpan", "useSpan"])

export const effectSpanNames: Ignorer = {
  shouldIgnore(path) {
    const { node, parent } = path as BabelPath
    if (node.type !== "StringLiteral" || parent === null || parent.type !== "CallExpression") return undefined
    const args = parent.arguments
    if (!Array.isArray(args) || args[0] !== node) return undefined
    const name = memberName(parent.callee, "Effect")
    return name !== undefined && SPAN_CALLS.has(name) ? `Effect.${name} name: read by tracers only` : undefined
  }
}

export const strykerPlugins = [
  declareValuePlugin(PluginKind.Ignore, "effect-logs", effectLogs),
  declareValuePlugin(PluginKind.Ignore, "effect-service-keys", effectServiceKeys),
  declareValuePlugin(PluginKind.Ignore, "effect-span-names", effectSpanNames)
]
