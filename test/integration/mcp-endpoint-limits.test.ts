import http from 'node:http';
import { startTestApp, type TestApp } from '../support/app';
import type { SeededOrg } from '../support/factories';

/*
 * The MCP endpoint `/mcp/{mcpId}` at its edges, raw over HTTP, in an app with a small rate
 * limit (RATE_LIMIT_REQUESTS): the Origin check before authentication, the rate limit per MCP
 * server and, without a credential, per address (429 with Retry-After as a JSON-RPC error), oversized bodies (413, never a 5xx), and
 * the methods it does not take (405 with `Allow`).
 */

const BUDGET = 8;
let t: TestApp;
let org: SeededOrg;
const servers: { id: string; token: string }[] = [];

beforeAll(async () => {
  t = await startTestApp({ env: { RATE_LIMIT_REQUESTS: String(BUDGET) } });
  org = await t.factories.org();
  const memberId = await t.factories.member(org.orgId);
  const token = await t.factories.token(org.orgId, memberId);
  for (const name of ['Limited', 'Other', 'Bodies', 'Methods']) {
    const res = await t.as({ token, org: org.orgId }).post('/user-toolbox/utbx_dyn_all/mcp', { name });
    expect(res.status).toBe(201);
    servers.push({ id: res.body.mcp_server.id, token: res.body.token });
  }
}, 60_000);
afterAll(() => t.close());

const endpoint = (id: string) => `${t.url}/mcp/${id}`;
const ping = (id: number) => JSON.stringify({ jsonrpc: '2.0', id, method: 'ping' });
const post = (id: string, body: string, headers: Record<string, string> = {}) =>
  fetch(endpoint(id), { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', ...headers }, body });

it('refuses a foreign Origin before it looks at the token: 403, not 401', async () => {
  const [server] = servers as [{ id: string; token: string }];
  const evil = { Origin: 'https://evil.example' };
  for (const headers of [evil, { ...evil, Authorization: 'Bearer mcpt_not_a_token' }, { ...evil, Authorization: `Bearer ${server.token}` }]) {
    const res = await post(server.id, ping(1), headers);
    expect(res.status).toBe(403);
    expect(res.headers.get('www-authenticate')).toBeNull();
    const body = (await res.json()) as object;
    expect(body).toMatchObject({ jsonrpc: '2.0', error: { code: -32600, message: 'Forbidden: Origin https://evil.example is not allowed' } });
    expect(body).not.toHaveProperty('id');
  }
  const del = await fetch(endpoint(server.id), { method: 'DELETE', headers: evil });
  expect(del.status).toBe(403);
  // The deployment's own origin passes, and then the token is asked for.
  const own = await post(server.id, ping(2), { Origin: new URL(t.deps.config.baseUrl).origin });
  expect(own.status).toBe(401);
});

it('limits each MCP server’s requests: 429 with Retry-After as a JSON-RPC error, other servers unaffected', async () => {
  const [limited, other] = servers as [{ id: string; token: string }, { id: string; token: string }];
  const auth = { Authorization: `Bearer ${limited.token}` };
  let refused: Response | null = null;
  let answered = 0;
  for (let i = 0; i < BUDGET * 3 && !refused; i += 1) {
    const res = await post(limited.id, ping(i), auth);
    if (res.status === 429) refused = res;
    else {
      expect(res.status).toBe(200);
      answered += 1;
      await res.body?.cancel();
    }
  }
  expect(refused).not.toBeNull();
  expect(answered).toBeLessThanOrEqual(BUDGET);
  const res = refused as Response;
  expect(res.headers.get('retry-after')).toMatch(/^\d+$/);
  expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
  const body = (await res.json()) as { error: { message: string } };
  expect(body).toMatchObject({ jsonrpc: '2.0', error: { code: -32600 } });
  expect(body).not.toHaveProperty('id');
  expect(body.error.message).toMatch(/^Too Many Requests/);
  const fine = await post(other.id, ping(99), { Authorization: `Bearer ${other.token}` });
  expect(fine.status).toBe(200);
  expect(await fine.json()).toEqual({ jsonrpc: '2.0', id: 99, result: {} });
});

/** A raw POST (node:http), so that a body can be sent chunked, without Content-Length. */
function rawPost(path: string, headers: Record<string, string>, chunks: Buffer[]): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const url = new URL(path, t.url);
    const req = http.request(url, { method: 'POST', headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    // The server may answer and close before the whole body is sent: that is the point.
    req.on('error', (err: NodeJS.ErrnoException) => (err.code === 'EPIPE' || err.code === 'ECONNRESET' ? undefined : reject(err)));
    for (const chunk of chunks) req.write(chunk);
    req.end();
  });
}

it('refuses an oversized body with 413 as a JSON-RPC error, announced or chunked', async () => {
  const server = servers[2] as { id: string; token: string };
  const limit = t.deps.config.bodyLimitBytes;
  const text = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'x__y', arguments: { blob: 'a'.repeat(limit + 10) } } });
  const announced = await post(server.id, text, { Authorization: `Bearer ${server.token}` });
  expect(announced.status).toBe(413);
  expect(await announced.json()).toMatchObject({ jsonrpc: '2.0', error: { code: -32600, message: expect.stringMatching(/^Payload Too Large/) } });
  const headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${server.token}` };
  const bytes = Buffer.from(text);
  const chunked = await rawPost(`/mcp/${server.id}`, headers, [bytes.subarray(0, 65_536), bytes.subarray(65_536)]);
  expect(chunked.status).toBe(413);
  expect(JSON.parse(chunked.body)).toMatchObject({ jsonrpc: '2.0', error: { code: -32600 } });
  // A body just under the limit is read (and answered as what it is: a tool this server does not list).
  const fits = await post(
    server.id,
    JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'x__y', arguments: { blob: 'a'.repeat(limit - 200) } } }),
    {
      Authorization: `Bearer ${server.token}`,
    },
  );
  expect(fits.status).toBe(200);
  expect(await fits.json()).toMatchObject({ id: 2, error: { code: -32602 } });
});

it('refuses a batch past 50 messages at once, however many it holds (no validation of each)', async () => {
  const server = servers[2] as { id: string; token: string };
  const headers = { Authorization: `Bearer ${server.token}`, 'MCP-Protocol-Version': '2025-03-26' };
  // 200,000 items, under the body limit: validated one by one, this held the server for minutes.
  const started = Date.now();
  const huge = await post(server.id, `[${Array.from({ length: 200_000 }, () => '1').join(',')}]`, headers);
  expect(huge.status).toBe(400);
  const refused = (await huge.json()) as object;
  expect(refused).toMatchObject({ jsonrpc: '2.0', error: { code: -32600 } });
  expect(refused).not.toHaveProperty('id');
  expect(Date.now() - started).toBeLessThan(5_000);
  // 50 is still a batch.
  const fifty = await post(server.id, `[${Array.from({ length: 50 }, (_, i) => ping(i + 1)).join(',')}]`, headers);
  expect(fifty.status).toBe(200);
  expect(((await fifty.json()) as unknown[]).length).toBe(50);
});

it('answers the methods it does not take with 405 and Allow: POST, DELETE', async () => {
  const server = servers[3] as { id: string; token: string };
  for (const method of ['GET', 'PUT', 'PATCH']) {
    const res = await fetch(endpoint(server.id), {
      method,
      headers: { Authorization: `Bearer ${server.token}`, Accept: 'text/event-stream, application/json' },
    });
    expect({ method, status: res.status }).toEqual({ method, status: 405 });
    expect(
      res.headers
        .get('allow')
        ?.split(',')
        .map((m) => m.trim())
        .sort(),
    ).toEqual(['DELETE', 'POST']);
    const body = (await res.json()) as object;
    expect(body).toMatchObject({ jsonrpc: '2.0', error: { code: -32600 } });
    expect(body).not.toHaveProperty('id');
  }
});

// Last in the file: it spends this address's budget.
it('limits requests without a credential by address, answered as a JSON-RPC error too', async () => {
  const [server] = servers as [{ id: string; token: string }];
  let refused: Response | null = null;
  for (let i = 0; i < BUDGET * 3 && !refused; i += 1) {
    const res = await post(server.id, ping(i));
    if (res.status === 429) refused = res;
    else {
      expect(res.status).toBe(401);
      await res.body?.cancel();
    }
  }
  expect(refused).not.toBeNull();
  const res = refused as Response;
  expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
  const body = (await res.json()) as { error: { message: string } };
  expect(body).toMatchObject({ jsonrpc: '2.0', error: { code: -32600 } });
  expect(body).not.toHaveProperty('id');
  expect(body.error.message).toMatch(/^Too Many Requests/);
});
