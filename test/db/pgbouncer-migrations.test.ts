// Replicas that start together behind PgBouncer in transaction mode migrate one at a time: one
// applies every migration, the others wait for it and find nothing left. Kysely's own lock (a
// session lock taken outside a transaction) did not hold there: each statement may reach
// another server connection, and on PgBouncer 1.18 two of four migrators ran the first
// migration at once in every try. PostgreSQL only, through Debian's PgBouncer (.ci/run installs
// it; without it the test says so and is skipped).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chownSync, existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { migrateToLatest, openDatabase } from '../../src/db/database';
import { loadMigrations } from '../../src/db/migrations';
import { cleanUp, freePort, tempDir } from '../e2e/support';
import { serverDatabase, serverUrl } from '../support/database';

const PGBOUNCER = '/usr/sbin/pgbouncer';
const url = serverUrl();
if (url && !existsSync(PGBOUNCER)) process.stderr.write(`${__filename}: skipped, ${PGBOUNCER} is not installed (apt-get install pgbouncer)\n`);
const onPgBouncer = url && existsSync(PGBOUNCER) ? describe : describe.skip;
const MIGRATORS = 4;

let bouncer: ChildProcess | null = null;
let bouncerPort = 0;
let database: { url: string; drop(): Promise<void> } | null = null;

/** PgBouncer refuses to run as root: as the postgres user then, which owns its files. */
function runAs(): { uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null;
  const id = (flag: string) => Number(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim());
  return { uid: id('-u'), gid: id('-g') };
}

onPgBouncer('migrations behind PgBouncer in transaction mode', () => {
  beforeAll(async () => {
    const server = new URL(url!);
    const dir = tempDir('cp-pgbouncer-');
    bouncerPort = await freePort();
    const ini = join(dir, 'pgbouncer.ini');
    writeFileSync(
      ini,
      [
        '[databases]',
        `* = host=${server.hostname} port=${server.port || 5432}`,
        '[pgbouncer]',
        'listen_addr = 127.0.0.1',
        `listen_port = ${bouncerPort}`,
        'unix_socket_dir =',
        'auth_type = trust',
        `auth_file = ${join(dir, 'users.txt')}`,
        'pool_mode = transaction',
        // Fewer server connections than migrators: statements of different clients share them.
        'default_pool_size = 3',
        'ignore_startup_parameters = extra_float_digits,options',
        'logfile =',
        '',
      ].join('\n'),
    );
    writeFileSync(join(dir, 'users.txt'), `"${decodeURIComponent(server.username || 'postgres')}" ""\n`);
    const user = runAs();
    if (user) for (const file of [dir, ini, join(dir, 'users.txt')]) chownSync(file, user.uid, user.gid);
    bouncer = spawn(PGBOUNCER, [ini], { cwd: dir, stdio: 'ignore', ...(user ?? {}) });
    database = await serverDatabase(url!, 'pgb');
    // Up once a query goes through.
    const deadline = Date.now() + 20_000;
    for (;;) {
      const client = new pg.Client({ connectionString: throughBouncer(database.url) });
      try {
        await client.connect();
        await client.query('select 1');
        break;
      } catch (err) {
        if (Date.now() > deadline) throw new Error(`PgBouncer did not answer: ${(err as Error).message}`, { cause: err });
        await new Promise((r) => setTimeout(r, 100));
      } finally {
        await client.end().catch(() => undefined);
      }
    }
  }, 60_000);

  afterAll(async () => {
    bouncer?.kill('SIGINT');
    await database?.drop();
    await cleanUp();
  }, 60_000);

  const throughBouncer = (databaseUrl: string) => {
    const u = new URL(databaseUrl);
    u.hostname = '127.0.0.1';
    u.port = String(bouncerPort);
    return u.toString();
  };

  it('lets one of several migrators starting together apply the migrations, the others after it', async () => {
    // As replicas behind PgBouncer are configured: no named prepared statements (before 1.21).
    const handles = await Promise.all(
      Array.from({ length: MIGRATORS }, () => openDatabase({ url: throughBouncer(database!.url), poolSize: 2, preparedStatements: false })),
    );
    try {
      const applied = await Promise.all(handles.map((h) => migrateToLatest(h.db).then((names) => names.length)));
      expect([...applied].sort((a, b) => a - b)).toEqual([...Array(MIGRATORS - 1).fill(0), Object.keys(loadMigrations()).length]);
    } finally {
      await Promise.all(handles.map((h) => h.close()));
    }
  }, 120_000);
});
