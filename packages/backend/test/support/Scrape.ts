import parsePrometheus from "parse-prometheus-text-format"

/** One scrape, read two ways: the families as a Prometheus text parser sees them, and every sample line. */
export interface Scrape {
  readonly text: string
  readonly families: ReturnType<typeof parsePrometheus>
  /** The value of the counter or gauge series `name` with exactly `labels`; undefined when absent. */
  readonly value: (name: string, labels?: Readonly<Record<string, string>>) => number | undefined
  /**
   * A histogram's `_count` or `_sum` series. parse-prometheus-text-format 1.1.1 folds every labelled series of a
   * histogram into one (labels, count and sum lost), so these are read from the sample lines themselves.
   */
  readonly sample: (name: string, labels?: Readonly<Record<string, string>>) => number | undefined
  /** Every label value of every series. */
  readonly labelValues: ReadonlyArray<string>
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g

const sameLabels = (a: Readonly<Record<string, string>>, b: Readonly<Record<string, string>>) =>
  Object.keys(a).length === Object.keys(b).length && Object.entries(b).every(([key, value]) => a[key] === value)

export const readScrape = (text: string): Scrape => {
  const families = parsePrometheus(text)
  const samples = text.split("\n").flatMap((line) => {
    const match = SAMPLE.exec(line)
    if (match === null) return []
    const labels: Record<string, string> = {}
    for (const [, key, value] of (match[2] ?? "").matchAll(LABEL)) labels[key!] = value!.replace(/\\(.)/g, "$1")
    return [{ name: match[1]!, labels, value: Number(match[3]) }]
  })
  return {
    text,
    families,
    value: (name, labels = {}) => {
      const family = families.find((candidate) => candidate.name === name)
      const metric = family?.metrics.find((candidate) => sameLabels(candidate.labels ?? {}, labels))
      return metric?.value === undefined ? undefined : Number(metric.value)
    },
    sample: (name, labels = {}) => samples.find((candidate) => candidate.name === name && sameLabels(candidate.labels, labels))?.value,
    labelValues: samples.flatMap((sample) => Object.values(sample.labels))
  }
}
