import { Effect, Metric } from "effect"

/** How many refusals `delivery_limiter_refusals_total` holds under `reason`, in this process's metrics. */
export const refusalsCounted = (reason: string) =>
  Effect.map(Metric.snapshot, (pairs) =>
    pairs
      .filter(({ metricKey }) =>
        metricKey.name === "delivery_limiter_refusals" && metricKey.tags.some((tag) => tag.key === "reason" && tag.value === reason))
      .reduce((sum, { metricState }) => sum + Number((metricState as unknown as { count: number | bigint }).count), 0))
