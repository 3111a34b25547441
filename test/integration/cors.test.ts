// Browser-based MCP clients call /oauth/*, /.well-known/* and /mcp/{mcpId} from pages of their
// own origin: those paths (`x-cors` in the spec) answer preflights and expose the headers a
// client must read, while the MCP endpoint keeps refusing an Origin that is not allowed.
import { startTestApp, type TestApp } from '../support/app';

const ALLOWED = 'https://app.example.com';
const FOREIGN = 'https://evil.example';
const preflight = (origin: string, method = 'POST') => ({
  headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': 'authorization, content-type, mcp-protocol-version' },
});

const methodsOf = (headers: Headers) => (headers.get('access-control-allow-methods') ?? '').split(', ').sort();

let t: TestApp;
let mcpPath: string;
beforeAll(async () => {
  t = await startTestApp({ env: { MCP_ALLOWED_ORIGINS: ALLOWED } });
  const org = await t.factories.org();
  const token = await t.factories.token(org.orgId, await t.factories.member(org.orgId));
  const created = await t.as({ token, org: org.orgId }).post('/user-toolbox/utbx_dyn_all/mcp', { name: 'cors' });
  mcpPath = `/mcp/${created.body.mcp_server.id}`;
});
afterAll(() => t.close());

describe('a preflight', () => {
  it('of an MCP endpoint from an allowed origin is answered 204 with its methods and the MCP headers', async () => {
    const res = await t.call('OPTIONS', mcpPath, undefined, preflight(ALLOWED));
    expect(res.status).toBe(204);
    expect(res.headers.get('access-control-allow-origin')).toBe('*');
    expect(methodsOf(res.headers)).toEqual(['DELETE', 'POST']);
    const allowed = (res.headers.get('access-control-allow-headers') ?? '').toLowerCase().split(', ');
    expect(allowed).toEqual(
      expect.arrayContaining(['authorization', 'content-type', 'mcp-protocol-version', 'mcp-method', 'mcp-name', 'last-event-id', 'mcp-session-id']),
    );
    expect(Number(res.headers.get('access-control-max-age'))).toBeGreaterThan(0);
  });

  it('of an MCP endpoint from a foreign origin is refused 403, as its request would be', async () => {
    const res = await t.call('OPTIONS', mcpPath, undefined, preflight(FOREIGN));
    expect(res.status).toBe(403);
    expect(res.headers.get('access-control-allow-origin')).toBeNull();
    expect(res.body).toMatchObject({ jsonrpc: '2.0', error: { code: -32600 } });
  });

  it('of a discovery document is answered 204 for any origin', async () => {
    const res = await t.call('OPTIONS', '/.well-known/oauth-protected-resource', undefined, preflight(FOREIGN, 'GET'));
    expect(res.status).toBe(204);
    expect(methodsOf(res.headers)).toEqual(['GET', 'HEAD']);
  });

  it('of an OAuth endpoint is answered 204 even before the endpoint is built', async () => {
    const res = await t.call('OPTIONS', '/oauth/token', undefined, preflight(FOREIGN));
    expect(res.status).toBe(204);
    expect(methodsOf(res.headers)).toEqual(['POST']);
  });

  it('of a REST path is still 405: it is not open to other origins', async () => {
    const res = await t.call('OPTIONS', '/team', undefined, preflight(ALLOWED, 'GET'));
    expect(res.status).toBe(405);
    expect(res.headers.get('access-control-allow-origin')).toBeNull();
  });
});

describe('a cross-origin response', () => {
  it('of an MCP endpoint lets the page read WWW-Authenticate and Mcp-Session-Id', async () => {
    const res = await t.call(
      'POST',
      mcpPath,
      { jsonrpc: '2.0', id: 1, method: 'ping' },
      { headers: { origin: ALLOWED, accept: 'application/json, text/event-stream' } },
    );
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toContain('resource_metadata=');
    expect(res.headers.get('access-control-allow-origin')).toBe('*');
    expect((res.headers.get('access-control-expose-headers') ?? '').split(', ')).toEqual(expect.arrayContaining(['WWW-Authenticate', 'Mcp-Session-Id']));
  });

  it('of a REST path carries no CORS headers', async () => {
    const res = await t.call('GET', '/permission', undefined, { headers: { origin: ALLOWED } });
    expect(res.status).toBe(401);
    expect(res.headers.get('access-control-allow-origin')).toBeNull();
  });
});
