import { randomBytes } from 'node:crypto';
import { decodeTime } from 'ulid';
import type { components } from '../../generated/openapi';
import { loggingDeliveries, type LoggingDeliveryOptions, DEFAULT_LOGGING_DELIVERY } from '../../src/areas/logging-destinations/logging-destinations.consumer';
import { traceIdOf } from '../../src/areas/logging-destinations/logging-destinations.formats';
import { DEFAULT_OUTBOX_OPTIONS, OutboxDispatcher } from '../../src/events/outbox';
import type { ToolCallRecord } from '../../src/mcp/tool-call-records';
import { newId } from '../../src/lib/ids';
import { startTestApp, type TestApp } from '../support/app';
import { startLogBackend, splitConcatenatedJson, type LogBackend } from '../support/log-receivers';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { customConnector } from '../fixtures/connections';
import { connectMember, mintMcpServer } from '../support/mcp';
import { startApiKeyUpstream, useUpstream } from '../support/upstream-mcp';

/*
 * Audit entries and tool-call records on their way out: written with the change (or by the
 * MCP runtime's record writer), handed over by the outbox, and delivered by the logging
 * worker to log backends on loopback, each of which checks its wire format as the vendor
 * documents it. Rounds run explicitly with a chosen clock, so backoff is tested without
 * waiting.
 */

type Create = components['schemas']['LoggingDestinationCreate'];

const HEC_TOKEN = 'c0ffee00-1d4e-4f8a-b7c5-2e0d9a6f1b3c';
const DD_KEY = 'dd0c1f5e7a9b2d4c6e8f0a1b3c5d7e9f';
/** Something a tool was called with: it must never leave the server. */
const ARGUMENT_SECRET = 'arg-value-that-must-not-leave';

const UPSTREAM_KEY = 'key-logging-Lg7Qw2';
const upstream = useUpstream(() => startApiKeyUpstream({ keys: { [UPSTREAM_KEY]: 'alice' } }));

let t: TestApp;
let splunk: LogBackend;
let datadog: LogBackend;
let otlp: LogBackend;
let plain: LogBackend;
beforeAll(async () => {
  [splunk, datadog, otlp, plain] = await Promise.all([
    startLogBackend('splunk_hec', { secret: HEC_TOKEN }),
    startLogBackend('datadog', { secret: DD_KEY }),
    startLogBackend('otlp_http'),
    startLogBackend('http'),
  ]);
  t = await startTestApp({ env: { DATADOG_LOGS_INTAKE_URL: `${datadog.url}/{site}/api/v2/logs`, OUTBOUND_TIMEOUT_MS: '3000' } });
});
afterAll(async () => {
  await t.close();
  await Promise.all([splunk, datadog, otlp, plain].map((b) => b.close()));
});

const unique = () => randomBytes(5).toString('hex');

/** The outbox worker with the logging consumer, as the server runs it; `deliver` runs rounds until nothing is left to do now. */
function worker(options: Partial<LoggingDeliveryOptions> = {}) {
  const consumer = loggingDeliveries(t.deps, { ...DEFAULT_LOGGING_DELIVERY, ...options });
  const dispatcher = new OutboxDispatcher(t.db, [consumer], t.deps.logger, DEFAULT_OUTBOX_OPTIONS);
  return {
    consumer,
    async deliver(now = new Date()) {
      for (let round = 0; round < 100; round++) {
        const r = await dispatcher.runOnce(now);
        await consumer.settled();
        if (r.fannedOut === 0 && (r.totals.started ?? 0) === 0) return;
      }
      throw new Error('still delivering after 100 rounds');
    },
  };
}

async function newOrg() {
  const seeded = await t.factories.org();
  await t.db.updateTable('organizations').set({ plan: 'enterprise' }).where('id', '=', seeded.orgId).execute();
  return { ...seeded, client: t.as({ token: seeded.token, org: seeded.orgId }) };
}

type Org = Awaited<ReturnType<typeof newOrg>>;

async function create(org: Org, body: Create) {
  const res = await org.client.op('createLoggingDestination', { body });
  expect(res.status).toBe(201);
  return res.body;
}

const get = async (org: Org, id: string) => (await org.client.op('getLoggingDestination', { params: { id } })).body;

/** An audited change: a new team (audit action `team.created`). */
async function audited(org: Org, name = `Team ${unique()}`) {
  const res = await org.client.op('createTeam', { body: { name } });
  expect(res.status).toBe(201);
  return res.body.id;
}

/** A tool call as the MCP endpoint records it, through the runtime's own record writer. */
async function toolCalls(org: Org, count: number, over: Partial<ToolCallRecord> = {}) {
  for (let i = 0; i < count; i++) {
    t.deps.mcp.toolCalls.record({
      org_id: org.orgId,
      mcp_server_id: newId('mcpServer'),
      user_id: org.ownerId,
      user_toolbox_id: 'utbx_dyn_all',
      connection_id: newId('connection'),
      connector_slug: 'crm',
      synthetic_tool_id: null,
      tool_name: `crm__search_${i}`,
      upstream_tool: `search_${i}`,
      outcome: 'succeeded',
      error: null,
      duration_ms: 12 + i,
      request_id: `req_${newId('event').slice(4)}`,
      jsonrpc_id: String(i + 1),
      created_at: new Date(),
      ...over,
    });
  }
  await t.deps.mcp.toolCalls.flush();
}

const eventsOf = (backend: LogBackend, path: string) =>
  backend.requests.filter((r) => r.path === path && r.status < 300).flatMap((r) => r.records.map((x: any) => x.event ?? x));

// ---------------------------------------------------------------------------------------

describe('wire formats', () => {
  it('Splunk HEC: concatenated event objects with time, host, source, sourcetype, index and the record as event', async () => {
    const org = await newOrg();
    const path = `/services/collector/event/${unique()}`;
    const dest = await create(org, {
      name: 'Splunk',
      type: 'splunk_hec',
      config: { url: `${splunk.url}${path}`, hec_token: HEC_TOKEN, index: 'mcp_audit', source: 'acme', sourcetype: 'mcp:audit' },
      record_types: ['audit', 'tool_call'],
    });
    const teamId = await audited(org);
    await toolCalls(org, 1);
    await worker().deliver();

    const requests = splunk.requests.filter((r) => r.path === path);
    expect(requests).toHaveLength(1);
    const [request] = requests;
    expect(request!.headers.authorization).toBe(`Splunk ${HEC_TOKEN}`);
    expect(request!.headers['x-splunk-request-channel']).toBeUndefined();
    // Byte for byte: objects one after another, nothing between them, no array.
    expect(request!.text.startsWith('{"time":')).toBe(true);
    expect(request!.text).toContain('}}{"time":');
    const events = splitConcatenatedJson(request!.text) as any[];
    expect(request!.text).toBe(events.map((e) => JSON.stringify(e)).join(''));
    expect(events.map((e) => Object.keys(e))).toEqual(events.map(() => ['time', 'host', 'source', 'sourcetype', 'index', 'event']));
    const [created, team, call] = events;
    expect(created.event).toMatchObject({ type: 'audit', action: 'logging_destination.created', target: { type: 'logging_destination', id: dest.id } });
    expect(team).toMatchObject({ source: 'acme', sourcetype: 'mcp:audit', index: 'mcp_audit', host: new URL(t.deps.config.baseUrl).host });
    expect(team.event).toEqual({
      type: 'audit',
      id: expect.stringMatching(/^aud_/),
      organization_id: org.orgId,
      occurred_at: expect.stringMatching(/Z$/),
      action: 'team.created',
      actor: { type: 'api_token', id: expect.stringMatching(/^tok_/), user_id: org.ownerId },
      target: { type: 'team', id: teamId },
      changes: expect.any(Object),
      ip: expect.any(String),
      user_agent: expect.any(String),
      request_id: expect.stringMatching(/^req_/),
    });
    expect(team.time).toBe(Date.parse(team.event.occurred_at) / 1000);
    expect(call.event).toMatchObject({ type: 'tool_call', tool_name: 'crm__search_0', outcome: 'succeeded', duration_ms: 12, connector_slug: 'crm' });
    expect((await get(org, dest.id)).last_delivery_at).not.toBeNull();
  });

  it('Datadog: gzipped JSON arrays to the site’s v2 intake, at most 1000 entries and 5 MB a request, each under 1 MB', async () => {
    const org = await newOrg();
    const dest = await create(org, {
      name: 'DD',
      type: 'datadog',
      config: { site: 'us2.ddog-gov.com', api_key: DD_KEY, service: 'acme-mcp', source: 'mcp' },
      record_types: ['tool_call'],
    });
    const before = datadog.requests.length;
    await toolCalls(org, 1200);
    // Six records near 900 kB each: together past 5 MB, so they take two requests.
    await toolCalls(org, 6, { error: 'e'.repeat(900_000), outcome: 'tool_error', tool_name: 'crm__big' });
    // One past 1 MB is cut to fit, not refused.
    await toolCalls(org, 1, { error: 'x'.repeat(1_500_000), outcome: 'tool_error', tool_name: 'crm__huge' });
    await worker().deliver();

    const requests = datadog.requests.slice(before);
    expect(requests.every((r) => r.path === '/us2.ddog-gov.com/api/v2/logs' && r.status === 202)).toBe(true);
    expect(
      requests.every((r) => r.headers['content-encoding'] === 'gzip' && r.headers['content-type'] === 'application/json' && r.headers['dd-api-key'] === DD_KEY),
    ).toBe(true);
    expect(requests.every((r) => r.records.length <= 1000 && Buffer.byteLength(r.text) <= 5 * 1024 * 1024 && r.raw.length < Buffer.byteLength(r.text))).toBe(
      true,
    );
    const entries = requests.flatMap((r) => r.records);
    expect(entries).toHaveLength(1207);
    expect(requests.length).toBeGreaterThanOrEqual(3);
    expect(entries[0]).toEqual({
      ddsource: 'mcp',
      ddtags: `record_type:tool_call,organization_id:${org.orgId}`,
      hostname: new URL(t.deps.config.baseUrl).host,
      service: 'acme-mcp',
      status: 'info',
      message: 'tools/call crm__search_0: succeeded in 12 ms',
      timestamp: expect.any(Number),
      type: 'tool_call',
      id: expect.any(String),
      organization_id: org.orgId,
      occurred_at: expect.any(String),
      tool_name: 'crm__search_0',
      outcome: 'succeeded',
      error: null,
      duration_ms: 12,
      user_id: org.ownerId,
      mcp_server_id: expect.stringMatching(/^mcp_/),
      user_toolbox_id: 'utbx_dyn_all',
      connection_id: expect.stringMatching(/^conn_/),
      connector_slug: 'crm',
      upstream_tool: 'search_0',
      synthetic_tool_id: null,
      request_id: expect.stringMatching(/^req_/),
      jsonrpc_id: '1',
    });
    const huge = entries.find((e) => e.tool_name === 'crm__huge');
    expect(huge).toMatchObject({ truncated: true, status: 'error' });
    expect(Buffer.byteLength(JSON.stringify(huge))).toBeLessThan(1_000_000);
    expect(await get(org, dest.id)).toMatchObject({ pending_records: 0, last_delivery_error: null });
  });

  it('Datadog: records older than 18 hours are dropped rather than sent (the intake refuses them)', async () => {
    const org = await newOrg();
    const dest = await create(org, { name: 'DD old', type: 'datadog', config: { site: 'datadoghq.eu', api_key: DD_KEY }, record_types: ['tool_call'] });
    const before = datadog.requests.length;
    await toolCalls(org, 2, { created_at: new Date(Date.now() - 19 * 3_600_000), tool_name: 'crm__stale' });
    await toolCalls(org, 1, { tool_name: 'crm__fresh' });
    await worker().deliver();
    const entries = datadog.requests.slice(before).flatMap((r) => r.records);
    expect(entries.map((e) => e.tool_name)).toEqual(['crm__fresh']);
    expect(await get(org, dest.id)).toMatchObject({ pending_records: 0 });
  });

  it('OTLP/HTTP JSON: hex trace ids, 64-bit integers as strings, enums as integers, MCP semantic-convention attributes', async () => {
    const org = await newOrg();
    const path = `/v1/logs/${unique()}`;
    await create(org, {
      name: 'OTel',
      type: 'otlp_http',
      config: { url: `${otlp.url}${path}`, headers: { 'X-Scope-OrgID': 'acme' }, service: 'acme-mcp' },
      record_types: ['tool_call', 'audit'],
    });
    const requestId = `req_${newId('event').slice(4)}`;
    await toolCalls(org, 1, { outcome: 'tool_error', error: 'upstream says no', request_id: requestId, jsonrpc_id: '7', duration_ms: 1234 });
    await worker().deliver();

    const [request] = otlp.requests.filter((r) => r.path === path);
    expect(request!.status).toBe(200);
    expect(request!.headers['x-scope-orgid']).toBe('acme');
    const body = JSON.parse(request!.text);
    expect(body.resourceLogs).toHaveLength(1);
    expect(body.resourceLogs[0].resource).toEqual({ attributes: [{ key: 'service.name', value: { stringValue: 'acme-mcp' } }] });
    expect(body.resourceLogs[0].scopeLogs[0].scope).toEqual({ name: 'mcp-control-plane', version: '0.1' });
    const records = body.resourceLogs[0].scopeLogs[0].logRecords;
    const call = records.find((r: any) => r.attributes.some((a: any) => a.key === 'mcp.method.name'));
    expect(call.timeUnixNano).toMatch(/^\d{19}$/);
    expect(call.severityNumber).toBe(17);
    expect(call.severityText).toBe('ERROR');
    expect(call.traceId).toBe(traceIdOf(requestId));
    expect(call.traceId).toMatch(/^[0-9a-f]{32}$/);
    const attrs = Object.fromEntries(call.attributes.map((a: any) => [a.key, a.value]));
    expect(attrs).toMatchObject({
      'mcp.method.name': { stringValue: 'tools/call' },
      'gen_ai.operation.name': { stringValue: 'execute_tool' },
      'gen_ai.tool.name': { stringValue: 'crm__search_0' },
      'jsonrpc.request.id': { stringValue: '7' },
      'error.type': { stringValue: 'tool_error' },
      'user.id': { stringValue: org.ownerId },
      'mcp_control_plane.tool_call.duration_ms': { intValue: '1234' },
    });
    const audit = records.find((r: any) => r.attributes.some((a: any) => a.key === 'mcp_control_plane.audit.action'));
    expect(audit.severityNumber).toBe(9);
    expect(audit.traceId).toMatch(/^[0-9a-f]{32}$/);
  });

  it('traceIdOf turns a request id’s 128 bits into 32 hex digits, and anything else into nothing', () => {
    const hex = traceIdOf('req_01jg3b7f17x9y3z7a1b5c9d3e7') as string;
    expect(hex).toMatch(/^[0-9a-f]{32}$/);
    // The ULID's first 48 bits are its time in milliseconds.
    expect(parseInt(hex.slice(0, 12), 16)).toBe(decodeTime('01JG3B7F17X9Y3Z7A1B5C9D3E7'));
    expect(traceIdOf('req_01jg3b7f17x9y3z7a1b5c9d3e8')).not.toBe(hex);
    expect(traceIdOf('not-a-request-id')).toBeNull();
    expect(traceIdOf(null)).toBeNull();
  });

  it('OTLP: a partialSuccess is read, the rejected records are not sent again, and it is shown', async () => {
    const rejecting = await startLogBackend('otlp_http', { rejectPerRequest: 1 });
    try {
      const org = await newOrg();
      const dest = await create(org, { name: 'Picky', type: 'otlp_http', config: { url: `${rejecting.url}/v1/logs` }, record_types: ['tool_call'] });
      await toolCalls(org, 3);
      const w = worker();
      await w.deliver();
      await w.deliver();
      expect(rejecting.requests).toHaveLength(1);
      expect(await get(org, dest.id)).toMatchObject({ pending_records: 0, last_delivery_error: 'The collector rejected 1 of 3 records: log record too old.' });
    } finally {
      await rejecting.close();
    }
  });

  it('http: a JSON array of records with the destination’s headers, and never tool arguments', async () => {
    const org = await newOrg();
    const path = `/ingest/${unique()}`;
    await create(org, {
      name: 'Hook',
      type: 'http',
      config: { url: `${plain.url}${path}`, headers: { Authorization: 'Bearer hook-token' } },
      record_types: ['tool_call'],
    });
    await toolCalls(org, 2);
    await worker().deliver();
    const [request] = plain.requests.filter((r) => r.path === path);
    expect(request!.headers.authorization).toBe('Bearer hook-token');
    expect(request!.headers['content-type']).toBe('application/json');
    expect(JSON.parse(request!.text)).toEqual(request!.records);
    expect(request!.records.map((r: any) => r.tool_name)).toEqual(['crm__search_0', 'crm__search_1']);
    expect(request!.text).not.toContain(ARGUMENT_SECRET);
    expect(Object.keys(request!.records[0])).not.toContain('arguments');
  });
});

describe('delivery', () => {
  it('exports only to active destinations of the organization that take the record’s kind', async () => {
    const org = await newOrg();
    const other = await newOrg();
    const paths = { audit: `/a/${unique()}`, tools: `/t/${unique()}`, paused: `/p/${unique()}`, other: `/o/${unique()}` };
    await create(org, { name: 'Audit', type: 'http', config: { url: `${plain.url}${paths.audit}` }, record_types: ['audit'] });
    await create(org, { name: 'Tools', type: 'http', config: { url: `${plain.url}${paths.tools}` }, record_types: ['tool_call'] });
    await create(org, { name: 'Paused', type: 'http', config: { url: `${plain.url}${paths.paused}` }, record_types: ['audit', 'tool_call'], is_active: false });
    await create(other, { name: 'Other', type: 'http', config: { url: `${plain.url}${paths.other}` }, record_types: ['audit', 'tool_call'] });
    const teamId = await audited(org);
    await toolCalls(org, 1);
    await worker().deliver();
    const audits = eventsOf(plain, paths.audit);
    expect(audits.map((r) => r.type)).toEqual(['audit', 'audit', 'audit', 'audit']);
    expect(audits.at(-1)).toMatchObject({ action: 'team.created', target: { id: teamId } });
    expect(eventsOf(plain, paths.tools).map((r) => r.type)).toEqual(['tool_call']);
    expect(eventsOf(plain, paths.paused)).toEqual([]);
    expect(eventsOf(plain, paths.other).every((r) => r.organization_id === other.orgId)).toBe(true);
  });

  it('writes no outbox rows for an organization without logging destinations', async () => {
    const org = await newOrg();
    await audited(org);
    await toolCalls(org, 3);
    const rows = await t.db.selectFrom('outbox').select('id').where('org_id', '=', org.orgId).execute();
    expect(rows).toEqual([]);
  });

  it('retries a batch with backoff on 503 and 429, keeps the records in order, and shows the state while it waits', async () => {
    const org = await newOrg();
    const path = `/flaky/${unique()}`;
    const dest = await create(org, { name: 'Flaky', type: 'http', config: { url: `${plain.url}${path}` }, record_types: ['audit'] });
    const teams: string[] = [];
    for (let i = 0; i < 5; i++) teams.push(await audited(org));
    const w = worker({ baseBackoffMs: 5_000 });
    const start = new Date(Date.now() + 1000);

    plain.failNext({ status: 503, body: 'down' });
    await w.deliver(start);
    let state = await get(org, dest.id);
    expect(state).toMatchObject({
      pending_records: 6,
      last_delivery_at: null,
      last_delivery_error: 'The endpoint answered 503 Service Unavailable; retrying in 5 seconds.',
      next_delivery_attempt_at: new Date(start.getTime() + 5_000).toISOString(),
    });

    // Not due yet: nothing is sent.
    const sent = plain.requests.length;
    await w.deliver(new Date(start.getTime() + 1_000));
    expect(plain.requests.length).toBe(sent);

    plain.failNext({ status: 429, body: '', headers: { 'retry-after': '30' } });
    await w.deliver(new Date(start.getTime() + 6_000));
    state = await get(org, dest.id);
    // Retry-After is longer than the backoff: it wins.
    expect(state).toMatchObject({ pending_records: 6, last_delivery_error: 'The endpoint answered 429 Too Many Requests; retrying in 30 seconds.' });

    await w.deliver(new Date(start.getTime() + 40_000));
    state = await get(org, dest.id);
    expect(state).toMatchObject({
      pending_records: 0,
      last_delivery_error: null,
      next_delivery_attempt_at: null,
      last_delivery_at: new Date(start.getTime() + 40_000).toISOString(),
    });
    const delivered = eventsOf(plain, path);
    expect(delivered.map((r) => r.action)).toEqual(['logging_destination.created', ...teams.map(() => 'team.created')]);
    expect(delivered.slice(1).map((r) => r.target.id)).toEqual(teams);
  });

  it('holds records while the credentials are refused and sends them once they are fixed', async () => {
    const org = await newOrg();
    const path = `/services/collector/${unique()}`;
    const dest = await create(org, {
      name: 'Wrong token',
      type: 'splunk_hec',
      config: { url: `${splunk.url}${path}`, hec_token: 'wrong' },
      record_types: ['audit'],
    });
    const w = worker();
    await w.deliver();
    expect(await get(org, dest.id)).toMatchObject({
      pending_records: 1,
      last_delivery_error: expect.stringContaining('Splunk answered 403 Forbidden: Invalid token'),
    });
    // The fix resets the backoff: the records go at once.
    await org.client.op('updateLoggingDestination', { params: { id: dest.id }, body: { config: { hec_token: HEC_TOKEN } } });
    await w.deliver();
    expect(eventsOf(splunk, path).map((e) => e.action)).toEqual(['logging_destination.created', 'logging_destination.updated']);
    expect(await get(org, dest.id)).toMatchObject({ pending_records: 0, last_delivery_error: null });
  });

  it('drops a batch the backend refuses for good (400) and says so, and goes on with the next records', async () => {
    const org = await newOrg();
    const path = `/refuses/${unique()}`;
    const dest = await create(org, { name: 'Refuses', type: 'http', config: { url: `${plain.url}${path}` }, record_types: ['audit'] });
    plain.failNext({ status: 400, body: 'bad' });
    const w = worker();
    await w.deliver();
    expect(await get(org, dest.id)).toMatchObject({
      pending_records: 0,
      last_delivery_error: 'The endpoint answered 400 Bad Request; 1 records were dropped.',
    });
    await audited(org);
    await w.deliver();
    expect(eventsOf(plain, path).map((r) => r.action)).toEqual(['team.created']);
    expect((await get(org, dest.id)).last_delivery_error).toBeNull();
  });

  it('survives an outage: records written while the backend is down all arrive once it is back, in order, once each', async () => {
    const down = await startLogBackend('http');
    const url = down.url;
    await down.close();
    const org = await newOrg();
    const dest = await create(org, { name: 'Outage', type: 'http', config: { url: `${url}/in` }, record_types: ['audit', 'tool_call'] });
    const w = worker({ baseBackoffMs: 1_000 });
    const start = Date.now() + 1000;
    for (let i = 0; i < 3; i++) {
      await audited(org, `During outage ${i} ${unique()}`);
      await w.deliver(new Date(start + i * 60_000));
    }
    expect(await get(org, dest.id)).toMatchObject({ pending_records: 4, last_delivery_error: expect.stringContaining('retrying') });

    const port = Number(new URL(url).port);
    const back = await startLogBackendOn(port);
    try {
      await w.deliver(new Date(start + 3_600_000));
      const actions = back.records.map((r: any) => r.action);
      expect(actions).toEqual(['logging_destination.created', 'team.created', 'team.created', 'team.created']);
      expect(new Set(back.records.map((r: any) => r.id)).size).toBe(4);
      expect(await get(org, dest.id)).toMatchObject({ pending_records: 0, last_delivery_error: null });
    } finally {
      await back.close();
    }
  });

  it('does not hold one destination’s records behind another that does not answer', async () => {
    const stuck = await startLogBackend('http');
    const org = await newOrg();
    const fastPath = `/fast/${unique()}`;
    await create(org, { name: 'Stuck', type: 'http', config: { url: `${stuck.url}/in` }, record_types: ['audit'] });
    await create(org, { name: 'Fast', type: 'http', config: { url: `${plain.url}${fastPath}` }, record_types: ['audit'] });
    stuck.hold();
    try {
      const consumer = loggingDeliveries(t.deps);
      const dispatcher = new OutboxDispatcher(t.db, [consumer], t.deps.logger, DEFAULT_OUTBOX_OPTIONS);
      await dispatcher.runOnce();
      for (let i = 0; i < 500 && (eventsOf(plain, fastPath).length < 2 || stuck.arrivals < 1); i++) await new Promise((resolve) => setTimeout(resolve, 10));
      // The other destination got its records (both creations: destinations take what is handed over after they exist) while the stuck one's request was still unanswered.
      expect(eventsOf(plain, fastPath).map((r) => r.action)).toEqual(['logging_destination.created', 'logging_destination.created']);
      expect([stuck.arrivals, stuck.requests.length]).toEqual([1, 0]);
      stuck.release();
      await consumer.settled();
    } finally {
      await stuck.close();
    }
  });

  it('drops what waits when a destination is paused, and exports nothing from the pause later', async () => {
    const org = await newOrg();
    const path = `/paused/${unique()}`;
    const dest = await create(org, { name: 'Pausing', type: 'http', config: { url: `${plain.url}${path}` }, record_types: ['audit'] });
    const w = worker();
    await w.deliver();
    await org.client.op('updateLoggingDestination', { params: { id: dest.id }, body: { is_active: false } });
    await audited(org);
    await w.deliver();
    await org.client.op('updateLoggingDestination', { params: { id: dest.id }, body: { is_active: true } });
    await w.deliver();
    expect(eventsOf(plain, path).map((r) => r.action)).toEqual(['logging_destination.created', 'logging_destination.updated']);
  });

  it('two workers never send a destination’s records twice or out of order', async () => {
    const org = await newOrg();
    const path = `/twice/${unique()}`;
    await create(org, { name: 'Shared', type: 'http', config: { url: `${plain.url}${path}` }, record_types: ['tool_call'] });
    await toolCalls(org, 50);
    const [a, b] = [worker(), worker()];
    await Promise.all([a.deliver(), b.deliver()]);
    const names = eventsOf(plain, path).map((r) => r.tool_name);
    expect(names).toEqual(Array.from({ length: 50 }, (_, i) => `crm__search_${i}`));
  });
});

/** A plain receiver on a given port: the endpoint that was down comes back at the same address. */
async function startLogBackendOn(port: number) {
  const http = await import('node:http');
  const records: any[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      records.push(...JSON.parse(Buffer.concat(chunks).toString('utf8')));
      res.writeHead(200).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', () => resolve()));
  return {
    records,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe('end to end', () => {
  it('a tools/call over MCP and the audit entries of the API reach the collector, never the call’s arguments', async () => {
    const org = await newOrg();
    const path = `/v1/logs/${unique()}`;
    await create(org, { name: 'Collector', type: 'otlp_http', config: { url: `${otlp.url}${path}` }, record_types: ['audit', 'tool_call'] });
    const slug = await customConnector(t, org.orgId, {
      slug: `crm-${unique()}`,
      mcp_url: `${new URL(upstream.peer.url).origin}/mcp`,
      auth: { type: 'api_key', placement: 'header', name: 'Authorization', value_prefix: 'Bearer ' },
    });
    const who = { token: org.token, org: org.orgId };
    const connectionId = await connectMember(t, who, slug, UPSTREAM_KEY);
    const server = await mintMcpServer(t, who);
    const client = new Client({ name: 'logging-test', version: '1.0.0' }, { capabilities: {} });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${t.url}/mcp/${server.id}`), { requestInit: { headers: { Authorization: `Bearer ${server.token}` } } }),
    );
    try {
      const result = await client.callTool({ name: `${slug}__echo`, arguments: { text: ARGUMENT_SECRET } });
      expect(result.isError).toBeFalsy();
    } finally {
      await client.close();
    }
    await t.deps.mcp.toolCalls.flush();
    await worker().deliver();

    const requests = otlp.requests.filter((r) => r.path === path);
    expect(requests.every((r) => r.status === 200)).toBe(true);
    expect(requests.map((r) => r.text).join('')).not.toContain(ARGUMENT_SECRET);
    const logs = requests.flatMap((r) => r.records);
    const attrs = logs.map((l: any) => Object.fromEntries(l.attributes.map((a: any) => [a.key, Object.values(a.value)[0]])));
    const call = attrs.find((a) => a['mcp.method.name'] === 'tools/call');
    expect(call).toMatchObject({
      'gen_ai.tool.name': `${slug}__echo`,
      'gen_ai.operation.name': 'execute_tool',
      'mcp_control_plane.tool_call.outcome': 'succeeded',
      'mcp_control_plane.mcp_server.id': server.id,
      'mcp_control_plane.connection.id': connectionId,
      'mcp_control_plane.upstream_tool.name': 'echo',
    });
    const actions = attrs.map((a) => a['mcp_control_plane.audit.action']).filter(Boolean);
    expect(actions).toEqual(expect.arrayContaining(['logging_destination.created', 'connection.created', 'mcp_server.created']));
  });
});
