/**
 * The published reference server @modelcontextprotocol/server-everything as an upstream: a child
 * process on a free loopback port, Streamable HTTP (with sessions, POST/GET/DELETE /mcp) or SSE
 * (GET /sse + POST /message).
 */
import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '../../..');
const ENTRY = path.join(ROOT, 'node_modules/@modelcontextprotocol/server-everything/dist/index.js');
const LOOPBACK_ONLY = path.join(__dirname, 'loopback-only.cjs');
const PATHS = { streamableHttp: '/mcp', sse: '/sse' } as const;

export interface EverythingServer {
  /** The MCP endpoint: `http://127.0.0.1:<port>/mcp` (streamableHttp) or `/sse` (sse). */
  url: string;
  port: number;
  transport: 'streamableHttp' | 'sse';
  /** The last few KB the server wrote to stderr. */
  stderr(): string;
  close(): Promise<void>;
}

/** A port nothing listens on right now (listen on 0, read it, close). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function answers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => {
      socket.destroy();
      resolve(false);
    });
  });
}

/**
 * Spawns the reference server and waits (at most `timeoutMs`, default 40 s: it is a large
 * program and starts slowly on a busy machine) until it listens; on `port` when given (the
 * same server started again: an upstream restart, its sessions gone).
 */
export async function startEverythingServer(
  transport: 'streamableHttp' | 'sse',
  options: { timeoutMs?: number; port?: number } = {},
): Promise<EverythingServer> {
  const port = options.port ?? (await freePort());
  const child = spawn(process.execPath, ['-r', LOOPBACK_ONLY, ENTRY, transport], {
    env: { ...process.env, PORT: String(port), NODE_OPTIONS: '' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (chunk: string) => {
    err = (err + chunk).slice(-8192);
  });
  let exited = child.exitCode !== null;
  const exit = new Promise<void>((resolve) => {
    child.once('exit', () => {
      exited = true;
      resolve();
    });
  });
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);

  const close = async () => {
    process.removeListener('exit', killOnExit);
    if (exited) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
    await exit;
    clearTimeout(timer);
  };

  const deadline = Date.now() + (options.timeoutMs ?? 40_000);
  for (;;) {
    if (exited) {
      await close();
      throw new Error(`server-everything (${transport}) exited before listening: ${err.trim()}`);
    }
    if (await answers(port)) break;
    if (Date.now() > deadline) {
      await close();
      throw new Error(`server-everything (${transport}) did not listen on ${port} within ${options.timeoutMs ?? 40_000} ms: ${err.trim()}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { url: `http://127.0.0.1:${port}${PATHS[transport]}`, port, transport, stderr: () => err, close };
}
