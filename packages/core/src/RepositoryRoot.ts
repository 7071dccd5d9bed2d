import { existsSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

/**
 * The repository's root: the nearest folder at or above `from` that holds both `package.json` and `migrations/`, or
 * undefined when there is none (core bundled into something else, such as the client for Node).
 * Files the backend reads at run time (migrations, the console's stylesheet, `.data/`) are found from it rather than
 * by a fixed number of `..` from a module, because `bun run start` runs one bundle (`.build/backend.js`) in which
 * every module's `import.meta.url` is the bundle's.
 */
export const findRepositoryRoot = (from: string): string | undefined => {
  let dir = from
  while (true) {
    if (existsSync(join(dir, "package.json")) && existsSync(join(dir, "migrations"))) return dir
    const parent = dirname(dir)
    if (parent === dir) return undefined
    dir = parent
  }
}

/**
 * The repository's root, found from the module that asks (a source file or the bundle): see `findRepositoryRoot`.
 * Without one, the module's own folder: importing never fails, and a file read from there later is simply missing.
 */
export const repositoryRootOf = (moduleUrl: string): string => {
  const from = dirname(fileURLToPath(moduleUrl))
  return findRepositoryRoot(from) ?? from
}
