declare module "parse-prometheus-text-format" {
  interface Family {
    readonly name: string
    readonly help: string
    readonly type: "COUNTER" | "GAUGE" | "HISTOGRAM" | "SUMMARY" | "UNTYPED"
    readonly metrics: ReadonlyArray<{
      readonly value?: string
      readonly labels?: Readonly<Record<string, string>>
      readonly buckets?: Readonly<Record<string, string>>
      readonly count?: string
      readonly sum?: string
    }>
  }
  const parse: (text: string) => Array<Family>
  export default parse
}
