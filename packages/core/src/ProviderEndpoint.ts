import { Brand, Config, ConfigError, Either, Schema } from "effect"
import { EndpointErrorCode } from "./ErrorCodes.ts"

// Endpoint: validated once at start-up, so a bad URL never reaches a worker.

/** The endpoint string is refused; the message never echoes the URL (it may hold credentials). */
export class ProviderEndpointError extends Schema.TaggedError<ProviderEndpointError>()("ProviderEndpointError", {
  code: EndpointErrorCode
}) {
  override get message() {
    return this.code
  }
}

export type ProviderEndpoint = string & Brand.Brand<"ProviderEndpoint">

const isLoopbackHost = (hostname: string): boolean =>
  hostname === "localhost" || hostname === "[::1]" ||
  // A host name whose last label is a number is parsed as IPv4 and written back as four parts, so nothing but
  // "127.a.b.c" can end like this one: the leading anchor only documents the intent.
  // Stryker disable next-line Regex: see above
  /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(hostname)

/** https anywhere; http only to loopback; no credentials, query or fragment. */
export const parseEndpoint = (input: string): Either.Either<ProviderEndpoint, ProviderEndpointError> => {
  const fail = (code: EndpointErrorCode) => Either.left(new ProviderEndpointError({ code }))
  let url: URL
  try {
    url = new URL(input)
  } catch {
    return fail("endpoint-invalid-url")
  }
  // http and https are special schemes: URL itself refuses them without a host.
  if (url.protocol !== "https:" && url.protocol !== "http:") return fail("endpoint-unsupported-scheme")
  if (url.protocol === "http:" && !isLoopbackHost(url.hostname)) return fail("endpoint-insecure-scheme")
  if (url.username !== "" || url.password !== "") return fail("endpoint-has-credentials")
  // The raw text is what is checked: URL drops an empty "?" or "#", but a configured one still means someone
  // expected it to carry something (and a query or fragment URL keeps always came from one).
  if (input.includes("?")) return fail("endpoint-has-query")
  if (input.includes("#")) return fail("endpoint-has-fragment")
  return Either.right(url.href as ProviderEndpoint)
}

/**
 * Reads an endpoint with `Config`; a refusal fails config loading naming the variable and the code. `nested` comes
 * after the check, so the refusal's path is the variable (the backend's start-up message lists problems by path).
 */
export const endpointConfig = (name: string): Config.Config<ProviderEndpoint> =>
  Config.string().pipe(
    Config.mapOrFail((input) =>
      Either.mapLeft(
        parseEndpoint(input),
        (e) => ConfigError.InvalidData([], `${e.code}: ${name} is not a usable provider endpoint`)
      )
    ),
    Config.nested(name)
  )

/** `ProviderEndpoint.parse(s)`, `.config("PROVIDER_URL")`. */
export const ProviderEndpoint = {
  parse: parseEndpoint,
  config: endpointConfig
} as const
