import { Effect } from "effect"
import { spawnSync } from "node:child_process"
import * as NFS from "node:fs"
import * as NodePath from "node:path"

/** A fresh pair of private roots under /tmp/rfs-*, removed with everything in it when the scope closes. */
export const tempRoots = Effect.acquireRelease(
  Effect.sync(() => {
    const base = NFS.mkdtempSync("/tmp/rfs-")
    NFS.chmodSync(base, 0o700)
    const staging = NodePath.join(base, "staging")
    const storage = NodePath.join(base, "storage")
    NFS.mkdirSync(staging, { mode: 0o700 })
    NFS.mkdirSync(storage, { mode: 0o700 })
    return { base, staging, storage }
  }),
  ({ base }) => Effect.sync(() => NFS.rmSync(base, { recursive: true, force: true }))
)

/** Names in a directory, sorted. */
export const names = (dir: string) => Effect.sync(() => NFS.readdirSync(dir).sort())

/**
 * Makes `dir` refuse new files even to this process: `chmod 0500` for an ordinary user, the immutable
 * attribute for root (root ignores mode bits); undone when the scope closes so the roots can be removed.
 */
export const makeUnwritable = (dir: string) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      if (process.getuid?.() === 0) {
        const result = spawnSync("chattr", ["+i", dir])
        if (result.status !== 0) throw new Error("chattr +i failed: root needs an immutable directory for this test")
      } else {
        NFS.chmodSync(dir, 0o500)
      }
    }),
    () =>
      Effect.sync(() => {
        if (process.getuid?.() === 0) spawnSync("chattr", ["-i", dir])
        else NFS.chmodSync(dir, 0o700)
      })
  )
