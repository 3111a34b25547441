import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { loadConfig } from '../../src/config';
import { startTestApp, type TestApp } from '../support/app';
import { webhookSubscription } from '../support/event-delivery';
import { usePeers } from '../support/peers';
import { connectMember, memberWithToken, mintMcpServer } from '../support/mcp';
import { startApiKeyUpstream, useUpstream } from '../support/upstream-mcp';
import { customConnector } from '../fixtures/connections';
import { DEFAULT_LOGGING_DELIVERY, loggingDeliveries } from '../../src/areas/logging-destinations/logging-destinations.consumer';
import { DEFAULT_OUTBOX_OPTIONS, OutboxDispatcher } from '../../src/events/outbox';
import { startLogBackend } from '../support/log-receivers';

/*
 * `/metrics` and `/ready` on the metrics port of a real app, scraped as Prometheus would after
 * real traffic: API calls, an MCP tools/call through a minted server to an upstream on
 * loopback, an event delivered to a webhook receiver, refusals by the rate limit.
 */

const KEY = 'key-metrics-Zq81';
const upstream = useUpstream(() => startApiKeyUpstream({ keys: { [KEY]: 'alice' } }));
const peers = usePeers();

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The text exposition format (version 0.0.4): `# TYPE` lines and samples; enough of it for these families. */
function parse(text: string): { types: Map<string, string>; samples: Sample[] } {
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line.startsWith('# TYPE ')) {
      const [name, type] = line.slice(7).split(' ');
      types.set(name as string, type as string);
      continue;
    }
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) throw new Error(`Not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const pair of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1] as string] = pair[2] as string;
    samples.push({ name: match[1] as string, labels, value: Number(match[3]) });
  }
  return { types, samples };
}

async function scrape(app: TestApp) {
  const res = await fetch(`${app.metricsUrl}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return parse(await res.text());
}

/** The sum of a family's samples whose labels include `labels`. */
function total(scraped: { samples: Sample[] }, name: string, labels: Record<string, string> = {}): number {
  return scraped.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((sum, s) => sum + s.value, 0);
}

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ metrics: true });
}, 60_000);
afterAll(() => t.close());

describe('/metrics on the metrics port', () => {
  it('counts requests per operation and status class, with a latency histogram', async () => {
    const org = await t.factories.org();
    const before = await scrape(t);
    for (let i = 0; i < 3; i++) expect((await t.as(org).get('/user/me')).status).toBe(200);
    expect((await t.as(org).get('/team/team_00000000000000000000000000')).status).toBe(404);
    expect((await t.call('GET', '/no/such/path')).status).toBe(404);
    const after = await scrape(t);
    expect(after.types.get('cp_http_requests_total')).toBe('counter');
    expect(after.types.get('cp_http_request_duration_seconds')).toBe('histogram');
    const moved = (labels: Record<string, string>) => total(after, 'cp_http_requests_total', labels) - total(before, 'cp_http_requests_total', labels);
    expect(moved({ operation: 'getCurrentUser', status: '2xx' })).toBe(3);
    expect(moved({ operation: 'getTeam', status: '4xx' })).toBe(1);
    expect(moved({ operation: 'none', status: '4xx' })).toBe(1);
    const count = (s: { samples: Sample[] }) => total(s, 'cp_http_request_duration_seconds_count', { operation: 'getCurrentUser' });
    expect(count(after) - count(before)).toBe(3);
    // Cumulative buckets: the +Inf bucket holds every observation.
    expect(total(after, 'cp_http_request_duration_seconds_bucket', { operation: 'getCurrentUser', le: '+Inf' })).toBe(count(after));
    // Labels are operation ids and status classes only: nothing that names a caller, an organization or a token.
    const labelNames = new Set(after.samples.filter((s) => s.name.startsWith('cp_http_')).flatMap((s) => Object.keys(s.labels)));
    expect([...labelNames].sort()).toEqual(['le', 'operation', 'status']);
    expect(after.samples.some((s) => Object.values(s.labels).some((v) => v.includes(org.orgId)))).toBe(false);
  });

  it('counts credential cache lookups, hits among them', async () => {
    const org = await t.factories.org();
    const before = await scrape(t);
    for (let i = 0; i < 3; i++) expect((await t.as(org).get('/user/me')).status).toBe(200);
    const after = await scrape(t);
    expect(after.types.get('cp_credential_cache_lookups_total')).toBe('counter');
    const moved = (result: string) =>
      total(after, 'cp_credential_cache_lookups_total', { cache: 'caller', result }) -
      total(before, 'cp_credential_cache_lookups_total', { cache: 'caller', result });
    expect(moved('miss') + moved('hit')).toBe(3);
    expect(moved('miss')).toBeGreaterThanOrEqual(1);
  });

  it('counts MCP tool calls per connector and outcome, with their duration', async () => {
    const org = await t.factories.org();
    const alice = await memberWithToken(t, org.orgId);
    const slug = await customConnector(t, org.orgId, {
      slug: 'metered',
      mcp_url: `${new URL(upstream.peer.url).origin}/mcp`,
      auth: { type: 'api_key', placement: 'header', name: 'Authorization', value_prefix: 'Bearer ' },
    });
    await connectMember(t, { token: alice.token, org: org.orgId }, slug, KEY);
    const server = await mintMcpServer(t, { token: alice.token, org: org.orgId });
    const before = await scrape(t);
    const client = new Client({ name: 'metrics-test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${t.url}/mcp/${server.id}`), { requestInit: { headers: { Authorization: `Bearer ${server.token}` } } }),
    );
    try {
      const who = (await client.callTool({ name: 'metered__whoami', arguments: {} })) as CallToolResult;
      expect(who.isError).toBeFalsy();
      await expect(client.callTool({ name: 'metered__nope', arguments: {} })).rejects.toMatchObject({ code: -32602 });
    } finally {
      await client.close();
    }
    const after = await scrape(t);
    expect(after.types.get('cp_mcp_tool_calls_total')).toBe('counter');
    expect(after.types.get('cp_mcp_tool_call_duration_seconds')).toBe('histogram');
    const moved = (name: string, labels: Record<string, string>) => total(after, name, labels) - total(before, name, labels);
    expect(moved('cp_mcp_tool_calls_total', { connector: 'metered', outcome: 'succeeded' })).toBe(1);
    // A name no tool answers to has no connector: counted apart, under a fixed label, not under the name the client sent.
    expect(moved('cp_mcp_tool_calls_total', { connector: 'none', outcome: 'refused' })).toBe(1);
    expect(after.samples.some((s) => s.name.startsWith('cp_mcp_') && Object.values(s.labels).some((v) => v.includes('nope')))).toBe(false);
    expect(moved('cp_mcp_tool_call_duration_seconds_count', { connector: 'metered' })).toBeGreaterThanOrEqual(1);
    // The MCP endpoint's requests are counted as its operation too.
    expect(moved('cp_http_requests_total', { operation: 'postMcpMessage', status: '2xx' })).toBeGreaterThanOrEqual(2);
  });

  it('counts outbox deliveries per consumer and shows the outbox lag', async () => {
    const org = await t.factories.org();
    const hook = await webhookSubscription(t, peers.receiver, org, ['role.created']);
    expect((await t.as(org).op('createRole', { body: { name: 'Metered', permissions: ['member:view'] } })).status).toBe(201);
    const before = await scrape(t);
    expect(before.types.get('cp_outbox_lag_seconds')).toBe('gauge');
    // An event is waiting: the lag is its age, at least 0.
    expect(total(before, 'cp_outbox_lag_seconds')).toBeGreaterThanOrEqual(0);
    expect((await hook.deliver()).map((e) => e.type)).toEqual(['role.created']);
    const after = await scrape(t);
    const moved =
      total(after, 'cp_outbox_deliveries_total', { consumer: 'notification-destinations', outcome: 'delivered' }) -
      total(before, 'cp_outbox_deliveries_total', { consumer: 'notification-destinations', outcome: 'delivered' });
    expect(moved).toBeGreaterThanOrEqual(1);
    expect(total(after, 'cp_outbox_lag_seconds')).toBe(0);
  });

  it('counts deliveries to notification destinations per destination type and outcome', async () => {
    const org = await t.factories.org();
    const hook = await webhookSubscription(t, peers.receiver, org, ['role.created']);
    const before = await scrape(t);
    peers.receiver.respondWith({ status: 503, body: 'down' });
    expect((await t.as(org).post('/role', { name: `Failing ${Date.now()}`, permissions: ['role:view'] })).status).toBe(201);
    await hook.deliver();
    const after = await scrape(t);
    expect(after.types.get('cp_destination_deliveries_total')).toBe('counter');
    const moved = (labels: Record<string, string>) =>
      total(after, 'cp_destination_deliveries_total', labels) - total(before, 'cp_destination_deliveries_total', labels);
    expect(moved({ kind: 'notification', type: 'slack', outcome: 'failed' })).toBeGreaterThanOrEqual(1);
    expect(moved({ kind: 'notification', type: 'slack', outcome: 'delivered' })).toBe(0);
  });

  it('counts deliveries to logging destinations per destination type and outcome', async () => {
    const backend = await startLogBackend('http');
    try {
      const org = await t.factories.org();
      await t.db.updateTable('organizations').set({ plan: 'enterprise' }).where('id', '=', org.orgId).execute();
      const client = t.as(org);
      const created = await client.op('createLoggingDestination', {
        body: { name: 'Audit', type: 'http', config: { url: `${backend.url}/logs` }, record_types: ['audit'] },
      });
      expect(created.status).toBe(201);
      const consumer = loggingDeliveries(t.deps, DEFAULT_LOGGING_DELIVERY);
      const dispatcher = new OutboxDispatcher(t.db, [consumer], t.deps.logger, DEFAULT_OUTBOX_OPTIONS);
      const deliver = async (now: Date) => {
        for (let round = 0; round < 100; round++) {
          const r = await dispatcher.runOnce(now);
          await consumer.settled();
          if (r.fannedOut === 0 && (r.totals.started ?? 0) === 0) return;
        }
      };
      const before = await scrape(t);
      backend.failNext({ status: 503, body: 'busy' });
      expect((await client.op('createTeam', { body: { name: `Team ${Date.now()}` } })).status).toBe(201);
      await deliver(new Date());
      // The retry, once its backoff has passed.
      await deliver(new Date(Date.now() + 60 * 60_000));
      const after = await scrape(t);
      const moved = (labels: Record<string, string>) =>
        total(after, 'cp_destination_deliveries_total', labels) - total(before, 'cp_destination_deliveries_total', labels);
      expect(moved({ kind: 'logging', type: 'http', outcome: 'failed' })).toBe(1);
      expect(moved({ kind: 'logging', type: 'http', outcome: 'delivered' })).toBe(1);
      // Labels are kinds, types and outcomes only: nothing that names a destination or an organization.
      const labelNames = new Set(after.samples.filter((s) => s.name === 'cp_destination_deliveries_total').flatMap((s) => Object.keys(s.labels)));
      expect([...labelNames].sort()).toEqual(['kind', 'outcome', 'type']);
    } finally {
      await backend.close();
    }
  });

  it('shows the PostgreSQL pool when on a server', async () => {
    const scraped = await scrape(t);
    if (!t.deps.pool) {
      expect(scraped.types.has('cp_db_pool_connections')).toBe(false);
      return;
    }
    for (const name of ['cp_db_pool_connections', 'cp_db_pool_idle_connections', 'cp_db_pool_waiting_clients']) expect(scraped.types.get(name)).toBe('gauge');
    expect(total(scraped, 'cp_db_pool_connections')).toBeGreaterThanOrEqual(1);
  });

  it('is not on the public API port', async () => {
    const res = await t.call('GET', '/metrics');
    expect(res.status).toBe(404);
    expect(res.body.code).toBe('not_found');
    expect((await t.call('GET', '/ready')).status).toBe(404);
  });

  it('answers other paths on the metrics port 404', async () => {
    expect((await fetch(`${t.metricsUrl}/health`)).status).toBe(404);
    expect((await fetch(`${t.metricsUrl}/metrics`, { method: 'POST' })).status).toBe(405);
  });
});

describe('rate-limit refusals', () => {
  let limited: TestApp;
  beforeAll(async () => {
    limited = await startTestApp({ metrics: true, env: { RATE_LIMIT_REQUESTS: '2' } });
  }, 60_000);
  afterAll(() => limited.close());

  it('are counted by budget', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push((await limited.call('GET', '/user/me')).status);
    expect(statuses.filter((s) => s === 429).length).toBe(2);
    const scraped = await scrape(limited);
    expect(scraped.types.get('cp_rate_limit_refusals_total')).toBe('counter');
    expect(total(scraped, 'cp_rate_limit_refusals_total', { budget: 'address' })).toBe(2);
    expect(total(scraped, 'cp_http_requests_total', { status: '429' })).toBe(2);
  });
});

describe('/ready on the metrics port', () => {
  it('answers 200 while the database answers, 503 when it does not; /health stays 200', async () => {
    const app = await startTestApp({ metrics: true });
    let closed = false;
    try {
      const ready = await fetch(`${app.metricsUrl}/ready`);
      expect(ready.status).toBe(200);
      expect(await ready.json()).toEqual({ status: 'ready' });
      // The database goes away under the running app.
      await app.database.close();
      closed = true;
      const notReady = await fetch(`${app.metricsUrl}/ready`);
      expect(notReady.status).toBe(503);
      expect(await notReady.json()).toEqual({ status: 'database_unavailable' });
      // The metrics still arrive, the lag that needs the database as NaN.
      const scraped = await scrape(app);
      expect(total(scraped, 'cp_outbox_lag_seconds')).toBeNaN();
      expect(scraped.types.get('cp_http_requests_total')).toBe('counter');
      // Liveness is not readiness: the process is alive, and restarting it would not bring the database back.
      expect((await app.call('GET', '/health')).status).toBe(200);
    } finally {
      if (closed) (app.database as { close: () => Promise<void> }).close = async () => undefined;
      await app.close();
    }
  });

  it('answers 503 while the server drains', async () => {
    const app = await startTestApp({ metrics: true });
    try {
      expect((await fetch(`${app.metricsUrl}/ready`)).status).toBe(200);
      app.drain();
      const res = await fetch(`${app.metricsUrl}/ready`);
      expect(res.status).toBe(503);
      expect(await res.json()).toEqual({ status: 'draining' });
    } finally {
      await app.close();
    }
  });
});

describe('METRICS_PORT', () => {
  it('is off unless set, loopback unless told, and never the API port', () => {
    const base = { NODE_ENV: 'test', ENCRYPTION_KEY: '0'.repeat(64), DATA_DIR: '/tmp/cp-metrics-config' };
    expect(loadConfig(base).metrics).toEqual({ port: null, host: '127.0.0.1' });
    expect(loadConfig({ ...base, METRICS_PORT: '9464' }).metrics).toEqual({ port: 9464, host: '127.0.0.1' });
    expect(loadConfig({ ...base, METRICS_PORT: '9464', METRICS_HOST: '0.0.0.0' }).metrics).toEqual({ port: 9464, host: '0.0.0.0' });
    expect(() => loadConfig({ ...base, PORT: '9000', METRICS_PORT: '9000' })).toThrow(/METRICS_PORT must differ from PORT/);
    expect(() => loadConfig({ ...base, METRICS_PORT: 'nine' })).toThrow(/METRICS_PORT/);
  });
});
