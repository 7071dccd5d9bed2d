import { existsSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

/**
 * The repository's root: the nearest folder at or above `from` that holds both `package.json` and `migrations/`.
 * Files the backend reads at run time (migrations, the console's stylesheet, `.data/`) are found from it rather than
 * by a fixed number of `..` from a module, because `bun run start` runs one bundle (`.build/backend.js`) in which
 * every module's `import.meta.url` is the bundle's.
 */
export const findRepositoryRoot = (from: string): string => {
  let dir = from
  while (true) {
    if (existsSync(join(dir, "package.json")) && existsSync(join(dir, "migrations"))) return dir
    const parent = dirname(dir)
    if (parent === dir) throw new Error(`no repository root (package.json and migrations/) at or above ${from}`)
    dir = parent
  }
}

/** The repository's root, found from the module that asks (a source file or the bundle): see `findRepositoryRoot`. */
export const repositoryRootOf = (moduleUrl: string): string => findRepositoryRoot(dirname(fileURLToPath(moduleUrl)))
