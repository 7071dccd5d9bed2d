import { Effect } from "effect"
import { existsSync, mkdirSync } from "node:fs"
import { join } from "node:path"
import { type Browser, chromium, type Page } from "playwright-core"

/** Debian's Chromium (`.ci/run` installs it when missing); `CHROMIUM_PATH` names another build. */
export const chromiumPath = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium"

/** Where a failed browser test leaves its screenshot. */
export const artifactsDir = join(new URL("../../../../", import.meta.url).pathname, "test-artifacts")

/** A headless Chromium for the scope (closed with it). */
export const browser = Effect.acquireRelease(
  Effect.promise(() =>
    chromium.launch({
      executablePath: chromiumPath,
      headless: true,
      // Tests run as root in CI, where Chromium's sandbox cannot start.
      args: ["--no-sandbox", "--disable-dev-shm-usage"]
    })
  ),
  (b) => Effect.promise(() => b.close())
)

export interface BrowserPage {
  readonly page: Page
  /** Messages the page's console printed, Content-Security-Policy violations included. */
  readonly consoleErrors: Array<string>
  /** Top-level navigations so far: a section that refreshes itself must not add one. */
  readonly navigations: () => number
}

/**
 * A fresh page (its own cookies) whose screenshot is kept under test-artifacts/ when the test using it fails (or
 * always, with KEEP_SCREENSHOTS=1).
 */
export const newPage = (b: Browser, name: string) =>
  Effect.acquireRelease(
    Effect.promise(async (): Promise<BrowserPage> => {
      const context = await b.newContext()
      const page = await context.newPage()
      const consoleErrors: Array<string> = []
      page.on("console", (message) => {
        if (message.type() === "error") consoleErrors.push(message.text())
      })
      page.on("pageerror", (error) => consoleErrors.push(error.message))
      let navigations = 0
      page.on("framenavigated", (frame) => {
        if (frame === page.mainFrame()) navigations++
      })
      return { page, consoleErrors, navigations: () => navigations }
    }),
    ({ page }, exit) =>
      Effect.promise(async () => {
        if (exit._tag === "Failure" || process.env.KEEP_SCREENSHOTS === "1") {
          if (!existsSync(artifactsDir)) mkdirSync(artifactsDir, { recursive: true })
          await page.screenshot({ path: join(artifactsDir, `${name}.png`), fullPage: true }).catch(() => undefined)
        }
        await page.context().close()
      })
  )

export const inPage = <A>(f: () => Promise<A>) => Effect.promise(f)
