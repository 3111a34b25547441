import { readFileSync } from 'node:fs';
import { get } from 'node:http';
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
      'Health', 'Schema', 'Auth', 'Current user', 'Organizations', 'Entitlements', 'Permissions', 'Roles', 'Teams',
      'Members', 'Invites', 'Org domains', 'Audit log', 'Connectors', 'Custom connectors', 'Connections', 'Templates',
      'Toolboxes', 'Synthetic tools', 'MCP control plane', 'MCP OAuth', 'OAuth discovery', 'Restrictions',
      'Access requests', 'Files', 'Logging destinations', 'Notification destinations', 'SSO connections',
      'SCIM groups', 'SCIM v2', 'Group mapping',
    ];
    const names: string[] = body.tags.map((tag: { name: string }) => tag.name);
    expect(names.slice(0, described.length)).toEqual(described);
    expect(new Set(names).size).toBe(names.length);
  });
});

describe('getApiReference', () => {
  it('serves a Redoc page that loads this document and only this deployment\'s scripts', async () => {
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

    // The assets are static files beside the API, not operations: fetched without the spec check.
    const init = await fetch(`${t.url}/docs/assets/init.js`);
    expect(init.status).toBe(200);
    expect(init.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(await init.text()).toContain("Redoc.init('openapi.json'");
    // The document the page loads is the served one.
    expect((await t.call('GET', '/openapi.json')).status).toBe(200);
  });

  it('serves the Redoc bundle from the installed package', async () => {
    const res = await fetch(`${t.url}/docs/assets/redoc.standalone.js`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    const body = await res.text();
    expect(body.length).toBeGreaterThan(500_000);
    expect(body).toContain('Redoc');
  });

  it('answers other asset paths with the API\'s 404', async () => {
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

  it('answers the MCP endpoint in its own format: a JSON-RPC error -32000', async () => {
    draining.drain();
    const res = await draining.call('POST', `/mcp/${newId('mcpServer')}`, { jsonrpc: '2.0', id: 1, method: 'ping' }, {
      headers: { accept: 'application/json, text/event-stream' },
    });
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('5');
    expect(res.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'Service Unavailable: The server is shutting down; retry shortly.' } });
  });
});
