// The real server (a process of its own) on a PostgreSQL cluster of the test's own, which the
// test stops and starts: while the database is away every request the database would decide
// is answered 503 with Retry-After (the Error object, or JSON-RPC on the MCP endpoint), not a
// 401 nor a 500 nor a wait; readiness says so and liveness does not; once the database is back
// the same process serves again, its change listener listens again and its outbox delivers
// again. The machine's shared PostgreSQL is never touched (scripts/bench/pg-cluster.ts).
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { postgresBin, startPgCluster, type PgCluster } from '../../scripts/bench/pg-cluster';
import { LISTENER_NAME } from '../../src/db/database';
import { cleanUp, freePort, startServer, tempDir, type ServerProcess } from '../e2e/support';
import { startHttpReceiver } from '../support/peers';
import { SpecChecker } from '../support/spec-checker';

const withPostgres = postgresBin() ? describe : describe.skip;
// A safety net, far above anything expected: a request that has not answered by then hangs.
const REQUEST_DEADLINE_MS = 20_000;

let cluster: PgCluster;
let server: ServerProcess;
let receiver: Awaited<ReturnType<typeof startHttpReceiver>>;
let checker: SpecChecker;
let metricsUrl: string;
let token: string;
let org: string;
let mcp: { id: string; token: string };

interface Answer {
  status: number;
  headers: Headers;
  body: any;
}

async function send(
  method: string,
  path: string,
  options: { token?: string; org?: string; body?: unknown; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  if (options.org) headers['x-organization-id'] = options.org;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${server.baseUrl}${path}`, {
    method,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: AbortSignal.timeout(REQUEST_DEADLINE_MS),
  });
  const text = await res.text();
  const body = text && (res.headers.get('content-type') ?? '').includes('json') ? JSON.parse(text) : text;
  const problems = checker.check(method, path, res.status, res.headers, body === '' ? undefined : body);
  if (problems.length > 0) throw new Error(`${method} ${path} answered against the spec:\n${problems.join('\n')}`);
  return { status: res.status, headers: res.headers, body };
}

const mcpCall = (method: string, id: number) =>
  send('POST', `/mcp/${mcp.id}`, {
    token: mcp.token,
    headers: { accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
    body: { jsonrpc: '2.0', id, method, params: {} },
  });

const createConnector = () =>
  send('POST', '/connector', {
    token,
    org,
    body: { slug: `outage-${randomBytes(3).toString('hex')}`, name: 'Outage', mcp_url: 'https://mcp.outage.example/mcp', auth: { type: 'none' } },
  });

async function until<T>(what: string, probe: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  while (Date.now() < deadline) {
    last = await probe();
    if (done(last)) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`Timed out waiting for ${what}; last: ${JSON.stringify(last)}\n${server.output().stdout.slice(-3000)}`);
}

const logLines = () =>
  server
    .output()
    .stdout.split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as { level: number; msg: string });

withPostgres('the database stopped and started under a running server', () => {
  beforeAll(async () => {
    checker = new SpecChecker();
    cluster = await startPgCluster();
    await cluster.sql('create database cp');
    receiver = await startHttpReceiver();
    const metricsPort = await freePort();
    metricsUrl = `http://127.0.0.1:${metricsPort}`;
    const dataDir = tempDir('cp-outage-');
    server = await startServer({
      DATABASE_URL: cluster.url('cp'),
      ENCRYPTION_KEY: randomBytes(32).toString('hex'),
      DATA_DIR: dataDir,
      METRICS_PORT: String(metricsPort),
      LOG_LEVEL: 'info',
      OUTBOX_POLL_MS: '200',
      OUTBOUND_ALLOW_LOOPBACK: 'true',
      SLACK_WEBHOOK_HOSTS: '127.0.0.1',
      // Remembered for an hour unless told otherwise: only the listener's loss can explain asking the database.
      CREDENTIAL_CACHE_SECONDS: '3600',
    });
    await server.waitUntilHealthy();
    await until(
      'the bootstrap file',
      async () => existsSync(join(dataDir, 'bootstrap.json')),
      (found) => found,
    );
    const boot = JSON.parse(readFileSync(join(dataDir, 'bootstrap.json'), 'utf8')) as { api_token: string; organization_id: string };
    token = boot.api_token;
    org = boot.organization_id;
    const destination = await send('POST', '/notification-destination', {
      token,
      org,
      body: { name: 'Outage hook', type: 'slack', config: { webhook_url: `${receiver.url}/services/outage` }, event_types: ['connector.created'] },
    });
    expect(destination.status).toBe(201);
    const minted = await send('POST', '/user-toolbox/utbx_dyn_all/mcp', { token, org, body: { name: 'Outage client' } });
    expect(minted.status).toBe(201);
    mcp = { id: minted.body.mcp_server.id, token: minted.body.token };
  }, 180_000);

  afterAll(async () => {
    await server?.stop();
    await cleanUp();
    await receiver?.close();
    await cluster?.destroy();
  }, 60_000);

  it('delivers events before the outage', async () => {
    expect((await createConnector()).status).toBe(201);
    await until(
      'the first delivery',
      async () => receiver.requests.length,
      (n) => n >= 1,
    );
    // Remembered: the credential cache trusts what it read (the listener listens).
    for (let i = 0; i < 2; i += 1) expect((await send('GET', '/user/me', { token })).status).toBe(200);
    expect((await mcpCall('tools/list', 1)).status).toBe(200);
  }, 60_000);

  it('answers 503 with Retry-After while the database is stopped, on every path the database decides', async () => {
    await cluster.stop('fast');
    const unavailable = (answer: Answer) => {
      expect(answer.status).toBe(503);
      expect(Number(answer.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    };
    // A credential it had remembered: the lost listener made it forget, so the guard asks the database.
    const known = await send('GET', '/user/me', { token });
    unavailable(known);
    expect(known.body.code).toBe('service_unavailable');
    // A credential it never saw is not refused as unknown (401): nobody could say.
    const unknown = await send('GET', '/user/me', { token: `cpt_${randomBytes(32).toString('base64url')}` });
    unavailable(unknown);
    expect(unknown.body.code).toBe('service_unavailable');
    unavailable(await send('GET', '/notification-destination', { token, org }));
    unavailable(await createConnector());
    const rpc = await mcpCall('tools/list', 2);
    unavailable(rpc);
    expect(rpc.body).toMatchObject({ jsonrpc: '2.0', error: { code: -32603 } });
    // Readiness says not ready (so the balancer stops sending here); liveness stays alive.
    const ready = await fetch(`${metricsUrl}/ready`, { signal: AbortSignal.timeout(REQUEST_DEADLINE_MS) });
    expect(ready.status).toBe(503);
    expect(await ready.json()).toEqual({ status: 'database_unavailable' });
    expect((await send('GET', '/health')).status).toBe(200);
  }, 60_000);

  it('serves again once the database is back, without a restart: readiness, requests, the listener and the outbox', async () => {
    // The outbox has polled in vain meanwhile.
    await new Promise((r) => setTimeout(r, 1_000));
    await cluster.start();
    await until(
      'GET /user/me to answer 200',
      async () => (await send('GET', '/user/me', { token })).status,
      (status) => status === 200,
    );
    expect((await fetch(`${metricsUrl}/ready`)).status).toBe(200);
    expect((await mcpCall('tools/list', 3)).status).toBe(200);
    const delivered = receiver.requests.length;
    expect((await createConnector()).status).toBe(201);
    await until(
      'the delivery after the outage',
      async () => receiver.requests.length,
      (n) => n > delivered,
    );
    // The change listener listens again: a change made behind the server's back reaches it.
    const admin = new pg.Client({ connectionString: cluster.url('cp') });
    await admin.connect();
    try {
      await until(
        'the listener to reconnect',
        async () => (await admin.query(`select count(*)::int as n from pg_stat_activity where application_name = $1`, [LISTENER_NAME])).rows[0].n as number,
        (n) => n >= 1,
      );
      // Remembered again…
      for (let i = 0; i < 2; i += 1) expect((await send('GET', '/user/me', { token })).status).toBe(200);
      // …and forgotten when the token is revoked by a statement in the database (announced by its trigger).
      await admin.query(`update api_tokens set revoked_at = now() where token_hash is not null and revoked_at is null`);
      await until(
        'the revoked token to be refused',
        async () => (await send('GET', '/user/me', { token })).status,
        (status) => status === 401,
        15_000,
      );
    } finally {
      await admin.end();
    }
    expect(server.child.exitCode).toBeNull();
    const lines = logLines();
    // Said once each, not once per poll or per cache: the outbox's loss and return.
    expect(lines.filter((l) => l.msg.startsWith('outbox: the database cannot be reached'))).toHaveLength(1);
    expect(lines.filter((l) => l.msg.startsWith('outbox: the database answers again'))).toHaveLength(1);
    expect(lines.filter((l) => l.msg === 'outbox round failed')).toEqual([]);
  }, 120_000);
});
