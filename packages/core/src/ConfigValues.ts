import { Config, Duration } from "effect"

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
