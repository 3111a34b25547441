// A PostgreSQL cluster of one's own (initdb + pg_ctl on a free loopback port, in a temporary
// directory), for what must stop and start the database itself: the outage test
// (test/db/database-outage.test.ts) and the replica-and-faults harness (scripts/scale). Never the
// machine's shared server. PostgreSQL refuses to run as root, so when this process is root the
// binaries run as the `postgres` OS user (`runuser -u postgres --`), which then owns the directory.
//
// Every step is asynchronous: a harness stops and starts the database under load, and a
// blocked event loop would show up as the application's latency.
import { execFile } from 'node:child_process';
import { appendFileSync, chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Where Debian puts a major's binaries; PG_BIN overrides. */
export function postgresBin(): string | null {
  if (process.env.PG_BIN) return process.env.PG_BIN;
  for (const major of [17, 16, 15, 14]) {
    const dir = `/usr/lib/postgresql/${major}/bin`;
    if (existsSync(join(dir, 'initdb'))) return dir;
  }
  return null;
}

export interface PgCluster {
  port: number;
  /** `postgres://postgres@127.0.0.1:<port>/<database>` (the maintenance database by default). */
  url(database?: string): string;
  /** The data directory (and, beside it, the log). */
  dir: string;
  /** Whether the server should be running (after start, before stop). */
  readonly running: boolean;
  /** `pg_ctl start -w`: resolves once it accepts connections. */
  start(): Promise<void>;
  /** `pg_ctl stop -w`: `fast` ends sessions cleanly, `immediate` as a crash would (recovery at the next start). */
  stop(mode?: 'fast' | 'immediate'): Promise<void>;
  /** Runs one SQL statement as the superuser through psql (for CREATE DATABASE and the like). */
  sql(statement: string, database?: string): Promise<string>;
  /** The server's log so far (for error messages). */
  log(): Promise<string>;
  /** Stops it (immediate) and removes its files; safe to call twice. */
  destroy(): Promise<void>;
}

export interface PgClusterOptions {
  /** Extra `postgresql.conf` lines (`max_connections = 300`). */
  settings?: string[];
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** initdb's a fresh cluster and starts it. Throws when no PostgreSQL binaries are installed. */
export async function startPgCluster(options: PgClusterOptions = {}): Promise<PgCluster> {
  const bin = postgresBin();
  if (!bin) throw new Error('No PostgreSQL server binaries (/usr/lib/postgresql/<major>/bin); apt-get install -y postgresql, or set PG_BIN.');
  const asRoot = process.getuid?.() === 0;
  const dir = mkdtempSync(join(tmpdir(), 'cp-pg-'));
  if (asRoot) {
    const { stdout } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    chownSync(dir, Number(stdout.trim()), Number(gid.trim()));
  }
  const as = (file: string, args: string[]) =>
    asRoot ? run('runuser', ['-u', 'postgres', '--', join(bin, file), ...args], { cwd: dir }) : run(join(bin, file), args, { cwd: dir });
  const data = join(dir, 'data');
  const logFile = join(dir, 'postgres.log');
  const port = await freePort();
  let running = false;
  let destroyed = false;
  await as('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '-E', 'UTF8', '--locale=C', '--no-sync']);
  const conf = [
    `port = ${port}`,
    `listen_addresses = '127.0.0.1'`,
    `unix_socket_directories = '${dir}'`,
    // A scratch cluster: durability buys nothing here and costs the shared disk.
    'fsync = off',
    'synchronous_commit = off',
    'full_page_writes = off',
    // PgBouncer (1.18) refuses the `options` startup parameter the app's pool sends to ask
    // for UTC: a database that is UTC already needs nothing from its clients.
    `timezone = 'UTC'`,
    'max_connections = 200',
    'shared_buffers = 64MB',
    ...(options.settings ?? []),
  ];
  const cluster: PgCluster = {
    port,
    dir,
    get running() {
      return running;
    },
    url: (database = 'postgres') => `postgres://postgres@127.0.0.1:${port}/${database}`,
    async start() {
      await as('pg_ctl', ['-D', data, '-l', logFile, '-w', '-t', '60', 'start']);
      running = true;
    },
    async stop(mode = 'fast') {
      running = false;
      await as('pg_ctl', ['-D', data, '-m', mode, '-w', '-t', '60', 'stop']);
    },
    async sql(statement, database = 'postgres') {
      const { stdout } = await as('psql', [
        '-h',
        '127.0.0.1',
        '-p',
        String(port),
        '-U',
        'postgres',
        '-d',
        database,
        '-XAtq',
        '-v',
        'ON_ERROR_STOP=1',
        '-c',
        statement,
      ]);
      return stdout.trim();
    },
    async log() {
      const { stdout } = await run('tail', ['-n', '50', logFile]).catch(() => ({ stdout: '' }));
      return stdout;
    },
    async destroy() {
      if (destroyed) return;
      destroyed = true;
      if (existsSync(join(data, 'postmaster.pid'))) await as('pg_ctl', ['-D', data, '-m', 'immediate', '-w', '-t', '30', 'stop']).catch(() => undefined);
      running = false;
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    // Root may write a file of another user's; otherwise this process owns the directory anyway.
    appendFileSync(join(data, 'postgresql.conf'), `\n# scripts/bench/pg-cluster.ts\n${conf.join('\n')}\n`);
    await cluster.start();
  } catch (err) {
    await cluster.destroy();
    throw err;
  }
  return cluster;
}
