// Spawning helpers for the end-to-end tests: the operator CLI and the server run as real
// processes (node with tsx's loader), each test file with its own temporary DATA_DIR.
// Nothing here is mocked; every child and temporary directory is tracked so afterAll can
// remove them even when a test fails half-way.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export const ROOT = resolve(__dirname, '..', '..');
const HOST = '127.0.0.1';

const children = new Set<ChildProcess>();
const tempDirs = new Set<string>();

/**
 * The environment a user's shell would give the processes: no Jest variables (NODE_ENV=test,
 * NODE_OPTIONS with vm modules), no DATABASE_URL from the developer's shell (that would point
 * the CLI at a real server), plus what the test sets.
 */
export function cleanEnv(extra: Record<string, string | undefined>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const name of ['PATH', 'HOME', 'TMPDIR', 'LANG', 'SYSTEMROOT']) {
    if (process.env[name] !== undefined) env[name] = process.env[name];
  }
  for (const [name, value] of Object.entries(extra)) if (value !== undefined) env[name] = value;
  return env;
}

export function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.add(dir);
  return dir;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, HOST, () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** node --import tsx <file> …: one process (no tsx wrapper in between), so signals reach the program itself. */
function spawnTs(file: string, args: string[], env: NodeJS.ProcessEnv): ChildProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', file, ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

function spawnNode(cwd: string, file: string, env: NodeJS.ProcessEnv): ChildProcess {
  const child = spawn(process.execPath, [file], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `scripts/cli.ts … --json` with `env` (cleaned) and answers its JSON; a failed run throws with its stderr. */
export async function cliJson(args: string[], env: Record<string, string | undefined>): Promise<any> {
  const run = await runCli([...args, '--json'], cleanEnv(env));
  if (run.code !== 0) throw new Error(`cli ${args.join(' ')} failed:\n${run.stderr}`);
  return JSON.parse(run.stdout);
}

/** Runs `scripts/cli.ts …` to the end (killed after `timeoutMs`). */
export function runCli(args: string[], env: NodeJS.ProcessEnv, timeoutMs = 60_000): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawnTs('scripts/cli.ts', args, env);
    let stdout = '';
    let stderr = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`cli ${args.join(' ')} did not finish within ${timeoutMs} ms.\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, timeoutMs);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

export interface ServerProcess {
  child: ChildProcess;
  port: number;
  baseUrl: string;
  /** Everything written so far. */
  output(): { stdout: string; stderr: string };
  /** Resolves with the exit code once the process has exited. */
  exited: Promise<number | null>;
  /** Waits until `test` holds for stdout (the process must keep running meanwhile). */
  waitForStdout(test: (stdout: string) => boolean, timeoutMs?: number): Promise<void>;
  /** The same for stderr, where the server writes what is for the person at the terminal. */
  waitForStderr(test: (stderr: string) => boolean, timeoutMs?: number): Promise<void>;
  /** Waits until GET /health answers 200. */
  waitUntilHealthy(timeoutMs?: number): Promise<void>;
  /** SIGTERM; resolves with the exit code and how long the exit took (SIGKILL after `timeoutMs`). */
  stop(timeoutMs?: number): Promise<{ code: number | null; signal: NodeJS.Signals | null; ms: number }>;
}

/** Starts `src/main.ts` (or, given `built`, a build's `dist/src/main.js` in that checkout) on a free port of 127.0.0.1. */
export async function startServer(env: Record<string, string | undefined>, built?: { root: string }): Promise<ServerProcess> {
  const port = await freePort();
  const serverEnv = cleanEnv({ ...env, PORT: String(port), HOST });
  const child = built ? spawnNode(built.root, 'dist/src/main.js', serverEnv) : spawnTs('src/main.ts', [], serverEnv);
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  let exitCode: number | null | undefined;
  let exitSignal: NodeJS.Signals | null = null;
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code, signal) => {
      exitCode = code;
      exitSignal = signal;
      resolve(code);
    }),
  );
  const describe = () => `stdout:\n${stdout}\nstderr:\n${stderr}`;

  async function poll(what: string, timeoutMs: number, check: () => Promise<boolean> | boolean): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (exitCode !== undefined) throw new Error(`The server exited (code ${exitCode}, signal ${exitSignal}) while waiting for ${what}.\n${describe()}`);
      if (await check()) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}.\n${describe()}`);
  }

  return {
    child,
    port,
    baseUrl: `http://${HOST}:${port}`,
    output: () => ({ stdout, stderr }),
    exited,
    waitForStdout: (test, timeoutMs = 60_000) => poll('its output', timeoutMs, () => test(stdout)),
    waitForStderr: (test, timeoutMs = 60_000) => poll('its stderr', timeoutMs, () => test(stderr)),
    waitUntilHealthy: (timeoutMs = 60_000) =>
      poll('GET /health', timeoutMs, async () => {
        try {
          const res = await fetch(`http://${HOST}:${port}/health`, { signal: AbortSignal.timeout(2_000) });
          await res.arrayBuffer();
          return res.status === 200;
        } catch {
          return false;
        }
      }),
    async stop(timeoutMs = 10_000) {
      const started = Date.now();
      if (exitCode === undefined) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const code = await exited;
      clearTimeout(timer);
      return { code, signal: exitSignal, ms: Date.now() - started };
    },
  };
}

/** GET with a bearer token; the JSON body (or null) and the status. */
export async function getJson(url: string, token: string | null): Promise<{ status: number; body: any }> {
  const res = await fetch(url, {
    headers: token ? { Authorization: `Bearer ${token}` } : {},
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return { status: res.status, body };
}

/** For afterAll: kills every child still running (SIGKILL after a grace period) and removes the temp dirs. */
export async function cleanUp(): Promise<void> {
  await Promise.all(
    [...children].map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
          child.once('exit', () => {
            clearTimeout(timer);
            resolve();
          });
          child.kill('SIGTERM');
        }),
    ),
  );
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
  tempDirs.clear();
}
