import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either, Fiber, Option } from "effect"
import { appConfig, CONFIG, defaultEmbeddedDataDir, formatConfigError } from "../src/Config.ts"
import { backendMain, freePort, probePort, spawnBun } from "@delivery/testing"

const load = (env: Record<string, string>) =>
  Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map(Object.entries(env)))).pipe(
    Effect.mapError(formatConfigError),
    Effect.either
  )

describe("configuration", () => {
  it.effect("an empty environment is a complete configuration: every variable has its documented default (no DATABASE_URL selects the embedded development database)", () =>
    Effect.gen(function* () {
      const config = Either.getOrThrow(yield* load({}))
      expect(config.role).toBe("backend")
      expect(config.host).toBe("127.0.0.1")
      expect(config.port).toBe(3000)
      expect(Option.isNone(config.databaseUrl)).toBe(true)
      expect(config.databasePoolMax).toBe(10)
      expect(config.shutdownDrainMs).toBe(10_000)
      expect(config.maxRequestBodyBytes).toBe(1024 * 1024)
      expect(config.embeddedDataDir).toBe(defaultEmbeddedDataDir)
      expect(config.logLevel.label).toBe("INFO")
      expect(CONFIG.map((entry) => entry.name)).toContain("DATABASE_URL")
    }))

  it.effect("Secrets belong in the process environment: an invalid DATABASE_URL is named without its value", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(
        Effect.flatten(load({ DATABASE_URL: "mysql://app:hunter2@db.internal/app", DATABASE_POOL_MAX: "0" }))
      )
      expect(error.variables).toEqual(["DATABASE_URL", "DATABASE_POOL_MAX"])
      expect(error.message).not.toContain("hunter2")
      expect(error.message).not.toContain("db.internal")
    }))

  it.live("a missing or invalid setting stops start-up with ONE message naming EVERY bad variable (PORT=abc and ROLE=nope) and a non-zero exit", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const backend = yield* spawnBun(backendMain, { PORT: "abc", ROLE: "nope" })
        const code = yield* backend.exitCode()
        const output = yield* backend.output
        expect(code).not.toBe(0)
        const errors = output.split("\n").filter((line) => line.includes("ConfigurationError"))
        expect(errors).toHaveLength(1)
        expect(errors[0]).toContain("PORT")
        expect(errors[0]).toContain("ROLE")
        expect(output).toContain('PORT: Expected a network port value but received "abc"')
        expect(output).toContain('ROLE: Expected one of (backend, ingress) but received "nope"')
        expect(output).not.toContain("starting delivery backend")
      })
    ))

  it.live("a bad configuration stops start-up before anything listens: the chosen port is never opened and no secret is printed", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const port = yield* freePort
        const backend = yield* spawnBun(backendMain, {
          PORT: String(port),
          ROLE: "nope",
          SHUTDOWN_DRAIN_MS: "-1",
          DATABASE_URL: "mysql://app:hunter2@db.internal/app"
        })
        // Probe the port for the whole life of the process, not only after it exited.
        const prober = yield* Effect.gen(function* () {
          const seen = new Set<string>()
          while (!(yield* backend.hasExited)) {
            seen.add(yield* probePort(port))
            yield* Effect.sleep("10 millis")
          }
          return seen
        }).pipe(Effect.fork)
        const code = yield* backend.exitCode()
        const seen = yield* Fiber.join(prober)
        const output = yield* backend.output
        expect(code).not.toBe(0)
        expect(seen.has("open")).toBe(false)
        expect(yield* probePort(port)).toBe("refused")
        expect(output).toMatch(/ROLE, DATABASE_URL, SHUTDOWN_DRAIN_MS/)
        expect(output).not.toContain("hunter2")
        expect(output).not.toContain("listening on")
      })
    ))
})
