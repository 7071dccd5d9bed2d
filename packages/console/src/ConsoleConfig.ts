import { durationAtMost } from "@delivery/core"
import { Config, Duration } from "effect"

export const CONSOLE_SESSION_TTL = "CONSOLE_SESSION_TTL"

/** `CONSOLE_SESSION_TTL` (default 30 minutes, at most 12 hours): how long a console session lasts after sign-in. */
export const ConsoleSessionTtlConfig = durationAtMost(CONSOLE_SESSION_TTL, Duration.minutes(30), Duration.hours(12))

export const ConsoleConfig = Config.all({ sessionTtl: ConsoleSessionTtlConfig })

/** What the backend lists in its configuration table. */
export const CONSOLE_CONFIG = [
  {
    name: CONSOLE_SESSION_TTL,
    default: "30 minutes",
    meaning: "lifetime of an operator console session (at most 12 hours); the operator token is exchanged for it once at /console/sign-in",
    secret: false
  }
] as const
