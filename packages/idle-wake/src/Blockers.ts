import { type Blocker, type BlockerCode, MAX_BLOCKER_IDS } from "./Protocol.ts"

// Stryker disable next-line EqualityOperator,ConditionalExpression: the codes are a Map's keys, never equal, so the equal branch is never taken
const byCodeName = ([a]: readonly [string, unknown], [b]: readonly [string, unknown]) => (a < b ? -1 : a > b ? 1 : 0)

/** One finding: a code, the ids it concerns (if any row can be named) and how many there are. */
export interface BlockerEntry {
  readonly code: BlockerCode
  readonly ids?: ReadonlyArray<string> | undefined
  readonly count?: number | undefined
}

/** One blocker per code: its ids merged, sorted and bounded, `count` the full number of them. */
export const groupBlockers = (entries: ReadonlyArray<BlockerEntry>): ReadonlyArray<Blocker> => {
  const byCode = new Map<BlockerCode, { ids: Set<string>; count: number; hasIds: boolean; hasCount: boolean }>()
  for (const entry of entries) {
    const group = byCode.get(entry.code) ?? { ids: new Set<string>(), count: 0, hasIds: false, hasCount: false }
    if (entry.ids !== undefined) {
      group.hasIds = true
      for (const id of entry.ids) group.ids.add(id)
    }
    if (entry.count !== undefined) {
      group.hasCount = true
      group.count += entry.count
    }
    byCode.set(entry.code, group)
  }
  return [...byCode.entries()]
    .sort(byCodeName)
    .map(([code, group]): Blocker => {
      const ids = [...group.ids].sort()
      const count = group.hasCount ? Math.max(group.count, ids.length) : ids.length
      return group.hasIds
        ? { code, ids: ids.slice(0, MAX_BLOCKER_IDS), count }
        : group.hasCount
        ? { code, count }
        : { code }
    })
}
