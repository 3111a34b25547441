// DATABASE_STATEMENT_TIMEOUT_MS: a statement that runs past it (here: one waiting on a lock
// another session holds) is cancelled by PostgreSQL and the request answered 503 with
// Retry-After, rather than holding a pooled connection, and the request, for as long as the
// lock is held; the error is logged. Migrations are not subject to it, nor to a timeout set on
// the database (as behind PgBouncer, where the start-up option does not reach PostgreSQL): a
// replica that starts while another holds the migrator's lock waits for it, however long. The
// real server, a process of its own; PostgreSQL only (the embedded database cannot cancel a
// statement).
import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import pg from 'pg';
import { migrateToLatest, openDatabase } from '../../src/db/database';
import { cleanUp, cliJson, startServer, tempDir, type ServerProcess } from '../e2e/support';
import { serverDatabase, serverUrl } from '../support/database';
import { SpecChecker } from '../support/spec-checker';

const url = serverUrl();
const onPostgres = url ? describe : describe.skip;
const TIMEOUT_MS = 400;
// The migration lock's key (migrateToLatest takes it, with the key Kysely's migrator used).
const MIGRATION_LOCK = '3853314791062309107';
// A safety net far above the timeout: a request still unanswered by then is hanging.
const REQUEST_DEADLINE_MS = 20_000;

let server: ServerProcess;
let database: { url: string; drop(): Promise<void> } | null = null;
let admin: pg.Client;
let env: Record<string, string>;

const cli = (args: string[]) => cliJson(args, env);

onPostgres('DATABASE_STATEMENT_TIMEOUT_MS', () => {
  beforeAll(async () => {
    database = await serverDatabase(url!, 'stmt');
    env = {
      DATABASE_URL: database.url,
      DATABASE_STATEMENT_TIMEOUT_MS: String(TIMEOUT_MS),
      ENCRYPTION_KEY: randomBytes(32).toString('hex'),
      LOG_LEVEL: 'info',
      OUTBOX_POLL_MS: '0',
      DATA_DIR: tempDir('cp-stmt-cli-'),
    };
    admin = new pg.Client({ connectionString: database.url });
    await admin.connect();
  }, 60_000);

  afterAll(async () => {
    await admin?.end().catch(() => undefined);
    await server?.stop();
    await cleanUp();
    await database?.drop();
  }, 60_000);

  /**
   * Starts a server on `databaseUrl` while `holder` holds the migration lock, and checks that
   * the server waits for it several timeouts long, then migrates once it is let go.
   */
  async function waitsForTheMigrationLock(holder: pg.Client, serverEnv: Record<string, string>): Promise<ServerProcess> {
    await holder.query(`select pg_advisory_lock(${MIGRATION_LOCK})`);
    const started = await startServer(serverEnv);
    // Once the server's migrator waits for the lock, it is held for several timeouts more: a
    // migration under the timeout would have been cancelled and the process ended.
    const deadline = Date.now() + 60_000;
    const waiting = () =>
      holder.query(`select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and wait_event = 'advisory'`);
    while ((await waiting()).rowCount === 0) {
      if (Date.now() > deadline) throw new Error(`the server never waited for the migration lock:\n${started.output().stdout}${started.output().stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    await new Promise((r) => setTimeout(r, 4 * TIMEOUT_MS));
    expect((await waiting()).rowCount).toBe(1);
    expect(started.output().stdout).not.toContain('database ready');
    await holder.query(`select pg_advisory_unlock(${MIGRATION_LOCK})`);
    await started.waitUntilHealthy();
    expect(started.output().stdout).toContain('database ready');
    return started;
  }

  it('migrates after another holder of the migration lock lets go, however long past the timeout', async () => {
    server = await waitsForTheMigrationLock(admin, { ...env, DATA_DIR: tempDir('cp-stmt-') });
  }, 120_000);

  it('waits as long when the timeout is set on the database, as behind PgBouncer', async () => {
    // Behind PgBouncer the start-up option never reaches PostgreSQL: the timeout is the
    // database's (or role's), on every connection, the migrator's included. A handle asking
    // for no timeout of its own stands for that here.
    const own = await serverDatabase(url!, 'stmtdb');
    const holder = new pg.Client({ connectionString: own.url });
    const handle = await openDatabase({ url: own.url, poolSize: 2 });
    try {
      await holder.connect();
      await holder.query(`alter database ${pg.escapeIdentifier(new URL(own.url).pathname.slice(1))} set statement_timeout = ${TIMEOUT_MS}`);
      const cut = await handle.db.executeQuery(sql`select pg_sleep(${(2 * TIMEOUT_MS) / 1000})`.compile(handle.db)).then(
        () => null,
        (err: Error) => err.message,
      );
      expect(cut).toMatch(/statement timeout/);

      await holder.query(`select pg_advisory_lock(${MIGRATION_LOCK})`);
      const migrated = migrateToLatest(handle.db);
      const outcome = migrated.then(
        () => 'migrated',
        (err: Error) => err.message,
      );
      await new Promise((r) => setTimeout(r, 4 * TIMEOUT_MS));
      const waiting = await holder.query(
        `select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and wait_event = 'advisory'`,
      );
      expect(waiting.rowCount).toBe(1);
      await holder.query(`select pg_advisory_unlock(${MIGRATION_LOCK})`);
      expect(await outcome).toBe('migrated');
    } finally {
      await holder.end().catch(() => undefined);
      await handle.close();
      await own.drop();
    }
  }, 120_000);

  it('answers a statement cut by the timeout 503 with Retry-After, logged at error, and serves again once the lock is gone', async () => {
    const boot = await cli(['bootstrap']);
    const created = await cli(['token', 'create', '--org', boot.organization_id, '--user', boot.user_id, '--name', 'timeout test']);
    const checker = new SpecChecker();
    const auditLog = async () => {
      const res = await fetch(`${server.baseUrl}/audit-log?limit=5`, {
        headers: { authorization: `Bearer ${created.api_token}`, 'x-organization-id': boot.organization_id },
        signal: AbortSignal.timeout(REQUEST_DEADLINE_MS),
      });
      const body: any = await res.json();
      const problems = checker.check('GET', '/audit-log', res.status, res.headers, body);
      if (problems.length > 0) throw new Error(`GET /audit-log answered against the spec:\n${problems.join('\n')}`);
      return { status: res.status, retryAfter: res.headers.get('retry-after'), body };
    };
    expect((await auditLog()).status).toBe(200);

    // Until this transaction ends, reading the audit log waits on the lock.
    await admin.query('begin');
    await admin.query('lock table audit_log in access exclusive mode');
    let cut: Awaited<ReturnType<typeof auditLog>>;
    try {
      cut = await auditLog();
    } finally {
      await admin.query('rollback');
    }
    expect(cut).toMatchObject({ status: 503, retryAfter: '5', body: { code: 'service_unavailable' } });
    expect(cut.body.detail).toMatch(/did not answer in time/);
    await server.waitForStdout((out) => out.includes('ran past its timeout'));
    const line = server
      .output()
      .stdout.split('\n')
      .find((l) => l.includes('ran past its timeout'));
    expect(JSON.parse(line!)).toMatchObject({ level: 50 });

    expect((await auditLog()).status).toBe(200);
  }, 60_000);
});
