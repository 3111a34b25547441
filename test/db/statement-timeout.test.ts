// DATABASE_STATEMENT_TIMEOUT_MS: a statement that runs past it (here: one waiting on a lock
// another session holds) is cancelled by PostgreSQL and the request answered 503 with
// Retry-After, rather than holding a pooled connection, and the request, for as long as the
// lock is held; the error is logged. Migrations are not subject to it: a replica that starts
// while another holds the migrator's lock waits for it, however long. The real server, a
// process of its own; PostgreSQL only (the embedded database cannot cancel a statement).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { cleanUp, cliJson, startServer, tempDir, type ServerProcess } from '../e2e/support';
import { serverDatabase, serverUrl } from '../support/database';
import { SpecChecker } from '../support/spec-checker';

const url = serverUrl();
const onPostgres = url ? describe : describe.skip;
const TIMEOUT_MS = 400;
// Kysely's migration lock (its PostgresAdapter's advisory lock key).
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

  it('migrates after another holder of the migration lock lets go, however long past the timeout', async () => {
    await admin.query(`select pg_advisory_lock(${MIGRATION_LOCK})`);
    server = await startServer({ ...env, DATA_DIR: tempDir('cp-stmt-') });
    // Once the server's migrator waits for the lock, it is held for several timeouts more: a
    // migration under the timeout would have been cancelled and the process ended.
    const deadline = Date.now() + 60_000;
    const waiting = () =>
      admin.query(`select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and wait_event = 'advisory'`);
    while ((await waiting()).rowCount === 0) {
      if (Date.now() > deadline) throw new Error(`the server never waited for the migration lock:\n${server.output().stdout}${server.output().stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    await new Promise((r) => setTimeout(r, 4 * TIMEOUT_MS));
    expect((await waiting()).rowCount).toBe(1);
    expect(server.output().stdout).not.toContain('database ready');
    await admin.query(`select pg_advisory_unlock(${MIGRATION_LOCK})`);
    await server.waitUntilHealthy();
    expect(server.output().stdout).toContain('database ready');
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
