import { Effect, Metric } from "effect"

/** How many attempts `delivery_outcomes` has counted for `family` under `outcome`, in this process's metrics. */
export const outcomesCounted = (family: string, outcome: string) =>
  Effect.map(Metric.snapshot, (pairs) =>
    pairs
      .filter(({ metricKey }) =>
        metricKey.name === "delivery_outcomes" &&
        metricKey.tags.some((tag) => tag.key === "family" && tag.value === family) &&
        metricKey.tags.some((tag) => tag.key === "outcome" && tag.value === outcome))
      .reduce((sum, { metricState }) => sum + Number((metricState as unknown as { count: number | bigint }).count), 0))
