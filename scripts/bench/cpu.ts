import { readdirSync, readFileSync, readlinkSync } from "node:fs"

// CPU time (seconds) read from /proc, so a run can say where its two cores went: the load generator,
// the backend process, PostgreSQL (and pgbench). Linux only; elsewhere every figure reads 0.

const TICKS = 100 // USER_HZ on Linux

const statOf = (pid: number | "self"): ReadonlyArray<string> | undefined => {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "utf8")
    // The command name may contain spaces; fields after it are space-separated.
    return text.slice(text.lastIndexOf(")") + 2).split(" ")
  } catch {
    return undefined
  }
}

// Field numbers of proc(5) minus 3 (pid and comm precede the split).
const UTIME = 11, STIME = 12, CUTIME = 13, CSTIME = 14

const seconds = (fields: ReadonlyArray<string> | undefined, ...at: ReadonlyArray<number>) =>
  fields === undefined ? 0 : at.reduce((sum, i) => sum + Number(fields[i] ?? 0), 0) / TICKS

/** This process's own CPU (the load generator). */
export const selfCpu = () => seconds(statOf("self"), UTIME, STIME)

/** CPU of this process's children that have exited and been reaped (pgbench runs). */
export const reapedChildrenCpu = () => seconds(statOf("self"), CUTIME, CSTIME)

export const processCpu = (pid: number) => seconds(statOf(pid), UTIME, STIME)

/**
 * CPU of this process's threads named `name` (their `comm`), e.g. JavaScriptCore's compiler thread "JITWorker": how
 * much of a run's CPU went to compiling rather than running the code.
 */
export const selfThreadsCpu = (name: string) => {
  let total = 0
  try {
    for (const task of readdirSync("/proc/self/task")) {
      try {
        const text = readFileSync(`/proc/self/task/${task}/stat`, "utf8")
        if (text.slice(text.indexOf("(") + 1, text.lastIndexOf(")")) !== name) continue
        total += seconds(text.slice(text.lastIndexOf(")") + 2).split(" "), UTIME, STIME)
      } catch {
        // the thread ended meanwhile
      }
    }
  } catch {
    // no /proc
  }
  return total
}

const ppidOf = (fields: ReadonlyArray<string> | undefined) => Number(fields?.[1] ?? 0)

/**
 * The cluster listening on `port`: its postmaster, every child of it, and what the postmaster collected
 * from exited children (pgbench's connections end with each run). Other clusters on the machine (a test
 * run, for instance) are not counted.
 */
export const postgresCpu = (port: number) => {
  let pids: Array<number> = []
  try {
    pids = readdirSync("/proc").filter((name) => /^\d+$/.test(name)).map(Number)
  } catch {
    return 0
  }
  const postmaster = pids.find((pid) => {
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")
      return argv[0]?.endsWith("postgres") === true && argv.some((arg, i) => arg === "-p" && argv[i + 1] === String(port))
    } catch {
      return false
    }
  })
  if (postmaster === undefined) return 0
  let total = seconds(statOf(postmaster), UTIME, STIME, CUTIME, CSTIME)
  for (const pid of pids) {
    const fields = statOf(pid)
    if (ppidOf(fields) === postmaster) total += seconds(fields, UTIME, STIME)
  }
  return total
}

/** Busy CPU seconds of the whole machine (all cores), to show what else was running. */
export const machineBusyCpu = () => {
  try {
    const cpu = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number)
    const idle = (cpu[3] ?? 0) + (cpu[4] ?? 0)
    return (cpu.reduce((a, b) => a + b, 0) - idle) / TICKS
  } catch {
    return 0
  }
}

export interface CpuSplit {
  readonly [who: string]: number
}

/** Runs `work` and reports each probe's CPU seconds over it, with the wall time. */
export const measure = async <A>(
  probes: Readonly<Record<string, () => number>>,
  work: () => Promise<A>,
  /** Wait before the second reading (not counted as wall time): exited connections must be reaped first. */
  settleMs = 0
): Promise<{ readonly result: A; readonly wall: number; readonly cpu: CpuSplit }> => {
  const before = Object.fromEntries(Object.entries(probes).map(([name, probe]) => [name, probe()]))
  const started = performance.now()
  const result = await work()
  const wall = (performance.now() - started) / 1000
  if (settleMs > 0) await new Promise((resolve) => setTimeout(resolve, settleMs))
  const cpu = Object.fromEntries(Object.entries(probes).map(([name, probe]) => [name, probe() - before[name]!]))
  return { result, wall, cpu }
}

/** "client 31% · backend 92% · postgres 61% (of 200%)" */
export const describeCpu = (cpu: CpuSplit, wall: number) =>
  Object.entries(cpu).map(([name, s]) => `${name} ${Math.round((100 * s) / wall)}%`).join(" · ") + " (of 200%)"

/** Peak resident set size (VmHWM of /proc/<pid>/status) in MB, 0 when the process is gone or not on Linux. */
export const peakRssMb = (pid: number | "self") => {
  try {
    const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmHWM:"))
    const kb = Number(line?.split(/\s+/)[1] ?? 0)
    return Math.round((kb / 1024) * 10) / 10
  } catch {
    return 0
  }
}

/** The live children of `pid` (from each process's parent id in /proc). */
export const childrenOf = (pid: number): Array<number> => {
  try {
    return readdirSync("/proc").filter((name) => /^\d+$/.test(name)).map(Number).filter((child) => ppidOf(statOf(child)) === pid)
  } catch {
    return []
  }
}

/** Whether `pid` holds a TCP socket listening on `port` (its fds against /proc/net/tcp and tcp6). */
export const listensOn = (pid: number, port: number) => {
  try {
    const inodes = new Set(
      readdirSync(`/proc/${pid}/fd`).flatMap((fd) => {
        try {
          const match = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`))
          return match === null ? [] : [match[1]!]
        } catch {
          return []
        }
      })
    )
    const hexPort = port.toString(16).toUpperCase().padStart(4, "0")
    return ["/proc/net/tcp", "/proc/net/tcp6"].some((table) => {
      try {
        return readFileSync(table, "utf8").split("\n").slice(1).some((line) => {
          const fields = line.trim().split(/\s+/)
          // local_address ends with :PORT, st 0A is LISTEN, field 9 is the inode.
          return fields[1]?.endsWith(`:${hexPort}`) === true && fields[3] === "0A" && inodes.has(fields[9] ?? "")
        })
      } catch {
        return false
      }
    })
  } catch {
    return false
  }
}
