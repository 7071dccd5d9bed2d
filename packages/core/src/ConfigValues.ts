import { Config, ConfigError, Duration, Either } from "effect"

// Every reader here puts `nested(name)` after its validation: a validation on `Config.integer(name)`
// reports its failure with an empty path, and the backend's one start-up message then cannot say which
// variable was wrong ("(1 problem: )").

/**
 * A positive, finite duration from the variable `name`. `nested` comes after `validate`, so a refused
 * value is still reported under its variable's name in the backend's one start-up message.
 */
export const positiveDuration = (name: string, fallback: Duration.DurationInput) =>
  Config.duration().pipe(
    Config.validate({
      message: "Expected a positive, finite duration such as \"1 minute\"",
      validation: (d) => Duration.isFinite(d) && Duration.toMillis(d) > 0
    }),
    Config.nested(name),
    Config.withDefault(Duration.decode(fallback))
  )

// Plain decimal only: `Config.integer` also takes "1e3", "0x10" and " 10 ", which nobody means to write.
const DECIMAL = /^-?\d{1,16}$/

/** An integer `min..max` from the variable `name`, written in plain decimal digits. */
export const integerBetween = (name: string, min: number, max: number, fallback: number) =>
  Config.string().pipe(
    Config.mapOrFail((text) => {
      const value = Number(text)
      return DECIMAL.test(text) && value >= min && value <= max
        ? Either.right(value)
        : Either.left(ConfigError.InvalidData([], `Expected an integer between ${min} and ${max}`))
    }),
    Config.nested(name),
    Config.withDefault(fallback)
  )

/** A positive, finite duration from the variable `name`, at most `max`. */
export const durationAtMost = (name: string, fallback: Duration.DurationInput, max: Duration.Duration) =>
  positiveDuration(name, fallback).pipe(
    Config.mapOrFail((value) =>
      Duration.greaterThan(value, max)
        ? Either.left(ConfigError.InvalidData([name], `Expected at most ${Duration.format(max)}`))
        : Either.right(value)
    )
  )
