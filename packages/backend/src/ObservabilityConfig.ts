import { Config, ConfigError, Either, Option, Redacted } from "effect"

export const METRICS_TOKEN = "METRICS_TOKEN"
export const LOG_FORMAT = "LOG_FORMAT"
export const OTEL_EXPORTER_OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
export const OTEL_SERVICE_NAME = "OTEL_SERVICE_NAME"

/** `pretty` is what the runtime has always written: a header line per entry, then one line per annotation. */
export const LOG_FORMATS = ["pretty", "logfmt", "json"] as const
export type LogFormat = (typeof LOG_FORMATS)[number]

export const DEFAULT_SERVICE_NAME = "delivery-backend"

const maxMetricsTokenLength = 512
const METRICS_TOKEN_PATTERN = new RegExp(`^[\\x21-\\x7e]{32,${maxMetricsTokenLength}}$`)

/**
 * Optional, like OPERATOR_TOKEN and with its bounds: a short or accidentally empty value stops start-up instead of
 * becoming a guessable credential. The message never contains the value; its ending lets the backend print it.
 */
export const MetricsTokenConfig = Config.redacted().pipe(
  Config.validate({
    message: `Expected 32 to ${maxMetricsTokenLength} printable ASCII characters without spaces (value not shown)`,
    validation: (token) => METRICS_TOKEN_PATTERN.test(Redacted.value(token))
  }),
  Config.nested(METRICS_TOKEN),
  Config.option
)

export const LogFormatConfig = Config.string(LOG_FORMAT).pipe(
  Config.mapOrFail((text) => {
    const format = LOG_FORMATS.find((candidate) => candidate === text.toLowerCase())
    return format === undefined
      ? Either.left(ConfigError.InvalidData([], `Expected one of ${LOG_FORMATS.join(", ")} (case-insensitive)`))
      : Either.right(format)
  }),
  Config.withDefault<LogFormat>("pretty")
)

const isCollectorUrl = (text: string) => {
  try {
    const url = new URL(text)
    return (url.protocol === "http:" || url.protocol === "https:") && url.hostname !== "" && url.username === "" &&
      url.password === "" && url.search === "" && url.hash === ""
  } catch {
    return false
  }
}

/**
 * The OTLP/HTTP base URL, as the OpenTelemetry variable of the same name means it: spans go to `<base>/v1/traces`.
 * Credentials in the URL are refused: the value is logged at start-up and is not treated as a secret.
 */
export const OtlpEndpointConfig = Config.string(OTEL_EXPORTER_OTLP_ENDPOINT).pipe(
  Config.validate({
    message: "Expected an http:// or https:// URL without credentials, query or fragment, e.g. http://127.0.0.1:4318",
    validation: isCollectorUrl
  }),
  Config.map((base) => `${base.replace(/\/+$/, "")}/v1/traces`),
  Config.option
)

export const ServiceNameConfig = Config.string(OTEL_SERVICE_NAME).pipe(
  Config.validate({
    message: "Expected 1 to 255 printable ASCII characters",
    validation: (name) => /^[\x20-\x7e]{1,255}$/.test(name)
  }),
  Config.withDefault(DEFAULT_SERVICE_NAME)
)

export const ObservabilityConfig = Config.all({
  metricsToken: MetricsTokenConfig,
  logFormat: LogFormatConfig,
  tracesUrl: OtlpEndpointConfig,
  serviceName: ServiceNameConfig
})
export type ObservabilitySettings = Config.Config.Success<typeof ObservabilityConfig>

export const OBSERVABILITY_CONFIG = [
  {
    name: METRICS_TOKEN,
    default: "(unset: GET /metrics is open; it carries counts and durations, no secrets)",
    meaning: `bearer token GET /metrics requires (32-${maxMetricsTokenLength} printable ASCII characters); only its SHA-256 is kept in memory; a missing or wrong token gets 401 \`metrics-token-missing\` or \`metrics-token-invalid\``,
    secret: true
  },
  {
    name: LOG_FORMAT,
    default: "pretty",
    meaning: "log line format, case-insensitive: `pretty` (a header line per entry, one line per annotation), `logfmt`, or `json` (one JSON object per line: message, logLevel, timestamp, annotations, spans, fiberId)",
    secret: false
  },
  {
    name: OTEL_EXPORTER_OTLP_ENDPOINT,
    default: "(unset: no trace export)",
    meaning: "OTLP/HTTP collector base URL (http:// or https://, no credentials, query or fragment); spans are sent as JSON to `<url>/v1/traces`, batched, with an allowlist of attributes (docs/operations.md, \"Traces\")",
    secret: false
  },
  {
    name: OTEL_SERVICE_NAME,
    default: DEFAULT_SERVICE_NAME,
    meaning: "`service.name` of exported spans and of the `target_info` metric (1-255 printable ASCII characters)",
    secret: false
  }
] as const

/** What start-up logs: never the token. */
export const describeObservability = (settings: ObservabilitySettings) => ({
  metricsToken: Option.isSome(settings.metricsToken) ? "set" : "unset",
  logFormat: settings.logFormat,
  traces: Option.getOrElse(settings.tracesUrl, () => "off"),
  serviceName: settings.serviceName
})
