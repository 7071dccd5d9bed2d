import { Effect, Metric } from "effect"

/** The sum of every counter named `name` whose tags include all of `tags`, in this process's metrics. */
export const counted = (name: string, tags: Readonly<Record<string, string>>) =>
  Effect.map(Metric.snapshot, (pairs) =>
    pairs
      .filter(({ metricKey }) =>
        metricKey.name === name &&
        Object.entries(tags).every(([key, value]) => metricKey.tags.some((tag) => tag.key === key && tag.value === value)))
      .reduce((sum, { metricState }) => sum + Number((metricState as unknown as { count: number | bigint }).count), 0))

/** How many attempts `delivery_outcomes` has counted for `family` under `outcome`. */
export const outcomesCounted = (family: string, outcome: string) => counted("delivery_outcomes", { family, outcome })

/** How many refusals `delivery_limiter_refusals` has counted under `reason`. */
export const refusalsCounted = (reason: string) => counted("delivery_limiter_refusals", { reason })
