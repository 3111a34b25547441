import { readFileSync } from 'node:fs';
import { get, type IncomingHttpHeaders } from 'node:http';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { join } from 'node:path';
import YAML from 'yaml';
import { newId } from '../../src/lib/ids';
import { projectRoot } from '../../src/spec';

const generatedYaml = () => readFileSync(join(projectRoot, 'generated', 'openapi.yml'), 'utf8');
import { startTestApp, type TestApp } from '../support/app';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

describe('getHealth', () => {
  it('answers ok without a credential', async () => {
    const res = await t.call('GET', '/health');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ok: true, service: 'mcp-control-plane' });
  });

  it('keeps idle connections longer than a load balancer in front (KEEP_ALIVE_TIMEOUT_MS, 65 s)', async () => {
    const keepAlive = await new Promise<string | undefined>((resolve, reject) => {
      get(`${t.url}/health`, (res) => {
        res.resume();
        resolve(String(res.headers['keep-alive']));
      }).on('error', reject);
    });
    expect(keepAlive).toBe('timeout=65');
  });

  it('refuses unknown query parameters', async () => {
    const res = await t.call('GET', '/health?verbose=1');
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('validation_failed');
    expect(res.body.errors).toEqual([{ in: 'query', pointer: '/verbose', message: 'is not a parameter of this operation' }]);
  });
});

describe('OpenAPI documents', () => {
  it('serves the same JSON at /openapi.json and /schema/openapi.json, naming this server', async () => {
    const a = await t.call('GET', '/openapi.json');
    const b = await t.call('GET', '/schema/openapi.json');
    expect(a.status).toBe(200);
    expect(a.headers.get('content-type')).toMatch(/^application\/json/);
    expect(a.text).toBe(b.text);
    expect(a.body.openapi).toBe('3.1.0');
    expect(a.body.info.version).toBe('0.1.0');
    expect(a.body.servers).toEqual([{ url: t.url, description: 'This deployment.' }]);
    // The one link that surely exists: this deployment's own reference.
    expect(a.body.info.contact).toEqual({ name: 'MCP control plane team', url: `${t.url}/docs` });
  });

  it('serves the same document as YAML at /openapi.yaml and /schema/openapi.yml', async () => {
    const json = await t.call('GET', '/openapi.json');
    const a = await t.call('GET', '/openapi.yaml');
    const b = await t.call('GET', '/schema/openapi.yml');
    expect(a.status).toBe(200);
    expect(a.headers.get('content-type')).toMatch(/^application\/yaml/);
    expect(a.text).toBe(b.text);
    expect(YAML.parse(a.text)).toEqual(json.body);
  });

  it('serves YAML that a YAML 1.1 reader (PyYAML, SnakeYAML) reads as the JSON document: no dates, no yes/no/off', async () => {
    const json = await t.call('GET', '/openapi.json');
    const yaml = await t.call('GET', '/openapi.yaml');
    expect(YAML.parse(yaml.text, { version: '1.1' })).toEqual(json.body);
    expect(YAML.parse(generatedYaml(), { version: '1.1' })).toEqual(YAML.parse(generatedYaml()));
  });

  // Areas may add tags of their own (x-tags in their path file); they come after these.
  it('lists every tag of the service description first, in its order', async () => {
    const { body } = await t.call('GET', '/openapi.json');
    const described = [
      'Health',
      'Schema',
      'Auth',
      'Current user',
      'Organizations',
      'Entitlements',
      'Permissions',
      'Roles',
      'Teams',
      'Members',
      'Invites',
      'Org domains',
      'Audit log',
      'Connectors',
      'Custom connectors',
      'Connections',
      'Templates',
      'Toolboxes',
      'Synthetic tools',
      'MCP control plane',
      'MCP OAuth',
      'OAuth discovery',
      'Restrictions',
      'Access requests',
      'Files',
      'Logging destinations',
      'Notification destinations',
      'SSO connections',
      'SCIM groups',
      'SCIM v2',
      'Group mapping',
    ];
    const names: string[] = body.tags.map((tag: { name: string }) => tag.name);
    expect(names.slice(0, described.length)).toEqual(described);
    expect(new Set(names).size).toBe(names.length);
  });
});

/** A GET as it travels (node:http, no decompression): status, headers and the bytes as sent. */
function rawGet(path: string, headers: Record<string, string>): Promise<{ status: number; headers: IncomingHttpHeaders; bytes: Buffer }> {
  return new Promise((resolve, reject) => {
    get(`${t.url}${path}`, { headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, bytes: Buffer.concat(chunks) }));
    }).on('error', reject);
  });
}

describe('OpenAPI documents, cached and compressed', () => {
  it('sends each document compressed as the client accepts it, each coding with its own ETag', async () => {
    const plain = await rawGet('/openapi.json', { 'accept-encoding': 'identity' });
    expect(plain.status).toBe(200);
    expect(plain.headers['content-encoding']).toBeUndefined();
    expect(Number(plain.headers['content-length'])).toBe(plain.bytes.length);
    expect(JSON.parse(plain.bytes.toString()).openapi).toBe('3.1.0');
    const br = await rawGet('/openapi.json', { 'accept-encoding': 'gzip, deflate, br' });
    expect(br.headers['content-encoding']).toBe('br');
    expect(br.headers.vary).toBe('Accept-Encoding');
    expect(brotliDecompressSync(br.bytes).equals(plain.bytes)).toBe(true);
    // The document is a megabyte; compressed, a small fraction of it.
    expect(br.bytes.length).toBeLessThan(plain.bytes.length / 4);
    const gz = await rawGet('/openapi.json', { 'accept-encoding': 'gzip;q=1, br;q=0' });
    expect(gz.headers['content-encoding']).toBe('gzip');
    expect(gunzipSync(gz.bytes).equals(plain.bytes)).toBe(true);
    expect(new Set([plain.headers.etag, br.headers.etag, gz.headers.etag]).size).toBe(3);
    const yaml = await rawGet('/openapi.yaml', { 'accept-encoding': 'br' });
    expect(yaml.headers['content-type']).toMatch(/^application\/yaml/);
    expect(YAML.parse(brotliDecompressSync(yaml.bytes).toString())).toEqual(JSON.parse(plain.bytes.toString()));
  });

  it('answers 304 without the bytes to a client that holds them, and 200 to one holding something else', async () => {
    const first = await t.call('GET', '/openapi.json');
    const etag = first.headers.get('etag') as string;
    expect(etag).toMatch(/^"[A-Za-z0-9_-]+(-br|-gzip)?"$/);
    const again = await t.call('GET', '/openapi.json', undefined, { headers: { 'if-none-match': etag } });
    expect(again.status).toBe(304);
    expect(again.text).toBe('');
    expect(again.headers.get('etag')).toBe(etag);
    // Several tags, weak ones and `*` match too.
    expect((await t.call('GET', '/schema/openapi.json', undefined, { headers: { 'if-none-match': `"other", W/${etag}` } })).status).toBe(304);
    expect((await t.call('GET', '/schema/openapi.json', undefined, { headers: { 'if-none-match': '*' } })).status).toBe(304);
    const stale = await t.call('GET', '/openapi.json', undefined, { headers: { 'if-none-match': '"an-older-document"' } });
    expect(stale.status).toBe(200);
    expect(stale.body.openapi).toBe('3.1.0');
    // The YAML document is another representation: the JSON one's tag does not name it.
    expect((await t.call('GET', '/openapi.yaml', undefined, { headers: { 'if-none-match': etag } })).status).toBe(200);
  });
});

describe('getApiReference', () => {
  it("serves a Redoc page that loads this document and only this deployment's scripts", async () => {
    const res = await t.call('GET', '/docs');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
    const scripts = [...res.text.matchAll(/<script src="([^"]+)"/g)].map((m) => m[1]);
    expect(scripts).toEqual(['docs/assets/redoc.standalone.js', 'docs/assets/init.js']);
    // Nothing is fetched from another origin: no absolute URLs in the page.
    expect(res.text).not.toMatch(/(src|href)="(https?:)?\/\//);
    const csp = res.headers.get('content-security-policy') as string;
    expect(csp).toContain("script-src 'self' blob:");
    expect(csp).toContain("connect-src 'self'");
    expect(res.headers.get('cross-origin-opener-policy')).toBe('same-origin');
    expect(res.headers.get('referrer-policy')).toBe('no-referrer');

    // The assets are static files beside the API, not operations: fetched without the spec check.
    const init = await fetch(`${t.url}/docs/assets/init.js`);
    expect(init.status).toBe(200);
    expect(init.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(await init.text()).toContain("Redoc.init('openapi.json'");
    // The document the page loads is the served one.
    expect((await t.call('GET', '/openapi.json')).status).toBe(200);
  });

  it('serves the Redoc bundle from the installed package, compressed, and 304 to a browser that holds it', async () => {
    const res = await fetch(`${t.url}/docs/assets/redoc.standalone.js`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    // Node's fetch asks for gzip and deflate.
    expect(res.headers.get('content-encoding')).toBe('gzip');
    const body = await res.text();
    expect(body.length).toBeGreaterThan(500_000);
    expect(body).toContain('Redoc');
    const held = await fetch(`${t.url}/docs/assets/redoc.standalone.js`, { headers: { 'if-none-match': res.headers.get('etag') as string } });
    expect(held.status).toBe(304);
    expect(await held.text()).toBe('');
  });

  it("answers other asset paths with the API's 404", async () => {
    const res = await t.call('GET', '/docs/assets/other.js');
    expect(res.status).toBe(404);
    expect(res.body.code).toBe('not_found');
  });
});

describe('while the server shuts down', () => {
  let draining: TestApp;
  beforeAll(async () => {
    draining = await startTestApp();
  });
  afterAll(() => draining.close());

  it('answers every request 503 with Retry-After and closes the connection, the health check included', async () => {
    const org = await draining.factories.org();
    expect((await draining.as({ token: org.token }).get('/user/me')).status).toBe(200);
    draining.drain();
    const me = await draining.as({ token: org.token }).get('/user/me');
    expect(me.status).toBe(503);
    expect(me.body).toMatchObject({ code: 'service_unavailable' });
    expect(me.headers.get('retry-after')).toBe('5');
    expect(me.headers.get('connection')).toBe('close');
    const health = await draining.call('GET', '/health');
    expect(health.status).toBe(503);
    expect(health.body).toMatchObject({ code: 'service_unavailable' });
  });

  it('answers the MCP endpoint in its own format: a JSON-RPC error -32603 with no id', async () => {
    draining.drain();
    const res = await draining.call(
      'POST',
      `/mcp/${newId('mcpServer')}`,
      { jsonrpc: '2.0', id: 1, method: 'ping' },
      {
        headers: { accept: 'application/json, text/event-stream' },
      },
    );
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('5');
    expect(res.body).toMatchObject({
      jsonrpc: '2.0',
      error: { code: -32603, message: 'Service Unavailable: The server is shutting down; retry shortly.' },
    });
    expect(res.body).not.toHaveProperty('id');
  });
});
