export { CONSOLE_CONFIG, CONSOLE_SESSION_TTL, ConsoleConfig } from "./ConsoleConfig.ts"
export { ConsoleRoutesLive } from "./ConsoleRoutes.ts"
export { CONTENT_SECURITY_POLICY, SESSION_COOKIE } from "./ConsoleSecurity.ts"
export { ConsoleSessions, ConsoleStorageUnavailable } from "./ConsoleSessions.ts"
