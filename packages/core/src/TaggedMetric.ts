import { Metric, MetricKey, MetricLabel, type MetricKeyType } from "effect"

type MetricOf<Type extends MetricKeyType.MetricKeyType<any, any>> = Metric.Metric<
  Type,
  MetricKeyType.MetricKeyType.InType<Type>,
  MetricKeyType.MetricKeyType.OutType<Type>
>

const made = new Map<string, unknown>()

/**
 * The metric of `key` with these labels, made once and kept. `Metric.tagged` joins its labels into a new array on
 * every update, which misses Effect's registry cache (keyed by the array), so a metric key is built and hashed again
 * per update; a metric made from an already tagged key finds its registry entry once. Label values must come from
 * closed sets (route templates, families, outcomes): the cache holds one metric per distinct set.
 */
export const taggedMetric = <Type extends MetricKeyType.MetricKeyType<any, any>>(
  key: MetricKey.MetricKey<Type>,
  labels: ReadonlyArray<readonly [name: string, value: string]>
): MetricOf<Type> => {
  let id = key.name
  for (const [name, value] of labels) id += `\u0000${name}=${value}`
  let metric = made.get(id) as MetricOf<Type> | undefined
  if (metric === undefined) {
    metric = Metric.fromMetricKey(MetricKey.taggedWithLabels(key, labels.map(([name, value]) => MetricLabel.make(name, value))))
    made.set(id, metric)
  }
  return metric
}
