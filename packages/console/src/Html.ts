/**
 * HTML built from tagged templates: every interpolated value is escaped unless it is already `Html` (made by
 * this tag or `trusted`), so text from the database (tenant names, codes) can never become markup.
 */
export interface Html {
  readonly html: string
}

const isHtml = (value: unknown): value is Html =>
  typeof value === "object" && value !== null && "html" in value && typeof (value as Html).html === "string"

const entities: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;" }

export const escape = (text: string): string => text.replace(/[&<>"']/g, (c) => entities[c]!)

type Interpolation = Html | string | number | null | undefined | false | ReadonlyArray<Interpolation>

const render = (value: Interpolation): string => {
  if (value === null || value === undefined || value === false) return ""
  if (Array.isArray(value)) return value.map(render).join("")
  if (isHtml(value)) return value.html
  return escape(String(value))
}

export const html = (strings: TemplateStringsArray, ...values: ReadonlyArray<Interpolation>): Html => ({
  html: strings.reduce((out, part, i) => out + part + (i < values.length ? render(values[i]!) : ""), "")
})

/** Markup written in this package's own code, never from input. */
export const trusted = (markup: string): Html => ({ html: markup })
