/**
 * The summary of a Stryker JSON report (mutation-testing-report-schema): the score per file, then every surviving
 * mutant as file:line:column, mutator, original -> replacement. Used by `bun run mutate` (scripts/mutate.ts).
 */

interface ReportMutant {
  readonly id: string
  readonly mutatorName: string
  readonly replacement?: string
  readonly status: string
  readonly statusReason?: string
  readonly location: { readonly start: { line: number; column: number }; readonly end: { line: number; column: number } }
}
export interface Report {
  readonly files: Record<string, { readonly source: string; readonly mutants: ReadonlyArray<ReportMutant> }>
}

const oneLine = (text: string, max = 90) => {
  const flat = text.replace(/\s+/g, " ").trim()
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat
}

/** Long originals (a regex, a condition) are cut around the part the mutant changed, so the change stays visible. */
const around = (original: string, replacement: string, max = 90): [string, string] => {
  if (original.length <= max && replacement.length <= max) return [original, replacement]
  let prefix = 0
  while (prefix < original.length && prefix < replacement.length && original[prefix] === replacement[prefix]) prefix++
  let suffix = 0
  while (
    suffix < original.length - prefix && suffix < replacement.length - prefix &&
    original[original.length - 1 - suffix] === replacement[replacement.length - 1 - suffix]
  ) suffix++
  const cut = (text: string) => {
    const from = Math.max(0, prefix - 30)
    const to = Math.min(text.length, text.length - suffix + 30)
    const window = `${from > 0 ? "…" : ""}${text.slice(from, to)}${to < text.length ? "…" : ""}`
    return window.length > max + 2 ? `${window.slice(0, max + 1)}…` : window
  }
  return [cut(original), cut(replacement)]
}

const originalText = (source: string, location: ReportMutant["location"]) => {
  const lines = source.split("\n")
  const { start, end } = location
  if (start.line === end.line) return lines[start.line - 1]?.slice(start.column - 1, end.column - 1) ?? ""
  const first = lines[start.line - 1]?.slice(start.column - 1) ?? ""
  const middle = lines.slice(start.line, end.line - 1)
  const last = lines[end.line - 1]?.slice(0, end.column - 1) ?? ""
  return [first, ...middle, last].join("\n")
}

const DETECTED = new Set(["Killed", "Timeout"])
const UNDETECTED = new Set(["Survived", "NoCoverage"])

export const summarize = (report: Report, counting: boolean): string => {
  const out: Array<string> = []
  const survivors: Array<string> = []
  const rows: Array<[string, string, string]> = []
  let totalDetected = 0
  let totalValid = 0
  let totalIgnored = 0
  let totalMutants = 0
  for (const [file, { source, mutants }] of Object.entries(report.files).sort(([a], [b]) => a.localeCompare(b))) {
    const byStatus = new Map<string, number>()
    for (const mutant of mutants) byStatus.set(mutant.status, (byStatus.get(mutant.status) ?? 0) + 1)
    const detected = [...DETECTED].reduce((n, s) => n + (byStatus.get(s) ?? 0), 0)
    const undetected = [...UNDETECTED].reduce((n, s) => n + (byStatus.get(s) ?? 0), 0)
    const ignored = byStatus.get("Ignored") ?? 0
    const valid = detected + undetected
    totalDetected += detected
    totalValid += valid
    totalIgnored += ignored
    totalMutants += mutants.length
    // A count runs `true` as the test command, so every mutant "survives": only the ignored ones mean something.
    const counts = counting
      ? (ignored === 0 ? [] : [`${ignored} ignored`])
      : [...byStatus.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([s, n]) => `${n} ${s.toLowerCase()}`)
    rows.push([file, counting ? `${valid} to run` : valid === 0 ? "-" : `${((100 * detected) / valid).toFixed(2)}%`, counts.join(", ")])
    if (counting) continue
    const sorted = [...mutants].sort((a, b) => a.location.start.line - b.location.start.line || a.location.start.column - b.location.start.column)
    for (const mutant of sorted) {
      if (!UNDETECTED.has(mutant.status)) continue
      const at = `${file}:${mutant.location.start.line}:${mutant.location.start.column}`
      const status = mutant.status === "Survived" ? "" : ` [${mutant.status}]`
      const [before, after] = around(oneLine(originalText(source, mutant.location), Infinity), oneLine(mutant.replacement ?? "", Infinity))
      survivors.push(`${at}  ${mutant.mutatorName}${status}\n    - ${before}\n    + ${after}`)
    }
  }
  const width = Math.max(...rows.map(([file]) => file.length), 4)
  out.push(counting ? "mutants per file (ignored ones are never run):" : "mutation score per file (killed + timeout) / (killed + timeout + survived):")
  for (const [file, score, counts] of rows) out.push(`  ${file.padEnd(width)}  ${score.padStart(11)}  ${counts}`)
  out.push(
    counting
      ? `  ${"total".padEnd(width)}  ${`${totalValid} to run`.padStart(11)}  ${totalMutants} mutants, ${totalIgnored} ignored`
      : `  ${"total".padEnd(width)}  ${(totalValid === 0 ? "-" : `${((100 * totalDetected) / totalValid).toFixed(2)}%`).padStart(11)}  ${totalDetected} detected of ${totalValid}, ${totalIgnored} ignored`
  )
  if (!counting) {
    out.push("", survivors.length === 0 ? "no surviving mutants" : `surviving mutants (${survivors.length}): each needs a test that fails with it, or a reason why it is equivalent`)
    out.push(...survivors.map((s) => `  ${s}`))
  }
  return out.join("\n")
}
