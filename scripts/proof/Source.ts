import { spawnSync } from "node:child_process"

// The proof runs only on a committed tree and says which source it ran: the commit and the tree, before and after.

const git = (args: ReadonlyArray<string>, cwd: string) => {
  const result = spawnSync("git", args, { cwd, encoding: "utf8" })
  return { ok: result.status === 0, out: result.stdout.trim(), err: result.stderr.trim() }
}

export interface SourceIdentity {
  readonly commit: string
  readonly tree: string
}

/** None when the tree has uncommitted or untracked changes (or is no git checkout): the reason, with the remedy. */
export const sourceIdentity = (repo: string): { readonly identity?: SourceIdentity; readonly refusal?: string } => {
  const status = git(["status", "--porcelain", "--untracked-files=all"], repo)
  if (!status.ok) return { refusal: `not a git checkout (${status.err.split("\n")[0]}): run the proof from a clone of the repository` }
  if (status.out !== "") {
    const count = status.out.split("\n").length
    return {
      refusal: `the working tree has ${count} uncommitted or untracked change(s): commit or stash them (git stash -u), then run the proof again; it proves committed source only`
    }
  }
  return { identity: { commit: git(["rev-parse", "HEAD"], repo).out, tree: git(["rev-parse", "HEAD^{tree}"], repo).out } }
}
