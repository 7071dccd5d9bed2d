import { mkdirSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

// Sanitized evidence of a proof run: scenarios, their checks, processes (names, pids, ports), timings and the
// clean-up. Only what is written here leaves the run: never a token, an address, a body or a key.

export interface Check {
  readonly scenario: string
  readonly name: string
  readonly ok: boolean
  /** Counts, ids and codes only. */
  readonly detail?: string
}

export interface ScenarioResult {
  readonly scenario: string
  readonly ok: boolean
  readonly checks: number
  readonly failed: number
  readonly seconds: number
  /** From the successful restart to the last piece of work in its final state. */
  readonly recoverySeconds?: number
  /** Per family: requests under one idempotency key that may have reached the provider (2xx, held open or abandoned; a 5xx answer is no delivery) beyond the first. */
  readonly duplicates?: Readonly<Record<string, number>>
  readonly error?: string
}

export class Evidence {
  readonly checks: Array<Check> = []
  readonly scenarios: Array<ScenarioResult> = []
  readonly notes: Record<string, unknown> = {}

  check(scenario: string, name: string, ok: boolean, detail?: string): boolean {
    this.checks.push({ scenario, name, ok, ...(detail === undefined ? {} : { detail }) })
    const mark = ok ? "ok  " : "FAIL"
    console.error(`  ${mark} [${scenario}] ${name}${detail === undefined ? "" : ` (${detail})`}`)
    return ok
  }

  failedIn(scenario: string): number {
    return this.checks.filter((c) => c.scenario === scenario && !c.ok).length
  }

  countIn(scenario: string): number {
    return this.checks.filter((c) => c.scenario === scenario).length
  }

  get ok(): boolean {
    return this.checks.length > 0 && this.checks.every((c) => c.ok) && this.scenarios.every((s) => s.ok)
  }

  /** Writes evidence.json into a new folder outside the repository; returns its path. */
  write(extra: Record<string, unknown>): string {
    const dir = join(tmpdir(), `delivery-proof-evidence-${new Date().toISOString().replaceAll(":", "-")}`)
    mkdirSync(dir, { recursive: true, mode: 0o700 })
    const path = join(dir, "evidence.json")
    writeFileSync(path, `${JSON.stringify({ ok: this.ok, ...extra, scenarios: this.scenarios, checks: this.checks, notes: this.notes }, null, 2)}\n`, { mode: 0o600 })
    return path
  }

  table(): string {
    const rows = [["scenario", "checks", "result", "recovery", "duplicate deliveries"]]
    for (const s of this.scenarios) {
      rows.push([
        s.scenario,
        `${s.checks - s.failed}/${s.checks}`,
        s.ok ? "pass" : "FAIL",
        s.recoverySeconds === undefined ? "-" : `${s.recoverySeconds.toFixed(1)} s`,
        s.duplicates === undefined ? "-" : Object.entries(s.duplicates).map(([family, n]) => `${family} ${n}`).join(", ")
      ])
    }
    const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)))
    return rows.map((row) => row.map((cell, i) => cell.padEnd(widths[i]!)).join("  ").trimEnd()).join("\n")
  }
}
