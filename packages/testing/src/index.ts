export * from "./PgCluster.ts"
export * from "./TestDatabase.ts"
export * from "./LoopbackProvider.ts"
export * from "./CountingSql.ts"
