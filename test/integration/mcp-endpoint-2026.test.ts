import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LATEST_PROTOCOL_VERSION, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { loadSpec } from '../../src/spec';
import { startTestApp, type TestApp, type TestResponse } from '../support/app';
import { connectionClient } from '../support/connections';
import type { SeededOrg } from '../support/factories';
import { manyTools, startApiKeyUpstream, startEverythingServer, useUpstream } from '../support/upstream-mcp';
import { customConnector } from '../fixtures/connections';
import { mintMcpServer } from '../support/mcp';

/*
 * The MCP endpoint in revision 2026-07-28, as raw JSON-RPC over HTTP: the installed MCP SDK
 * (LATEST_PROTOCOL_VERSION 2025-11-25) does not speak it yet. Every response goes through
 * `t.call`, which checks it against the spec; the messages of an SSE stream are checked
 * against the spec's schemas here. Real upstreams on loopback: an API-key upstream (whoami
 * tells whose key reached it, `slow` for cancellation), one with 600 tools (pagination), and
 * server-everything (progress).
 */

const V = '2026-07-28';
const SUPPORTED = ['2026-07-28', '2025-11-25', '2025-06-18', '2025-03-26'];
const KEY_A = 'key-alice-R26a';
const KEY_B = 'key-bob-R26b';
const crmPeer = useUpstream(() =>
  startApiKeyUpstream({
    keys: { [KEY_A]: 'alice', [KEY_B]: 'bob' },
    tools: [
      { name: 'fails', description: 'Always fails.', call: () => ({ isError: true, content: [{ type: 'text', text: 'upstream says no' }] }) },
      {
        name: 'regional',
        description: 'Asks its transport to mirror `region` into a header (x-mcp-header).',
        inputSchema: { type: 'object', properties: { region: { type: 'string', 'x-mcp-header': 'Region' } as never }, required: ['region'] },
        call: (args) => ({ content: [{ type: 'text', text: `region ${String(args.region)}` }] }),
      },
      {
        name: 'slow',
        description: 'Answers after 10 s.',
        call: () => new Promise((resolve) => setTimeout(() => resolve({ content: [{ type: 'text', text: 'late' }] }), 10_000).unref()),
      },
    ],
  }),
);
const bigPeer = useUpstream(() => startApiKeyUpstream({ keys: { [KEY_B]: 'bob' }, tools: manyTools(600, 'op') }));
const everything = useUpstream(() => startEverythingServer('streamableHttp'));

let t: TestApp;
let org: SeededOrg;
let serverA: { id: string; token: string };
let serverB: { id: string; token: string };
const memberTokens = new Map<string, string>();

const mint = (ownerUserId: string, name: string) => mintMcpServer(t, { token: memberTokens.get(ownerUserId) as string, org: org.orgId }, { name });

const meta = (extra: Record<string, unknown> = {}) => ({
  'io.modelcontextprotocol/protocolVersion': V,
  'io.modelcontextprotocol/clientCapabilities': {},
  'io.modelcontextprotocol/clientInfo': { name: 'raw-2026-client', version: '1.0.0' },
  ...extra,
});

/** A 2026-07-28 request as the transport sends it: the version, method and (tools/call) name mirrored into headers. */
function rpc(
  server: { id: string; token: string },
  id: string | number,
  method: string,
  params: Record<string, unknown> = {},
  headers: Record<string, string | undefined> = {},
) {
  const body = { jsonrpc: '2.0', id, method, params: { ...params, _meta: { ...meta(), ...(params._meta as object | undefined) } } };
  return send(server, body, {
    'MCP-Protocol-Version': V,
    'Mcp-Method': method,
    ...(typeof params.name === 'string' ? { 'Mcp-Name': params.name } : {}),
    ...headers,
  });
}

/** Any body, with the Accept the transport requires; the response is checked against the spec by t.call. */
function send(server: { id: string; token: string }, body: unknown, headers: Record<string, string | undefined> = {}): Promise<TestResponse> {
  const defined = Object.fromEntries(
    Object.entries({ Accept: 'application/json, text/event-stream', ...headers }).filter(([, v]) => v !== undefined),
  ) as Record<string, string>;
  return t.call('POST', `/mcp/${server.id}`, body, { token: server.token, headers: defined });
}

const spec = loadSpec();
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
{
  const copy = structuredClone(spec) as Record<string, any>;
  const strip = (node: unknown): void => {
    if (Array.isArray(node)) return node.forEach(strip);
    if (!node || typeof node !== 'object') return;
    const record = node as Record<string, any>;
    if (record.discriminator) delete record.discriminator.mapping;
    Object.values(record).forEach(strip);
  };
  strip(copy);
  ajv.addSchema(copy, 'spec');
}
/** A message of an SSE stream checked against a schema of the spec (t.call checks the stream only as text). */
function expectSchema(name: string, value: unknown) {
  const validate = ajv.getSchema(`spec#/components/schemas/${name}`) ?? ajv.compile({ $ref: `spec#/components/schemas/${name}` });
  if (!validate(value)) throw new Error(`${name}: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(value).slice(0, 1000)}`);
}

const events = (text: string) =>
  text
    .split(/\r?\n\r?\n/)
    .map((chunk) =>
      chunk
        .split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).trim())
        .join('\n'),
    )
    .filter((data) => data !== '')
    .map((data) => JSON.parse(data) as Record<string, any>);

const serverInfo = (name: string) => ({ 'io.modelcontextprotocol/serverInfo': { name: 'mcp-control-plane', title: name, version: expect.any(String) } });

beforeAll(async () => {
  t = await startTestApp();
  org = await t.factories.org();
  const aliceId = await t.factories.member(org.orgId);
  const bobId = await t.factories.member(org.orgId);
  memberTokens.set(aliceId, await t.factories.token(org.orgId, aliceId));
  memberTokens.set(bobId, await t.factories.token(org.orgId, bobId));
  const alice = connectionClient(t, { token: memberTokens.get(aliceId) as string, org: org.orgId });
  const bob = connectionClient(t, { token: memberTokens.get(bobId) as string, org: org.orgId });
  const apiKey = { type: 'api_key' as const, placement: 'header' as const, name: 'Authorization', value_prefix: 'Bearer ' };
  const crm = await customConnector(t, org.orgId, { slug: 'crm', name: 'Acme CRM', mcp_url: `${new URL(crmPeer.peer.url).origin}/mcp`, auth: apiKey });
  const big = await customConnector(t, org.orgId, { slug: 'big', name: 'Big', mcp_url: `${new URL(bigPeer.peer.url).origin}/mcp`, auth: apiKey });
  const every = await customConnector(t, org.orgId, { slug: 'every', name: 'Everything', mcp_url: everything.peer.url, auth: { type: 'none' } });
  expect((await alice.create({ connector_slug: crm, api_key: KEY_A })).status).toBe(201);
  expect((await alice.create({ connector_slug: every })).status).toBe(201);
  expect((await bob.create({ connector_slug: crm, api_key: KEY_B })).status).toBe(201);
  expect((await bob.create({ connector_slug: big, api_key: KEY_B })).status).toBe(201);
  serverA = await mint(aliceId, 'Alice 2026');
  serverB = await mint(bobId, 'Bob 2026');
}, 180_000);
afterAll(() => t.close());

describe('revision 2026-07-28, raw JSON-RPC', () => {
  it('is not spoken by the installed SDK (which is why these tests are raw)', () => {
    expect(LATEST_PROTOCOL_VERSION).not.toBe(V);
  });

  it('answers server/discover without initialize: versions, capabilities, name, cache hints', async () => {
    const res = await rpc(serverA, 'discover-1', 'server/discover');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.headers.get('mcp-session-id')).toBeNull();
    expect(res.body).toEqual({
      jsonrpc: '2.0',
      id: 'discover-1',
      result: {
        resultType: 'complete',
        supportedVersions: SUPPORTED,
        capabilities: { tools: { listChanged: false } },
        instructions: 'Tools of the MCP server "Alice 2026".',
        _meta: serverInfo('Alice 2026'),
        ttlMs: 300_000,
        cacheScope: 'private',
      },
    });
  });

  it('lists the owner’s tools with resultType and cache hints on every page, and walks the pages by cursor', async () => {
    const alice = await rpc(serverA, 1, 'tools/list');
    expect(alice.status).toBe(200);
    expect(alice.body.result).toMatchObject({ resultType: 'complete', ttlMs: 60_000, cacheScope: 'private', _meta: serverInfo('Alice 2026') });
    const names = (alice.body.result.tools as { name: string }[]).map((tool) => tool.name);
    expect(names).toEqual(expect.arrayContaining(['crm__whoami', 'crm__slow', 'every__echo']));
    expect(names.some((n) => n.startsWith('big__'))).toBe(false);
    expect(alice.body.result.nextCursor).toBeUndefined();
    // No argument is mirrored into Mcp-Param-* headers: an upstream's x-mcp-header is not listed.
    const regional = (alice.body.result.tools as { name: string; inputSchema: Record<string, any> }[]).find((tool) => tool.name === 'crm__regional');
    expect(regional?.inputSchema).toEqual({ type: 'object', properties: { region: { type: 'string' } }, required: ['region'] });
    // The handshake revisions list the tool as the upstream does.
    const legacy = await send(serverA, { jsonrpc: '2.0', id: 'legacy-list', method: 'tools/list' }, { 'MCP-Protocol-Version': '2025-11-25' });
    const legacyRegional = (legacy.body.result.tools as { name: string; inputSchema: Record<string, any> }[]).find((tool) => tool.name === 'crm__regional');
    expect(legacyRegional?.inputSchema.properties.region).toEqual({ type: 'string', 'x-mcp-header': 'Region' });
    const call = await rpc(serverA, 'regional', 'tools/call', { name: 'crm__regional', arguments: { region: 'us-west1' } });
    expect(call.body.result.content).toEqual([{ type: 'text', text: 'region us-west1' }]);

    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const page = await rpc(serverB, `page-${pages}`, 'tools/list', cursor ? { cursor } : {});
      expect(page.status).toBe(200);
      expect(page.body.result).toMatchObject({ resultType: 'complete', ttlMs: 60_000, cacheScope: 'private', _meta: serverInfo('Bob 2026') });
      seen.push(...(page.body.result.tools as { name: string }[]).map((tool) => tool.name));
      cursor = page.body.result.nextCursor;
      pages += 1;
    } while (cursor && pages < 10);
    expect(pages).toBe(2);
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen.filter((n) => n.startsWith('big__op_'))).toHaveLength(600);
    expect(seen).toEqual(expect.arrayContaining(['crm__whoami', 'big__whoami']));

    const bad = await rpc(serverB, 'bad-cursor', 'tools/list', { cursor: 'nope' });
    expect(bad.status).toBe(200);
    expect(bad.body).toMatchObject({ id: 'bad-cursor', error: { code: -32602 } });
  });

  it('passes tools/call results through unchanged, adding resultType and the server’s name', async () => {
    const who = await rpc(serverA, 2, 'tools/call', { name: 'crm__whoami', arguments: {} });
    expect(who.status).toBe(200);
    expect(who.body.result).toMatchObject({
      resultType: 'complete',
      structuredContent: { member: 'alice', credential: KEY_A },
      _meta: serverInfo('Alice 2026'),
    });
    expect(who.body.result.isError).toBeFalsy();
    const bob = await rpc(serverB, 2, 'tools/call', { name: 'crm__whoami', arguments: {} });
    expect(bob.body.result.structuredContent).toMatchObject({ member: 'bob', credential: KEY_B });

    const fails = await rpc(serverA, 3, 'tools/call', { name: 'crm__fails', arguments: {} });
    expect(fails.body.result).toMatchObject({ resultType: 'complete', isError: true, content: [{ type: 'text', text: 'upstream says no' }] });

    // The same call through the 2025 era (the SDK's client) gives the same result, less the 2026 members.
    const transport = new StreamableHTTPClientTransport(new URL(`${t.url}/mcp/${serverA.id}`), {
      requestInit: { headers: { Authorization: `Bearer ${serverA.token}` } },
    });
    const client = new Client({ name: 'sdk-2025', version: '1.0.0' });
    await client.connect(transport);
    try {
      const args = { message: 'hello 2026' };
      const legacy = (await client.callTool({ name: 'every__echo', arguments: args })) as CallToolResult;
      const modern = await rpc(serverA, 4, 'tools/call', { name: 'every__echo', arguments: args });
      const { resultType, _meta, ...rest } = modern.body.result as Record<string, unknown>;
      expect(resultType).toBe('complete');
      expect(_meta).toMatchObject(serverInfo('Alice 2026'));
      expect(rest).toEqual(legacy);
    } finally {
      await client.close();
    }

    const unknown = await rpc(serverA, 5, 'tools/call', { name: 'crm__nope', arguments: {} });
    expect(unknown.status).toBe(200);
    expect(unknown.body).toMatchObject({ id: 5, error: { code: -32602 } });
  });

  it('accepts Mcp-Name in its Base64 form and refuses headers that differ from the body (-32020)', async () => {
    const encoded = `=?base64?${Buffer.from('crm__whoami').toString('base64')}?=`;
    const ok = await rpc(serverA, 6, 'tools/call', { name: 'crm__whoami', arguments: {} }, { 'Mcp-Name': encoded });
    expect(ok.status).toBe(200);
    expect(ok.body.result.structuredContent).toMatchObject({ member: 'alice' });

    const name = await rpc(serverA, 7, 'tools/call', { name: 'crm__whoami', arguments: {} }, { 'Mcp-Name': 'crm__echo' });
    expect(name.status).toBe(400);
    expect(name.body).toMatchObject({ jsonrpc: '2.0', id: 7, error: { code: -32020 } });
    const noName = await rpc(serverA, 8, 'tools/call', { name: 'crm__whoami', arguments: {} }, { 'Mcp-Name': undefined });
    expect(noName.status).toBe(400);
    expect(noName.body).toMatchObject({ id: 8, error: { code: -32020 } });
    const method = await rpc(serverA, 9, 'tools/list', {}, { 'Mcp-Method': 'tools/call' });
    expect(method.status).toBe(400);
    expect(method.body).toMatchObject({ id: 9, error: { code: -32020 } });
    const noMethod = await rpc(serverA, 10, 'tools/list', {}, { 'Mcp-Method': undefined });
    expect(noMethod.status).toBe(400);
    expect(noMethod.body).toMatchObject({ id: 10, error: { code: -32020 } });
    // 2026-07-28 _meta without the header that must mirror it.
    const noHeader = await rpc(serverA, 11, 'tools/list', {}, { 'MCP-Protocol-Version': undefined });
    expect(noHeader.status).toBe(400);
    expect(noHeader.body).toMatchObject({ id: 11, error: { code: -32020 } });
    const otherMeta = await rpc(serverA, 12, 'tools/list', { _meta: { 'io.modelcontextprotocol/protocolVersion': '2025-11-25' } });
    expect(otherMeta.status).toBe(400);
    expect(otherMeta.body).toMatchObject({ id: 12, error: { code: -32020 } });
  });

  it('answers a revision it does not speak with UnsupportedProtocolVersionError listing the supported ones', async () => {
    const future = await send(
      serverA,
      { jsonrpc: '2.0', id: 20, method: 'tools/list', params: { _meta: meta({ 'io.modelcontextprotocol/protocolVersion': '2027-03-01' }) } },
      { 'MCP-Protocol-Version': '2027-03-01', 'Mcp-Method': 'tools/list' },
    );
    expect(future.status).toBe(400);
    expect(future.body).toEqual({
      jsonrpc: '2.0',
      id: 20,
      error: {
        code: -32022,
        message: 'Unsupported protocol version',
        data: { supported: SUPPORTED, requested: '2027-03-01', request_id: future.headers.get('x-request-id') },
      },
    });
    const old = await rpc(serverA, 21, 'server/discover', { _meta: { 'io.modelcontextprotocol/protocolVersion': '1900-01-01' } });
    expect(old.status).toBe(400);
    expect(old.body).toMatchObject({ id: 21, error: { code: -32022, data: { supported: SUPPORTED, requested: '1900-01-01' } } });
    // Without 2026-07-28 _meta an unknown header is refused alike, naming what it asked for.
    const legacy = await send(serverA, { jsonrpc: '2.0', id: 22, method: 'ping' }, { 'MCP-Protocol-Version': '2024-01-01' });
    expect(legacy.status).toBe(400);
    expect(legacy.body).toMatchObject({ id: 22, error: { code: -32022, data: { supported: SUPPORTED, requested: '2024-01-01' } } });
  });

  it('refuses a request without the _meta every 2026-07-28 request carries (400, -32602)', async () => {
    const none = await send(serverA, { jsonrpc: '2.0', id: 30, method: 'tools/list' }, { 'MCP-Protocol-Version': V, 'Mcp-Method': 'tools/list' });
    expect(none.status).toBe(400);
    expect(none.body).toMatchObject({ jsonrpc: '2.0', id: 30, error: { code: -32602 } });
    expect(none.body.error.message).toContain('io.modelcontextprotocol/protocolVersion');
    const noCapabilities = await send(
      serverA,
      { jsonrpc: '2.0', id: 31, method: 'server/discover', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': V } } },
      { 'MCP-Protocol-Version': V, 'Mcp-Method': 'server/discover' },
    );
    expect(noCapabilities.status).toBe(400);
    expect(noCapabilities.body).toMatchObject({ id: 31, error: { code: -32602 } });
    expect(noCapabilities.body.error.message).toContain('io.modelcontextprotocol/clientCapabilities');
  });

  it('answers methods the revision dropped or the server does not serve with 404 and -32601', async () => {
    for (const method of ['initialize', 'ping', 'resources/list']) {
      const res = await rpc(serverA, method, method);
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ jsonrpc: '2.0', id: method, error: { code: -32601, message: `Method not found: ${method}` } });
    }
    // A notification needs no _meta or mirrored headers in this revision.
    const note = await send(serverA, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'none' } }, { 'MCP-Protocol-Version': V });
    expect(note.status).toBe(202);
  });

  it('relays progress as server-sent events and ends with the 2026-07-28 response', async () => {
    const list = await rpc(serverA, 40, 'tools/list');
    const longRunning = (list.body.result.tools as { name: string }[]).map((tool) => tool.name).find((n) => n.startsWith('every__') && /long/i.test(n));
    expect(longRunning).toBeDefined();
    const res = await rpc(serverA, 41, 'tools/call', { name: longRunning, arguments: { duration: 1, steps: 3 }, _meta: { progressToken: 'p-41' } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const messages = events(res.text);
    const progress = messages.filter((m) => m.method === 'notifications/progress');
    expect(progress.length).toBeGreaterThanOrEqual(2);
    for (const p of progress) expect(p.params).toMatchObject({ progressToken: 'p-41', progress: expect.any(Number) });
    const values = progress.map((p) => p.params.progress as number);
    expect([...values].sort((a, b) => a - b)).toEqual(values);
    const last = messages.at(-1) as Record<string, any>;
    expect(last).toMatchObject({ jsonrpc: '2.0', id: 41, result: { resultType: 'complete', _meta: serverInfo('Alice 2026') } });
    expect(last.result.isError).toBeFalsy();
    expectSchema('McpToolsCallResponse', last);
    expectSchema('McpServerMessage', last);
  }, 30_000);

  it('cancels the upstream call when the client closes the SSE stream', async () => {
    const controller = new AbortController();
    const res = await fetch(`${t.url}/mcp/${serverA.id}`, {
      method: 'POST',
      signal: controller.signal,
      headers: {
        Authorization: `Bearer ${serverA.token}`,
        'Content-Type': 'application/json',
        Accept: 'application/json, text/event-stream',
        'MCP-Protocol-Version': V,
        'Mcp-Method': 'tools/call',
        'Mcp-Name': 'crm__slow',
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 'slow-2026',
        method: 'tools/call',
        params: { name: 'crm__slow', arguments: {}, _meta: meta({ progressToken: 'p-slow' }) },
      }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    controller.abort();
    let outcomes: string[] = [];
    for (let i = 0; i < 50 && !outcomes.includes('cancelled'); i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      const rows = await t.db
        .selectFrom('tool_call_records')
        .select(['outcome'])
        .where('mcp_server_id', '=', serverA.id)
        .where('tool_name', '=', 'crm__slow')
        .execute();
      outcomes = rows.map((r) => r.outcome);
    }
    expect(outcomes).toContain('cancelled');
  }, 30_000);

  it('still serves the MCP SDK’s 2025 client on the same server, with no 2026 members in its results', async () => {
    const transport = new StreamableHTTPClientTransport(new URL(`${t.url}/mcp/${serverB.id}`), {
      requestInit: { headers: { Authorization: `Bearer ${serverB.token}` } },
    });
    const client = new Client({ name: 'sdk-2025', version: '1.0.0' });
    await client.connect(transport);
    try {
      expect(client.getServerVersion()).toMatchObject({ name: 'mcp-control-plane' });
      await client.ping();
      const first = await client.listTools();
      expect(first.nextCursor).toBeDefined();
      expect(first).not.toHaveProperty('resultType');
      expect(first).not.toHaveProperty('ttlMs');
      const who = (await client.callTool({ name: 'crm__whoami', arguments: {} })) as CallToolResult;
      expect(who.structuredContent).toMatchObject({ member: 'bob', credential: KEY_B });
      expect(who).not.toHaveProperty('resultType');
    } finally {
      await client.close();
    }
    // And raw, in 2025-11-25: initialize answers a handshake revision, even when asked for 2026-07-28.
    const init = await send(
      serverB,
      { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: V, capabilities: {}, clientInfo: { name: 'x', version: '1' } } },
      { 'MCP-Protocol-Version': '2025-11-25' },
    );
    expect(init.status).toBe(200);
    expect(init.body.result.protocolVersion).toBe('2025-11-25');
  });
});
