/**
 * The loopback upstream peers themselves: each answers a real MCP SDK client the way the
 * connections tests rely on (keys refused with 401, whoami names the member, pagination, SSE,
 * the OAuth flow by hand, and the published reference server over both transports).
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { manyTools, startApiKeyUpstream, useUpstream } from '../support/upstream-mcp';

type Headers = Record<string, string>;

/** Connects an SDK client over `transport`, runs `use`, closes the client. */
async function withClient<T>(url: string, transport: 'streamable_http' | 'sse', headers: Headers, use: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client({ name: 'peers-test', version: '1.0.0' });
  const target = new URL(url);
  const t =
    transport === 'sse'
      ? new SSEClientTransport(target, {
          requestInit: { headers },
          // The SSE stream is a GET through fetch: it needs the headers too.
          fetch: (input, init) => fetch(input, { ...init, headers: { ...Object.fromEntries(new globalThis.Headers(init?.headers).entries()), ...headers } }),
        })
      : new StreamableHTTPClientTransport(target, { requestInit: { headers } });
  await client.connect(t);
  try {
    return await use(client);
  } finally {
    await client.close();
  }
}

async function listAll(client: Client): Promise<{ tools: Tool[]; pages: number }> {
  const tools: Tool[] = [];
  let cursor: string | undefined;
  let pages = 0;
  do {
    const page = await client.listTools(cursor === undefined ? {} : { cursor });
    tools.push(...page.tools);
    cursor = page.nextCursor;
    pages += 1;
  } while (cursor !== undefined && pages < 100);
  return { tools, pages };
}

function textOf(result: Awaited<ReturnType<Client['callTool']>>): string {
  const content = result.content as { type: string; text?: string }[];
  return content.map((c) => c.text ?? '').join('');
}

describe('API-key upstream', () => {
  const up = useUpstream(() => startApiKeyUpstream({ keys: { 'key-a': 'alice', 'key-b': 'bob' }, tools: manyTools(7), pageSize: 4 }));
  beforeEach(() => {
    up.peer.seen.length = 0;
    up.peer.setKeys({ 'key-a': 'alice', 'key-b': 'bob' });
    up.peer.up();
    up.peer.delayMs = 0;
  });

  it('answers whoami with the member whose key reached it, and records the key', async () => {
    for (const [key, member] of [['key-a', 'alice'], ['key-b', 'bob']] as const) {
      const result = await withClient(up.peer.url, 'streamable_http', { authorization: `Bearer ${key}` }, (c) => c.callTool({ name: 'whoami', arguments: {} }));
      expect(textOf(result)).toBe(member);
      expect(result.structuredContent).toEqual({ member, credential: key });
    }
    expect(new Set(up.peer.seen.map((s) => s.credential))).toEqual(new Set(['key-a', 'key-b']));
    expect(up.peer.seen.every((s) => s.accepted)).toBe(true);
    expect(up.peer.seen.map((s) => s.rpc)).toContain('tools/call');
  });

  it('refuses a wrong, missing or revoked key with 401', async () => {
    const post = (headers: Headers) =>
      fetch(up.peer.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      });
    expect((await post({ authorization: 'Bearer nope' })).status).toBe(401);
    expect((await post({})).status).toBe(401);
    expect((await post({ authorization: 'key-a' })).status).toBe(401);
    await expect(withClient(up.peer.url, 'streamable_http', { authorization: 'Bearer nope' }, (c) => c.listTools())).rejects.toMatchObject({ code: 401 });
    up.peer.setKeys({ 'key-b': 'bob' });
    expect((await post({ authorization: 'Bearer key-a' })).status).toBe(401);
    expect(up.peer.seen.filter((s) => !s.accepted).map((s) => s.credential)).toEqual(['nope', null, 'key-a', 'nope', 'key-a']);
  });

  it('paginates tools/list with nextCursor', async () => {
    const { tools, pages } = await withClient(up.peer.url, 'streamable_http', { authorization: 'Bearer key-a' }, listAll);
    expect(pages).toBe(3);
    expect(tools.map((t) => t.name)).toEqual(['whoami', 'echo', ...manyTools(7).map((t) => t.name)]);
  });

  it('echoes', async () => {
    const result = await withClient(up.peer.url, 'streamable_http', { authorization: 'Bearer key-a' }, (c) => c.callTool({ name: 'echo', arguments: { text: 'hi' } }));
    expect(textOf(result)).toBe('hi');
  });

  it('serves the same over SSE', async () => {
    const { tools, who } = await withClient(up.peer.urls.sse, 'sse', { authorization: 'Bearer key-b' }, async (c) => ({
      tools: (await listAll(c)).tools,
      who: textOf(await c.callTool({ name: 'whoami', arguments: {} })),
    }));
    expect(tools).toHaveLength(9);
    expect(who).toBe('bob');
    expect(up.peer.seen.map((s) => s.transport)).toEqual(expect.arrayContaining(['sse']));
    const refused = await fetch(up.peer.urls.sse, { headers: { authorization: 'Bearer nope' } });
    expect(refused.status).toBe(401);
  });

  it('goes down (503 or cut connections) and comes back', async () => {
    up.peer.down();
    const res = await fetch(up.peer.url, { method: 'POST', headers: { authorization: 'Bearer key-a' }, body: '{}' });
    expect(res.status).toBe(503);
    up.peer.down('close');
    await expect(fetch(up.peer.url, { method: 'POST', headers: { authorization: 'Bearer key-a' }, body: '{}' })).rejects.toThrow();
    up.peer.up();
    const result = await withClient(up.peer.url, 'streamable_http', { authorization: 'Bearer key-a' }, (c) => c.callTool({ name: 'whoami', arguments: {} }));
    expect(textOf(result)).toBe('alice');
  });

  it('waits delayMs before answering', async () => {
    up.peer.delayMs = 150;
    const started = Date.now();
    const res = await fetch(up.peer.url, { method: 'POST', body: '{}' });
    expect(res.status).toBe(401);
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
  });
});

describe('API-key upstream with the key in the query or a custom header', () => {
  it('takes the key from a query parameter', async () => {
    const peer = await startApiKeyUpstream({ keys: { k1: 'carol' }, placement: { placement: 'query', name: 'api_key' } });
    try {
      const result = await withClient(`${peer.url}?api_key=k1`, 'streamable_http', {}, (c) => c.callTool({ name: 'whoami', arguments: {} }));
      expect(textOf(result)).toBe('carol');
      expect((await fetch(`${peer.url}?api_key=k2`, { method: 'POST', body: '{}' })).status).toBe(401);
    } finally {
      await peer.close();
    }
  });

  it('takes the key from a named header without prefix, SSE included', async () => {
    const peer = await startApiKeyUpstream({ keys: { k1: 'dave' }, placement: { placement: 'header', name: 'X-Api-Key' }, transport: 'sse' });
    try {
      expect(peer.url).toBe(peer.urls.sse);
      const who = await withClient(peer.url, 'sse', { 'x-api-key': 'k1' }, async (c) => textOf(await c.callTool({ name: 'whoami', arguments: {} })));
      expect(who).toBe('dave');
      expect(peer.seen.every((s) => s.credential === 'k1')).toBe(true);
    } finally {
      await peer.close();
    }
  });
});
