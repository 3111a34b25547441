import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { randomBytes } from 'node:crypto';
import { ConfigError, loadConfig } from '../../src/config';
import { startTestApp, type TestApp } from '../support/app';
import { connectMember, memberWithToken, mintMcpServer } from '../support/mcp';
import { SPAN_KIND, startOtlpCollector, type OtlpCollector } from '../support/otlp-collector';
import { startApiKeyUpstream, useUpstream } from '../support/upstream-mcp';
import { customConnector } from '../fixtures/connections';

/*
 * Traces of a real app sent over OTLP/HTTP to a collector on loopback: an MCP client's
 * tools/call through the control plane to an upstream MCP server is one trace (the HTTP
 * request's span, the MCP message's, the upstream call's), the upstream receives its W3C
 * trace context, and nothing of the call's arguments is exported. With tracing off, nothing
 * is sent and nothing is propagated.
 */

const KEY = 'key-tracing-Hy27';
const upstream = useUpstream(() => startApiKeyUpstream({ keys: { [KEY]: 'alice' } }));

let collector: OtlpCollector;
let t: TestApp;
beforeAll(async () => {
  collector = await startOtlpCollector();
  t = await startTestApp({ env: { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_SERVICE_NAME: 'cp-under-test', OTEL_BSP_SCHEDULE_DELAY: '20' } });
}, 60_000);
afterAll(async () => {
  await t.close();
  await collector.close();
});

/** A member of a new organization with a connection to the upstream and a minted MCP server; the connector's slug. */
async function mcpSetup(app: TestApp) {
  const org = await app.factories.org();
  const alice = await memberWithToken(app, org.orgId);
  const slug = await customConnector(app, org.orgId, {
    slug: `tr-${randomBytes(3).toString('hex')}`,
    mcp_url: `${new URL(upstream.peer.url).origin}/mcp`,
    auth: { type: 'api_key', placement: 'header', name: 'Authorization', value_prefix: 'Bearer ' },
  });
  await connectMember(app, { token: alice.token, org: org.orgId }, slug, KEY);
  const server = await mintMcpServer(app, { token: alice.token, org: org.orgId });
  return { slug, server };
}

/** Calls `<slug>__echo` with `text` through the app's MCP endpoint, the client sending `headers`. */
async function echo(app: TestApp, server: { id: string; token: string }, slug: string, text: string, headers: Record<string, string> = {}) {
  const client = new Client({ name: 'tracing-test', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${app.url}/mcp/${server.id}`), {
      requestInit: { headers: { Authorization: `Bearer ${server.token}`, ...headers } },
    }),
  );
  try {
    const result = (await client.callTool({ name: `${slug}__echo`, arguments: { text } })) as CallToolResult;
    expect(result.isError).toBeFalsy();
    expect(result.content).toEqual([{ type: 'text', text }]);
  } finally {
    await client.close();
  }
}

/** The upstream's tools/call request that carried `text`'s call (the last tools/call it saw). */
function upstreamCall() {
  const calls = upstream.peer.seen.filter((s) => s.rpc === 'tools/call');
  const last = calls[calls.length - 1];
  if (!last) throw new Error('The upstream saw no tools/call');
  return last;
}

/** The three spans of one tools/call: the HTTP request's, the MCP message's, the upstream call's. */
async function callSpans(toolName: string, upstreamTool: string) {
  const message = await collector.waitFor((s) => s.name === `tools/call ${toolName}`);
  const client = await collector.waitFor((s) => s.name === `tools/call ${upstreamTool}` && s.parentSpanId === message.spanId);
  const http = await collector.waitFor((s) => s.spanId === message.parentSpanId);
  return { http, message, client };
}

describe('traces over OTLP/HTTP', () => {
  it('makes one trace of an MCP tools/call: the request, the MCP message with its attributes, and the upstream call', async () => {
    const { slug, server } = await mcpSetup(t);
    const secretArgument = `argument-${randomBytes(6).toString('hex')}`;
    await echo(t, server, slug, secretArgument);
    const { http, message, client } = await callSpans(`${slug}__echo`, 'echo');

    expect(new Set([http.traceId, message.traceId, client.traceId]).size).toBe(1);
    expect(http).toMatchObject({ name: 'POST /mcp/{mcpId}', kind: SPAN_KIND.server });
    expect(http.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.route': '/mcp/{mcpId}',
      'http.response.status_code': 200,
      'url.scheme': 'http',
      'server.address': '127.0.0.1',
      'cp.operation_id': 'postMcpMessage',
    });
    expect(message.kind).toBe(SPAN_KIND.server);
    expect(message.attributes).toMatchObject({
      'mcp.method.name': 'tools/call',
      'gen_ai.tool.name': `${slug}__echo`,
      'gen_ai.operation.name': 'execute_tool',
      'mcp.protocol.version': expect.any(String),
      'jsonrpc.request.id': expect.any(String),
    });
    expect(message.attributes['error.type']).toBeUndefined();
    expect(client.kind).toBe(SPAN_KIND.client);
    expect(client.attributes).toMatchObject({
      'mcp.method.name': 'tools/call',
      'gen_ai.tool.name': 'echo',
      'gen_ai.operation.name': 'execute_tool',
      'server.address': '127.0.0.1',
      'server.port': Number(new URL(upstream.peer.url).port),
    });
    expect(http.resource['service.name']).toBe('cp-under-test');

    // The upstream was called inside the client span: its trace context, in the HTTP header and in _meta.
    const seen = upstreamCall();
    expect(seen.traceparent).toBe(`00-${client.traceId}-${client.spanId}-01`);
    expect(seen.meta?.traceparent).toBe(`00-${client.traceId}-${client.spanId}-01`);

    // Neither the tool's arguments nor the tokens leave in a span.
    for (const request of collector.requests) {
      expect(request.text).not.toContain(secretArgument);
      expect(request.text).not.toContain(server.token);
      expect(request.text).not.toContain(KEY);
    }
  });

  it("continues the MCP client's trace from its traceparent header", async () => {
    const { slug, server } = await mcpSetup(t);
    const traceId = randomBytes(16).toString('hex');
    const parentId = randomBytes(8).toString('hex');
    await echo(t, server, slug, 'hello', { traceparent: `00-${traceId}-${parentId}-01` });
    const { http, message, client } = await callSpans(`${slug}__echo`, 'echo');
    expect(http.traceId).toBe(traceId);
    expect(http.parentSpanId).toBe(parentId);
    expect(message.traceId).toBe(traceId);
    expect(upstreamCall().traceparent).toBe(`00-${traceId}-${client.spanId}-01`);
  });

  it("takes a traceparent in an MCP message's params._meta as the parent of that message's span", async () => {
    const { server } = await mcpSetup(t);
    const traceId = randomBytes(16).toString('hex');
    const parentId = randomBytes(8).toString('hex');
    const res = await fetch(`${t.url}/mcp/${server.id}`, {
      method: 'POST',
      headers: {
        Authorization: `Bearer ${server.token}`,
        'Content-Type': 'application/json',
        Accept: 'application/json, text/event-stream',
        'MCP-Protocol-Version': '2025-06-18',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/list', params: { _meta: { traceparent: `00-${traceId}-${parentId}-01` } } }),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { result: { tools: unknown[] } }).result.tools.length).toBeGreaterThan(0);
    const span = await collector.waitFor((s) => s.name === 'tools/list' && s.traceId === traceId);
    expect(span.parentSpanId).toBe(parentId);
    expect(span.attributes).toMatchObject({ 'mcp.method.name': 'tools/list', 'jsonrpc.request.id': '7', 'mcp.protocol.version': '2025-06-18' });
  });

  it('traces a plain API request under its route, and a request no operation matched under its method', async () => {
    const org = await t.factories.org();
    expect((await t.as(org).get('/user/me')).status).toBe(200);
    const span = await collector.waitFor((s) => s.name === 'GET /user/me');
    expect(span.kind).toBe(SPAN_KIND.server);
    expect(span.parentSpanId).toBe('');
    expect(span.attributes).toMatchObject({ 'http.route': '/user/me', 'http.response.status_code': 200, 'cp.operation_id': 'getCurrentUser' });

    const path = `/no/such/${randomBytes(4).toString('hex')}`;
    expect((await t.call('GET', path)).status).toBe(404);
    const unmatched = await collector.waitFor((s) => s.kind === SPAN_KIND.server && s.name === 'GET' && s.attributes['http.response.status_code'] === 404);
    expect(unmatched.attributes['http.route']).toBeUndefined();
    // Unmatched paths are not recorded: they are whatever a client sent.
    expect(collector.requests.some((r) => r.text.includes(path))).toBe(false);
  });

  it('marks a JSON-RPC error on the MCP message span', async () => {
    const { server } = await mcpSetup(t);
    const client = new Client({ name: 'tracing-test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${t.url}/mcp/${server.id}`), { requestInit: { headers: { Authorization: `Bearer ${server.token}` } } }),
    );
    try {
      await expect(client.callTool({ name: 'no_such_tool', arguments: {} })).rejects.toMatchObject({ code: -32602 });
    } finally {
      await client.close();
    }
    const span = await collector.waitFor((s) => s.name === 'tools/call no_such_tool');
    expect(span.attributes).toMatchObject({ 'error.type': '-32602', 'rpc.response.status_code': '-32602' });
    expect(span.status.code).toBe(2);
  });
});

describe('with tracing off', () => {
  let off: TestApp;
  beforeAll(async () => {
    off = await startTestApp();
  }, 60_000);
  afterAll(() => off.close());

  it('sends nothing and propagates no trace context upstream, even one the client sent', async () => {
    expect(off.deps.tracing.enabled).toBe(false);
    const { slug, server } = await mcpSetup(off);
    const traceId = randomBytes(16).toString('hex');
    const before = collector.requests.length;
    await echo(off, server, slug, 'quiet', { traceparent: `00-${traceId}-${randomBytes(8).toString('hex')}-01` });
    const seen = upstreamCall();
    expect(seen.traceparent).toBeNull();
    expect(seen.meta?.traceparent).toBeUndefined();
    // The traced app's exporter may send its own spans meanwhile; none is of this trace.
    await t.deps.tracing.flush();
    expect(collector.requests.slice(before).some((r) => r.text.includes(traceId))).toBe(false);
  });
});

describe('tracing settings', () => {
  const load = (env: Record<string, string>) => loadConfig({ NODE_ENV: 'test', ...env }).tracing;

  it('is off unless an OTLP endpoint is set, and appends /v1/traces to the base endpoint only', () => {
    expect(load({}).endpoint).toBeNull();
    expect(load({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' }).endpoint).toBe('http://collector:4318/v1/traces');
    expect(
      load({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://traces.example/otlp/spans' }).endpoint,
    ).toBe('https://traces.example/otlp/spans');
  });

  it('reads the SDK variables operators know: service name, sampler and headers', () => {
    const config = load({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
      OTEL_SERVICE_NAME: 'cp-eu',
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.25',
      OTEL_EXPORTER_OTLP_HEADERS: 'api-key=abc%20def,X-Tenant=eu',
    });
    expect(config).toMatchObject({
      serviceName: 'cp-eu',
      sampler: 'parentbased_traceidratio',
      ratio: 0.25,
      headers: { 'api-key': 'abc def', 'x-tenant': 'eu' },
    });
    expect(load({}).serviceName).toBe('mcp-control-plane');
  });

  it.each([
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }, /OTEL_EXPORTER_OTLP_ENDPOINT/],
    [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'ftp://collector/v1/traces' }, /OTEL_EXPORTER_OTLP_TRACES_ENDPOINT/],
    [{ OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, /OTEL_EXPORTER_OTLP_PROTOCOL/],
    [{ OTEL_TRACES_SAMPLER: 'sometimes' }, /OTEL_TRACES_SAMPLER/],
    [{ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '2' }, /OTEL_TRACES_SAMPLER_ARG/],
    [{ OTEL_EXPORTER_OTLP_HEADERS: 'api-key' }, /OTEL_EXPORTER_OTLP_HEADERS/],
  ])('refuses %j', (env, message) => {
    expect(() => load(env)).toThrow(ConfigError);
    expect(() => load(env)).toThrow(message);
  });

  it('never repeats a header value it refuses', () => {
    expect(() => load({ OTEL_EXPORTER_OTLP_HEADERS: 'api-key=%E0%A4%A' })).toThrow(/api-key/);
    expect(() => load({ OTEL_EXPORTER_OTLP_HEADERS: 'api-key=%E0%A4%A' })).not.toThrow(/%E0/);
  });
});
