/** The middle element of `items` ordered by `key` (the upper one of the two middles for an even count). */
export const medianBy = <A>(items: ReadonlyArray<A>, key: (item: A) => number): A =>
  [...items].sort((a, b) => key(a) - key(b))[Math.floor(items.length / 2)]!

/** The middle value (the upper one of the two middles for an even count). */
export const median = (values: ReadonlyArray<number>): number => medianBy(values, (value) => value)
