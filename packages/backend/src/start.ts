import { accessSync, constants, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync } from "node:fs"
import { join } from "node:path"

// `bun run start`: runs the backend (main.ts and everything it imports) as one bundle, in this process. One bundle
// instead of some 280 modules transpiled at start: about 45 MB less memory, at start and under load, and a faster
// start (docs/operations.md, "Memory"). The bundle is built once per state of the sources, under
// `.build/<hash of the inputs>/`; with WORKERS above 1 the supervised copies run the very bundle their supervisor ran
// (BACKEND_BUNDLE), even if the sources changed since.

const root = new URL("../../../", import.meta.url).pathname
const buildDir = join(root, ".build")
const BUNDLE = "BACKEND_BUNDLE"
// Bundles of other inputs are removed once unused this long: a process that started from one has long loaded it.
const KEEP_OLD_MS = 60 * 60 * 1000

/**
 * What the bundle is made of: every source file of every package, the manifests and the lockfile (about 20 ms), and
 * where the checkout is (the bundler writes some dependencies' own paths into it, such as ioredis's `__dirname`).
 */
const inputsHash = () => {
  const hasher = new Bun.CryptoHasher("sha256")
  hasher.update(root)
  hasher.update("\0")
  const files = [
    ...new Bun.Glob("packages/*/src/**/*.ts").scanSync({ cwd: root }),
    ...new Bun.Glob("packages/*/package.json").scanSync({ cwd: root }),
    "package.json",
    "bun.lock",
    "tsconfig.json"
  ].sort()
  for (const file of files) {
    hasher.update(file)
    hasher.update("\0")
    hasher.update(readFileSync(join(root, file)))
    hasher.update("\0")
  }
  return hasher.digest("hex").slice(0, 24)
}

const removeOthers = (keep: string) => {
  for (const name of readdirSync(buildDir)) {
    const other = join(buildDir, name)
    try {
      if (other !== keep && Date.now() - statSync(other).mtimeMs > KEEP_OLD_MS) rmSync(other, { recursive: true, force: true })
    } catch {
      // Removed by another start meanwhile.
    }
  }
}

const bundleFor = (inputs: string): string => {
  const dir = join(buildDir, inputs)
  const bundle = join(dir, "main.js")
  if (existsSync(bundle)) {
    // In use: its age counts from now.
    utimesSync(dir, new Date(), new Date())
    return bundle
  }
  // In a process of its own: the bundler's memory (about 100 MB at its peak) is returned when it exits.
  const scratch = join(buildDir, `scratch-${process.pid}`)
  const built = Bun.spawnSync(
    [process.execPath, "build", "--target=bun", "--sourcemap=linked", `--outdir=${scratch}`, main],
    { stdout: "ignore", stderr: "inherit" }
  )
  if (built.exitCode !== 0) {
    rmSync(scratch, { recursive: true, force: true })
    console.error(`the backend could not be built (bun build exited with ${built.exitCode})`)
    process.exit(1)
  }
  // Renamed into place whole (the bundle and its source map): a process that starts meanwhile never reads half a
  // file; when another start got there first, its identical build stays.
  try {
    renameSync(scratch, dir)
  } catch (error) {
    rmSync(scratch, { recursive: true, force: true })
    if (!existsSync(bundle)) throw error
  }
  removeOthers(dir)
  return bundle
}

/** Whether `.build/` can be written here: a read-only checkout (a container's read-only file system) cannot. */
const writable = () => {
  try {
    mkdirSync(buildDir, { recursive: true })
    accessSync(buildDir, constants.W_OK)
    return true
  } catch {
    return false
  }
}

const main = join(root, "packages/backend/src/main.ts")
const inherited = process.env[BUNDLE]
if (inherited !== undefined && process.env.WORKER_INDEX !== undefined && existsSync(inherited)) {
  await import(inherited)
} else if (writable()) {
  const bundle = bundleFor(inputsHash())
  process.env[BUNDLE] = bundle
  await import(bundle)
} else {
  // The same code from its sources: it only costs memory and start-up time.
  console.error(`${buildDir} cannot be written: running packages/backend/src/main.ts from its sources instead of one bundle`)
  await import(main)
}
