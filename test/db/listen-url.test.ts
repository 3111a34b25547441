// DATABASE_LISTEN_URL: the change listener connects where it says, not where the pool does (behind
// PgBouncer in transaction mode the pool's URL cannot keep a LISTEN). Told apart here by the
// PostgreSQL role each URL names: the listener's connection is the only one of its role, and a
// revocation announced on the database still reaches the server through it.
// PostgreSQL only (PGlite is one process's database).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { LISTENER_NAME } from '../../src/db/database';
import { cleanUp, cliJson, startServer, tempDir, type ServerProcess } from '../e2e/support';
import { onServer, serverDatabase, serverUrl } from '../support/database';
import { SpecChecker } from '../support/spec-checker';

const url = serverUrl();
const onPostgres = url ? describe : describe.skip;
// Long enough for a loaded machine; the server would otherwise remember for an hour.
const NOTICE_MS = 15_000;
const listenRole = `cp_test_listen_${randomBytes(4).toString('hex')}`;

let server: ServerProcess;
let database: { url: string; drop(): Promise<void> } | null = null;
let admin: pg.Client;
let env: Record<string, string>;

const cli = (args: string[]) => cliJson(args, env);

onPostgres('DATABASE_LISTEN_URL', () => {
  beforeAll(async () => {
    database = await serverDatabase(url!, 'listen');
    await onServer(url!, (c) => c.query(`create role ${listenRole} login`));
    const listenUrl = new URL(database.url);
    listenUrl.username = listenRole;
    env = {
      DATABASE_URL: database.url,
      DATABASE_LISTEN_URL: listenUrl.toString(),
      ENCRYPTION_KEY: randomBytes(32).toString('hex'),
      LOG_LEVEL: 'warn',
      OUTBOX_POLL_MS: '0',
      CREDENTIAL_CACHE_SECONDS: '3600',
      DATA_DIR: tempDir('cp-listen-cli-'),
    };
    server = await startServer({ ...env, DATA_DIR: tempDir('cp-listen-') });
    await server.waitUntilHealthy();
    admin = new pg.Client({ connectionString: database.url });
    await admin.connect();
  }, 120_000);

  afterAll(async () => {
    await admin?.end().catch(() => undefined);
    await server?.stop();
    await cleanUp();
    await database?.drop();
    await onServer(url!, (c) => c.query(`drop role if exists ${listenRole}`));
  }, 60_000);

  it('listens as the listen URL says, and hears a revocation through it', async () => {
    const sessions = await admin.query<{ usename: string; application_name: string }>(
      `select usename, application_name from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()`,
    );
    expect(sessions.rows.filter((s) => s.application_name === LISTENER_NAME)).toEqual([{ usename: listenRole, application_name: LISTENER_NAME }]);
    expect(sessions.rows.filter((s) => s.usename === listenRole && s.application_name !== LISTENER_NAME)).toEqual([]);

    const boot = await cli(['bootstrap']);
    const created = await cli(['token', 'create', '--org', boot.organization_id, '--user', boot.user_id, '--name', 'listen test']);
    const checker = new SpecChecker();
    const me = async () => {
      const res = await fetch(`${server.baseUrl}/user/me`, { headers: { authorization: `Bearer ${created.api_token}` }, signal: AbortSignal.timeout(10_000) });
      const body = await res.json();
      const problems = checker.check('GET', '/user/me', res.status, res.headers, body);
      if (problems.length > 0) throw new Error(`GET /user/me answered against the spec:\n${problems.join('\n')}`);
      return res.status;
    };
    // Remembered for an hour from here: only the notification can explain a refusal soon after.
    expect(await me()).toBe(200);
    await cli(['token', 'revoke', created.token_id]);
    const deadline = Date.now() + NOTICE_MS;
    let status = await me();
    while (status !== 401 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
      status = await me();
    }
    expect(status).toBe(401);
  }, 60_000);
});
