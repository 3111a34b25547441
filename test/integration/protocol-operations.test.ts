// Protocol operations (`x-protocol`) own their wire format: parameters and members they do not
// declare are ignored, and the problems of a request reach their handler, which answers in its
// protocol. Proven on fixture operations added to the real document (the OAuth and SCIM ones are
// not built yet) and on the built MCP endpoint; REST operations are still refused with 400.
import { MODULES } from '../../src/modules';
import type { Module } from '../../src/http/area';
import type { RequestContext } from '../../src/http/context';
import type { AnyResult, ProtocolInput } from '../../src/http/handler-types';
import { refuseProblems } from '../../src/http/protocol';
import { loadSpec, type OpenApiDocument } from '../../src/spec';
import { startTestApp, type TestApp } from '../support/app';
import { anything, FIXTURE_TAG, fixtureOperation, json } from '../support/fixture-spec';

const TAG = FIXTURE_TAG;
const REGISTERED_REDIRECT = 'https://client.example/callback';
const op = fixtureOperation;

function fixtureSpec(): OpenApiDocument {
  const spec = structuredClone(loadSpec());
  spec.tags = [...(spec.tags as object[]), { name: TAG, description: 'Fixtures of protocol operations.' }];
  spec.paths['/fixture/oauth/authorize'] = {
    get: op('fixtureAuthorize', {
      'x-protocol': 'oauth',
      parameters: [
        { name: 'client_id', in: 'query', required: true, schema: { type: 'string', pattern: '^oac_[a-z0-9]+$' } },
        { name: 'response_type', in: 'query', schema: { type: 'string', enum: ['code'] } },
        { name: 'redirect_uri', in: 'query', schema: { type: 'string' } },
        { name: 'state', in: 'query', schema: { type: 'string' } },
      ],
      responses: {
        200: { description: 'Echo.', ...json(anything) },
        302: { description: 'Back to the client.' },
        400: { description: 'OAuth error.', ...json(anything) },
      },
    }),
  };
  const grant = (type: string, required: string[]) => ({
    type: 'object',
    additionalProperties: false,
    required: ['grant_type', ...required],
    properties: { grant_type: { type: 'string', enum: [type] }, code: { type: 'string' }, refresh_token: { type: 'string' } },
  });
  spec.paths['/fixture/oauth/token'] = {
    post: op('fixtureToken', {
      'x-protocol': 'oauth',
      'x-audit': null,
      requestBody: {
        required: true,
        content: {
          'application/x-www-form-urlencoded': {
            schema: {
              type: 'object',
              oneOf: [grant('authorization_code', ['code']), grant('refresh_token', ['refresh_token'])],
              discriminator: { propertyName: 'grant_type' },
            },
          },
        },
      },
      responses: { 200: { description: 'Echo.', ...json(anything) }, 400: { description: 'OAuth error.', ...json(anything) } },
    }),
  };
  spec.paths['/fixture/scim/Users/{id}'] = {
    get: op('fixtureScimUser', {
      'x-protocol': 'scim',
      parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string', format: 'uuid' } }],
      responses: {
        200: { description: 'A user.', content: { 'application/scim+json': { schema: anything } } },
        404: { description: 'SCIM error.', content: { 'application/scim+json': { schema: anything } } },
      },
    }),
  };
  spec.paths['/fixture/rest'] = {
    get: op('fixtureRest', {
      parameters: [{ name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1 } }],
      responses: { 200: { description: 'Echo.', ...json(anything) }, 400: { $ref: '#/components/responses/BadRequest' } },
    }),
  };
  return spec;
}

/** What the last protocol handler received, for the assertions on it. */
let received: ProtocolInput<unknown> | null = null;

const handlers: Record<string, (input: any, ctx: RequestContext) => Promise<AnyResult>> = {
  async fixtureAuthorize(input: ProtocolInput<{ query: Record<string, unknown> }>) {
    received = input;
    if (!input.valid) {
      // Only a redirect URI the client registered may carry the error back.
      const redirect =
        input.raw.query.redirect_uri === REGISTERED_REDIRECT ? { uri: REGISTERED_REDIRECT, state: String(input.raw.query.state ?? '') } : undefined;
      refuseProblems('oauth', input.problems, { redirect });
    }
    return { status: 200, body: input.value.query };
  },
  async fixtureToken(input: ProtocolInput<{ body: unknown }>) {
    received = input;
    if (!input.valid) refuseProblems('oauth', input.problems);
    return { status: 200, body: input.value.body };
  },
  async fixtureScimUser(input: ProtocolInput<{ params: { id: string } }>) {
    received = input;
    if (!input.valid) refuseProblems('scim', input.problems);
    return { status: 200, body: { id: input.value.params.id }, contentType: 'application/scim+json' };
  },
  async fixtureRest({ query }) {
    return { status: 200, body: query };
  },
};
const fixtureArea = { name: TAG, tag: TAG, handlers } as unknown as Module;

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ spec: fixtureSpec(), modules: [...MODULES, fixtureArea], checkSpec: false });
});
afterAll(() => t.close());
beforeEach(() => {
  received = null;
});

const form = (fields: Record<string, string>) => ({
  raw: new URLSearchParams(fields).toString(),
  headers: { 'content-type': 'application/x-www-form-urlencoded' },
});

describe('a protocol operation', () => {
  it('ignores query parameters it does not declare (prompt=consent, nonce, login_hint)', async () => {
    const res = await t.call('GET', '/fixture/oauth/authorize?client_id=oac_abc&response_type=code&prompt=consent&nonce=n-1&login_hint=a%40b.example');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ client_id: 'oac_abc', response_type: 'code' });
  });

  it('hands its handler the problems and the request as it arrived, instead of a 400 validation_failed', async () => {
    const res = await t.call('GET', '/fixture/oauth/authorize?client_id=https%3A%2F%2Fclient.example%2Fmetadata.json&response_type=token');
    expect(received).toEqual({
      valid: false,
      problems: expect.arrayContaining([
        expect.objectContaining({ in: 'query', pointer: '/client_id' }),
        expect.objectContaining({ in: 'query', pointer: '/response_type' }),
      ]),
      raw: expect.objectContaining({ query: { client_id: 'https://client.example/metadata.json', response_type: 'token' } }),
    });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: 'unsupported_response_type', error_description: expect.stringContaining('client_id') });
    expect(res.headers.get('cache-control')).toBe('no-store');
  });

  it('may send the OAuth error back to a registered redirect URI with the state', async () => {
    const res = await t.call('GET', `/fixture/oauth/authorize?client_id=bad&redirect_uri=${encodeURIComponent(REGISTERED_REDIRECT)}&state=s-42`);
    expect(res.status).toBe(302);
    const location = new URL(res.headers.get('location') ?? '');
    expect(`${location.origin}${location.pathname}`).toBe(REGISTERED_REDIRECT);
    expect(Object.fromEntries(location.searchParams)).toEqual({
      error: 'invalid_request',
      error_description: expect.stringContaining('client_id'),
      state: 's-42',
    });
  });

  it('answers an unknown grant type with unsupported_grant_type', async () => {
    const res = await t.call('POST', '/fixture/oauth/token', undefined, form({ grant_type: 'urn:example:unknown', code: 'c' }));
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: 'unsupported_grant_type', error_description: expect.any(String) });
  });

  it('ignores body members it does not declare', async () => {
    const res = await t.call(
      'POST',
      '/fixture/oauth/token',
      undefined,
      form({ grant_type: 'authorization_code', code: 'c', client_id: 'oac_x', resource: 'https://a.example/mcp/1' }),
    );
    expect(res.status).toBe(200);
    expect(received).toMatchObject({ valid: true });
    expect(res.body).toMatchObject({ grant_type: 'authorization_code', code: 'c' });
  });

  it('answers a SCIM resource id that cannot be one with SCIM 404', async () => {
    const res = await t.call('GET', '/fixture/scim/Users/not-a-uuid?sortBy=userName');
    expect(res.status).toBe(404);
    expect(res.headers.get('content-type')).toMatch(/^application\/scim\+json/);
    expect(res.body).toEqual({ schemas: ['urn:ietf:params:scim:api:messages:2.0:Error'], status: '404', detail: 'Resource not found.' });
  });
});

describe('a REST operation', () => {
  it('is still refused with 400 validation_failed for a parameter it does not declare', async () => {
    const res = await t.call('GET', '/fixture/rest?limit=2&sortBy=name');
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({
      code: 'validation_failed',
      errors: [{ in: 'query', pointer: '/sortBy', message: 'is not a parameter of this operation' }],
    });
  });
});

describe('the built protocol operations', () => {
  let mcpPath: string;
  let mcp: { headers: Record<string, string>; token: string };
  beforeAll(async () => {
    const org = await t.factories.org();
    const token = await t.factories.token(org.orgId, await t.factories.member(org.orgId));
    const created = await t.as({ token, org: org.orgId }).post('/user-toolbox/utbx_dyn_all/mcp', { name: 'protocol' });
    mcpPath = `/mcp/${created.body.mcp_server.id}`;
    mcp = { headers: { accept: 'application/json, text/event-stream' }, token: created.body.token as string };
  });

  it('serve a well-known document whatever query parameters come with it', async () => {
    const res = await t.call('GET', '/.well-known/oauth-protected-resource?x=1');
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ resource: t.deps.config.baseUrl });
  });

  it('answer a body the MCP endpoint cannot take with a JSON-RPC error, as before', async () => {
    const res = await t.call('POST', mcpPath, { jsonrpc: '1.0', method: 7 }, mcp);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ jsonrpc: '2.0', error: { code: -32600 } });
    expect(res.body).not.toHaveProperty('id');
  });

  it('leave a JSON-RPC member the MCP endpoint does not know to the client', async () => {
    const res = await t.call('POST', mcpPath, { jsonrpc: '2.0', id: 1, method: 'ping', x_trace: 'abc' }, mcp);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ jsonrpc: '2.0', id: 1, result: {} });
  });
});
