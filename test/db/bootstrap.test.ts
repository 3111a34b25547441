// Two replicas starting at the same moment on one empty PostgreSQL database: both migrate and
// both try the first-start bootstrap, and exactly one organization (with one token) results.
// PGlite is a single process's database, so this runs on a PostgreSQL server only (make test
// runs test/db there too).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { cleanEnv, cleanUp, runCli, startServer, tempDir } from '../e2e/support';
import { serverDatabase, serverUrl } from '../support/database';

const url = serverUrl();
const onServerOnly = url ? it : it.skip;
let drop: () => Promise<void> = async () => undefined;

afterAll(async () => {
  await cleanUp();
  await drop();
});

onServerOnly(
  'creates one organization when two servers start together on an empty database',
  async () => {
    const database = await serverDatabase(url!, 'bootstrap');
    drop = database.drop;
    const databaseUrl = database.url;
    const env = { DATABASE_URL: databaseUrl, ENCRYPTION_KEY: randomBytes(32).toString('hex'), LOG_LEVEL: 'warn', OUTBOX_POLL_MS: '0' };
    const servers = await Promise.all([startServer({ ...env, DATA_DIR: tempDir('cp-a-') }), startServer({ ...env, DATA_DIR: tempDir('cp-b-') })]);
    await Promise.all(servers.map((s) => s.waitUntilHealthy()));

    const announced = servers.filter((s) => s.output().stderr.includes('First start: created an organization'));
    expect(announced).toHaveLength(1);
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    try {
      const counts = await client.query<{ organizations: number; tokens: number; settings: number }>(
        `select (select count(*)::int from organizations) as organizations, (select count(*)::int from api_tokens) as tokens,
              (select count(*)::int from settings where key = 'bootstrap') as settings`,
      );
      expect(counts.rows[0]).toEqual({ organizations: 1, tokens: 1, settings: 1 });
    } finally {
      await client.end();
    }
    await Promise.all(servers.map((s) => s.stop()));
  },
  120_000,
);

onServerOnly(
  'lets the operator CLI bootstrap a PostgreSQL database into a DATA_DIR that does not exist yet',
  async () => {
    const database = await serverDatabase(url!, 'bootstrap_cli');
    try {
      const dataDir = join(tempDir('cp-cli-'), 'not', 'there', 'yet');
      const run = await runCli(
        ['bootstrap', '--json'],
        cleanEnv({ DATABASE_URL: database.url, DATA_DIR: dataDir, ENCRYPTION_KEY: randomBytes(32).toString('hex') }),
      );
      expect(run.code).toBe(0);
      const file = join(dataDir, 'bootstrap.json');
      expect(existsSync(file)).toBe(true);
      expect(statSync(file).mode & 0o777).toBe(0o600);
      expect(statSync(dataDir).mode & 0o777).toBe(0o700);
      expect(JSON.parse(readFileSync(file, 'utf8')).api_token).toMatch(/^cpt_/);
    } finally {
      await database.drop();
    }
  },
  60_000,
);
