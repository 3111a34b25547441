// What the benches that run each role in its own process share: child processes (started with a
// bare environment, stopped with SIGTERM then SIGKILL, all of them killed however the bench
// ends), free ports, waiting for a server to answer, the real server (dist/ built now, or
// src/main.ts through tsx), and the CPU a process or a database's PostgreSQL backends used.
//
// Clean-up: `cleanUpOnSignals()` once at start (SIGINT/SIGTERM stop every child, run the
// `atCleanup` tasks and exit 130; on any exit the children still running get SIGKILL), and
// `cleanup()` at the end of the bench, on success and on failure (so: register what must happen
// last, such as dropping the scratch database, first).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { onServer } from './scratch-database';

export const ROOT = resolve(__dirname, '..', '..');
export const HOST = '127.0.0.1';
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 10_000;

// ---------------------------------------------------------------------------------------------
// Child processes and clean-up

export interface Child {
  name: string;
  /** What stops it gracefully (SIGTERM unless started otherwise; PostgreSQL's fast shutdown is SIGINT). */
  stopSignal: NodeJS.Signals;
  process: ChildProcess;
  stderr: string[];
  exited: Promise<number | null>;
  exitCode: number | null | undefined;
}

const children = new Set<Child>();
const tempDirs: string[] = [];
const tasks: (() => Promise<void>)[] = [];
let cleaning: Promise<void> | null = null;

/** A program other than Node (`command`), run as another user (`uid`/`gid`, when this process may), stopped with `stopSignal`. */
export interface ChildOptions {
  command?: string;
  /** The project's root unless given (another user may not be allowed in there). */
  cwd?: string;
  uid?: number;
  gid?: number;
  stopSignal?: NodeJS.Signals;
}

/**
 * Node running `args` from the project's root with only PATH, HOME and `env` in its environment
 * (or `options.command`). Its stderr is kept (the last 50 chunks, for error messages); its stdout
 * is thrown away (a server's logs cost what they cost, but nobody reads them here), or piped when
 * `stdout` says so.
 */
export function startChild(name: string, args: string[], env: Record<string, string>, stdout: 'ignore' | 'pipe' = 'ignore', options: ChildOptions = {}): Child {
  const proc = spawn(options.command ?? process.execPath, args, {
    cwd: options.cwd ?? ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
    stdio: ['ignore', stdout, 'pipe'],
    uid: options.uid,
    gid: options.gid,
  });
  const child: Child = { name, stopSignal: options.stopSignal ?? 'SIGTERM', process: proc, stderr: [], exitCode: undefined, exited: Promise.resolve(null) };
  child.exited = new Promise((done) => {
    proc.once('exit', (code) => {
      // null after a signal; undefined only while running.
      child.exitCode = code;
      children.delete(child);
      done(code);
    });
  });
  proc.stderr?.setEncoding('utf8');
  proc.stderr?.on('data', (chunk: string) => {
    child.stderr.push(chunk);
    if (child.stderr.length > 50) child.stderr.shift();
  });
  children.add(child);
  return child;
}

export async function stopChild(child: Child): Promise<void> {
  if (child.exitCode !== undefined) return;
  child.process.kill(child.stopSignal);
  const timer = setTimeout(() => child.process.kill('SIGKILL'), STOP_TIMEOUT_MS);
  await child.exited;
  clearTimeout(timer);
}

/** A temporary directory, removed by `cleanup()`. */
export function tempDir(prefix = 'cp-bench-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

/** Runs `task` in `cleanup()`, after every child has stopped; the last registered runs first (a failure is reported, not thrown). */
export function atCleanup(task: () => Promise<void>): void {
  tasks.push(task);
}

/** Stops every child, runs the `atCleanup` tasks and removes the temporary directories; once. */
export function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    await Promise.all([...children].map(stopChild));
    for (const task of tasks.splice(0).reverse()) {
      await task().catch((err: unknown) => void process.stderr.write(`Clean-up: ${err instanceof Error ? err.message : String(err)}\n`));
    }
    for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  })();
  return cleaning;
}

let handling = false;
let signalled = false;

/** Whether SIGINT or SIGTERM arrived (after `cleanUpOnSignals`): a failure then is most likely its consequence. */
export const interrupted = (): boolean => signalled;

/** SIGINT and SIGTERM clean up and exit 130; any exit kills the children still running. */
export function cleanUpOnSignals(): void {
  if (handling) return;
  handling = true;
  // `on`, not `once`: tsx (the parent under `make bench`) relays a signal a second time when this
  // process is slow to acknowledge it, and a process left without a listener would exit at once,
  // before the database is dropped. (Should anything still kill it, the next run drops the
  // database, whose name carries this process's pid.)
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => {
      if (signalled) return;
      signalled = true;
      process.stderr.write(`\n${signal}: stopping the servers and dropping the database…\n`);
      void cleanup().finally(() => process.exit(130));
    });
  }
  // Last resort if something exits without clean-up: no server outlives the benchmark.
  process.on('exit', () => {
    for (const child of children) child.process.kill('SIGKILL');
  });
}

// ---------------------------------------------------------------------------------------------
// Ports, waiting, CPU

export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, HOST, () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

export async function waitUntilUp(child: Child, url: string): Promise<void> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (child.exitCode !== undefined) {
      throw new Error(`${child.name} exited with code ${child.exitCode} before answering:\n${child.stderr.join('')}`);
    }
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
      await res.arrayBuffer();
      if (res.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${child.name} did not answer ${url} within ${START_TIMEOUT_MS / 1000} s:\n${child.stderr.join('')}`);
}

/** The first line `child` writes on its stdout (started with stdout 'pipe'). */
export function firstLine(child: Child): Promise<string> {
  return new Promise((resolveLine, reject) => {
    const out = child.process.stdout;
    if (!out) return reject(new Error(`${child.name} has no stdout pipe`));
    let text = '';
    const timer = setTimeout(
      () => fail(new Error(`${child.name} wrote no line within ${START_TIMEOUT_MS / 1000} s:\n${child.stderr.join('')}`)),
      START_TIMEOUT_MS,
    );
    const onData = (chunk: Buffer) => {
      text += chunk.toString('utf8');
      const end = text.indexOf('\n');
      if (end >= 0) done(text.slice(0, end));
    };
    const onExit = () => fail(new Error(`${child.name} exited with code ${child.exitCode} before writing a line:\n${child.stderr.join('')}`));
    const off = () => {
      clearTimeout(timer);
      out.off('data', onData);
      child.process.off('exit', onExit);
      // Keep reading whatever follows, so that the child never blocks on a full pipe.
      out.resume();
    };
    const done = (line: string) => {
      off();
      resolveLine(line);
    };
    const fail = (err: Error) => {
      off();
      reject(err);
    };
    out.on('data', onData);
    child.process.once('exit', onExit);
  });
}

/** Descriptors a process holds open, from /proc (Linux); NaN when unknown. */
export function openFds(pid: number | undefined): number {
  if (!pid) return NaN;
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return NaN;
  }
}

/** CPU time (ms) a process has used, from /proc (Linux); null elsewhere. */
export function cpuMs(pid: number): number | null {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8')
      .replace(/^.*\) /, '')
      .split(' ');
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command; in ticks of 1/100 s.
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return null;
  }
}

/**
 * CPU time (ms) used so far by each backend of the database `name`, read from /proc (so only when
 * PostgreSQL runs on this machine, in this pid namespace); null when that is not possible.
 */
export async function backendCpuMs(name: string | null | undefined): Promise<Map<number, number> | null> {
  if (!name || !existsSync('/proc')) return null;
  const pids = await onServer((admin) => admin.query<{ pid: number }>('select pid from pg_stat_activity where datname = $1', [name])).catch(() => null);
  if (!pids) return null;
  const usage = new Map<number, number>();
  for (const { pid } of pids.rows) {
    try {
      if (!readFileSync(`/proc/${pid}/stat`, 'utf8').includes(' (postgres) ')) return null;
    } catch {
      continue;
    }
    const ms = cpuMs(pid);
    if (ms !== null) usage.set(pid, ms);
  }
  return usage.size > 0 ? usage : null;
}

/** CPU ms the backends used between two `backendCpuMs` readings; a backend that started in between counts whole, one that ended is missed. */
export function backendCpuSpent(before: Map<number, number> | null, after: Map<number, number> | null): number | null {
  if (after === null) return null;
  return [...after].reduce((sum, [pid, ms]) => sum + ms - (before?.get(pid) ?? 0), 0);
}

// ---------------------------------------------------------------------------------------------
// The real server

export function tsxArgs(file: string): string[] {
  return ['--import', 'tsx', file];
}

/** dist/src/main.js after a fresh `tsc -p tsconfig.build.json`; src/main.ts through tsx when that fails. */
export function realServerArgs(): { args: string[]; how: string } {
  if (process.env.BENCH_SOURCE === '1') return { args: tsxArgs('src/main.ts'), how: 'src/main.ts via tsx (BENCH_SOURCE=1)' };
  const build = spawnSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.build.json'], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 180_000,
  });
  if (build.status === 0 && existsSync(join(ROOT, 'dist', 'src', 'main.js'))) {
    return { args: ['dist/src/main.js'], how: 'dist/src/main.js (built now with tsc -p tsconfig.build.json)' };
  }
  process.stderr.write(`Build failed; running src/main.ts through tsx instead.\n${build.stdout ?? ''}${build.stderr ?? ''}\n`);
  return { args: tsxArgs('src/main.ts'), how: 'src/main.ts via tsx (the build failed)' };
}

export interface RealServer {
  child: Child;
  baseUrl: string;
  dataDir: string;
}

/** The real server on a free port of 127.0.0.1 with a DATA_DIR of its own, once /health answers. */
export async function startRealServer(
  args: string[],
  env: Record<string, string>,
  extra: Record<string, string> = {},
  nodeArgs: string[] = [],
): Promise<RealServer> {
  const port = await freePort();
  const dataDir = tempDir();
  const child = startChild('the real server', [...nodeArgs, ...args], {
    ...env,
    PORT: String(port),
    HOST,
    DATA_DIR: dataDir,
    // What the server assumes without it; set so that no environment of the caller's changes it.
    BASE_URL: `http://${HOST}:${port}`,
    ...extra,
  });
  const baseUrl = `http://${HOST}:${port}`;
  await waitUntilUp(child, `${baseUrl}/health`);
  return { child, baseUrl, dataDir };
}
