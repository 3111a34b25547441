// The handler contract every area builds on, proven on a fixture spec (a tag of its own,
// added to the real document) with a fixture area: declared headers, bodies of every media
// type the protocol areas need, results beyond buffered JSON, an area's own credential and
// error format, an engine mounted beside the router, and the checks on all of it.
import { createHash } from 'node:crypto';
import http from 'node:http';
import { Readable } from 'node:stream';
import { MODULES } from '../../src/modules';
import type { Authenticator } from '../../src/identity/credentials';
import type { Module } from '../../src/http/area';
import { ApiError } from '../../src/http/errors';
import type { RequestContext } from '../../src/http/context';
import type { AnyResult, ServerSentEvent, UploadedFile, UploadStream } from '../../src/http/handler-types';
import { checkOpenApiBackend } from '../../src/http/openapi-backend';
import { buildRegistry } from '../../src/http/registry';
import { loadSpec, type OpenApiDocument } from '../../src/spec';
import { describeOperations } from '../../src/spec/operations';
import { anything, FIXTURE_TAG, fixtureOperation, json } from '../support/fixture-spec';
import { startTestApp, type TestApp } from '../support/app';

const TAG = FIXTURE_TAG;
const errors = Object.fromEntries(
  ['400', '401', '403', '404', '413', '415', '429'].map((s) => [
    s,
    {
      $ref: `#/components/responses/${{ 400: 'BadRequest', 401: 'Unauthorized', 403: 'Forbidden', 404: 'NotFound', 413: 'PayloadTooLarge', 415: 'UnsupportedMediaType', 429: 'TooManyRequests' }[s]}`,
    },
  ]),
);
const op = (operationId: string, extra: Record<string, unknown>) =>
  fixtureOperation(operationId, { ...extra, responses: { ...errors, ...(extra.responses as object) } });

function fixtureSpec(): OpenApiDocument {
  const spec = structuredClone(loadSpec());
  spec.tags = [...(spec.tags as object[]), { name: TAG, description: 'Fixtures of the handler contract.' }];
  spec.components.securitySchemes.fixtureToken = { type: 'http', scheme: 'bearer', description: 'A fixture credential bound to an organization.' };
  spec.paths['/fixture/echo/{thing_id}'] = {
    post: op('fixtureEcho', {
      'x-audit': null,
      parameters: [
        { name: 'thing_id', in: 'path', required: true, schema: { type: 'string', pattern: '^thing_[a-z]+$' } },
        { name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1 } },
        { name: 'X-Fixture-Mode', in: 'header', required: true, schema: { type: 'string', enum: ['fast', 'slow'] } },
        { name: 'If-Match', in: 'header', schema: { type: 'string' } },
      ],
      requestBody: { required: true, ...json({ type: 'object', additionalProperties: false, required: ['name'], properties: { name: { type: 'string' } } }) },
      responses: { 200: { description: 'Echo.', ...json(anything) } },
    }),
  };
  spec.paths['/fixture/form'] = {
    post: op('fixtureForm', {
      'x-audit': null,
      requestBody: {
        required: true,
        content: {
          'application/x-www-form-urlencoded': {
            schema: {
              type: 'object',
              additionalProperties: false,
              required: ['grant_type'],
              properties: {
                grant_type: { type: 'string', enum: ['authorization_code', 'refresh_token'] },
                code: { type: 'string' },
                resource: { type: 'array', items: { type: 'string' } },
              },
            },
          },
        },
      },
      responses: { 200: { description: 'Parsed.', ...json(anything) } },
    }),
  };
  spec.paths['/fixture/scim'] = {
    post: op('fixtureScim', {
      'x-audit': null,
      requestBody: {
        required: true,
        content: {
          'application/scim+json': {
            schema: {
              type: 'object',
              required: ['schemas', 'userName'],
              properties: { schemas: { type: 'array', items: { type: 'string' } }, userName: { type: 'string', minLength: 1 } },
            },
          },
        },
      },
      responses: { 201: { description: 'Created.', content: { 'application/scim+json': { schema: anything } } } },
    }),
  };
  spec.paths['/fixture/upload'] = {
    post: op('fixtureUpload', {
      'x-audit': null,
      'x-max-body-bytes': 4096,
      requestBody: {
        required: true,
        content: {
          'multipart/form-data': {
            schema: {
              type: 'object',
              additionalProperties: false,
              required: ['file'],
              properties: { file: { type: 'string', format: 'binary' }, name: { type: 'string', maxLength: 20 } },
            },
          },
        },
      },
      responses: { 200: { description: 'Stored.', ...json(anything) } },
    }),
  };
  spec.paths['/fixture/raw'] = {
    put: op('fixtureRaw', {
      'x-audit': null,
      'x-max-body-bytes': 2048,
      requestBody: {
        required: true,
        content: {
          'application/octet-stream': { schema: { type: 'string', format: 'binary' } },
          'image/png': { schema: { type: 'string', format: 'binary' } },
        },
      },
      responses: { 200: { description: 'Stored.', ...json(anything) } },
    }),
  };
  spec.paths['/fixture/events'] = {
    get: op('fixtureEvents', {
      parameters: [{ name: 'forever', in: 'query', schema: { type: 'boolean' } }],
      responses: { 200: { description: 'Events.', content: { 'text/event-stream': { schema: { type: 'string' } } } } },
    }),
  };
  spec.paths['/fixture/download'] = {
    get: op('fixtureDownload', {
      responses: { 200: { description: 'Bytes.', content: { 'application/pdf': { schema: { type: 'string', format: 'binary' } } } } },
    }),
  };
  spec.paths['/fixture/redirect'] = {
    get: op('fixtureRedirect', {
      responses: { 302: { description: 'Away.', headers: { Location: { schema: { type: 'string' } }, 'Set-Cookie': { schema: { type: 'string' } } } } },
    }),
  };
  spec.paths['/fixture/xml'] = {
    get: op('fixtureXml', { responses: { 200: { description: 'XML.', content: { 'application/xml': { schema: { type: 'string' } } } } } }),
  };
  spec.paths['/fixture/protocol'] = {
    post: op('fixtureProtocol', {
      security: [{ fixtureToken: [] }],
      'x-audit': 'fixture.done',
      'x-events': ['member.removed'],
      responses: { 204: { description: 'Done.' } },
    }),
  };
  spec.paths['/fixture/observe'] = {
    get: op('fixtureObserve', {
      security: [{ fixtureToken: [] }],
      'x-events': ['connection.needs_reauth'],
      responses: { 200: { description: 'Read.', ...json(anything) } },
    }),
  };
  spec.paths['/fixture/undeclared-event'] = {
    post: op('fixtureUndeclaredEvent', { security: [{ fixtureToken: [] }], 'x-audit': 'fixture.done', responses: { 204: { description: 'Done.' } } }),
  };
  spec.paths['/fixture/engine/ping'] = {
    get: op('fixtureEnginePing', { 'x-engine': 'fixture-engine', responses: { 200: { description: 'Pong.', ...json(anything) } } }),
  };
  return spec;
}

/** Tokens `fxt_<orgId>`: a credential bound to an organization that acts for no person, as a SCIM token does. */
const fixtureAuthenticator: Authenticator = {
  describes: 'a fixture token',
  howToSend: 'send a fixture token as "Authorization: Bearer fxt_<organization id>"',
  recognizes: (credential) => credential.scheme === 'bearer' && credential.secret.startsWith('fxt_'),
  async authenticate(credential) {
    const orgId = credential.secret.slice(4);
    if (!orgId.startsWith('org_')) return { status: 'invalid', detail: 'Unknown fixture token.' };
    return { status: 'ok', caller: { kind: 'scim_token', userId: null, tokenId: 'fxt', orgId, access: { orgId, requireMfa: false, permissions: new Set() } } };
  },
};

const streamClosed: { resolve?: () => void } = {};

const handlers: Record<string, (input: any, ctx: RequestContext) => Promise<AnyResult>> = {
  async fixtureEcho(input) {
    return { status: 200, body: input };
  },
  async fixtureForm({ body }) {
    return { status: 200, body };
  },
  async fixtureScim({ body }) {
    return { status: 201, body: { ...body, id: 'scim-1' }, contentType: 'application/scim+json' };
  },
  async fixtureUpload({ body }) {
    const file = body.file as UploadedFile;
    const bytes: Buffer[] = [];
    for await (const chunk of file.open()) bytes.push(chunk as Buffer);
    const data = Buffer.concat(bytes);
    return {
      status: 200,
      body: { name: body.name ?? file.filename, type: file.contentType, size: file.size, sha256: createHash('sha256').update(data).digest('hex') },
    };
  },
  async fixtureRaw({ body }) {
    const upload = body as UploadStream;
    const hash = createHash('sha256');
    let size = 0;
    for await (const chunk of upload) {
      hash.update(chunk as Buffer);
      size += (chunk as Buffer).length;
    }
    return { status: 200, body: { type: upload.contentType, declared: upload.declaredLength, size, sha256: hash.digest('hex') } };
  },
  async fixtureEvents({ query }, ctx) {
    async function* events(): AsyncGenerator<ServerSentEvent> {
      try {
        yield { event: 'progress', data: { done: 1 } };
        yield { id: '2', data: 'two\nlines' };
        while (query.forever && !ctx.signal.aborted) {
          yield { data: { tick: Date.now() } };
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        yield { event: 'result', data: { ok: true } };
      } finally {
        streamClosed.resolve?.();
      }
    }
    return { status: 200, events: events() };
  },
  async fixtureDownload() {
    const bytes = Buffer.from('%PDF-1.7 fixture');
    return { status: 200, body: Readable.from([bytes.subarray(0, 5), bytes.subarray(5)]), contentType: 'application/pdf', contentLength: bytes.length };
  },
  async fixtureRedirect() {
    return { status: 302, headers: { Location: 'https://app.example/signed-in', 'Set-Cookie': ['a=1; Path=/; HttpOnly', 'b=2; Path=/; Secure'] } };
  },
  async fixtureXml() {
    return { status: 200, body: '<?xml version="1.0"?><EntityDescriptor/>', contentType: 'application/xml' };
  },
  async fixtureProtocol(_input, ctx) {
    await ctx.write(async (w) => {
      w.audit({ targetType: 'fixture', targetId: null });
      w.emit('member.removed', { fixture: true } as never);
    });
    return { status: 204 };
  },
  async fixtureObserve(_input, ctx) {
    // What listing a connection's tools does when the upstream refuses its credentials.
    await ctx.systemWrite(async (w) => w.emit('connection.needs_reauth', { fixture: true } as never));
    throw new ApiError('connection_needs_reauth', 'The upstream refused the credentials; reconnect.');
  },
  async fixtureUndeclaredEvent(_input, ctx) {
    await ctx.write(async (w) => {
      w.audit({ targetType: 'fixture', targetId: null });
      w.emit('role.created', { fixture: true } as never);
    });
    return { status: 204 };
  },
};

const fixtureArea = {
  name: TAG,
  tag: TAG,
  handlers,
  authenticators: { fixtureToken: fixtureAuthenticator },
  engines: {
    'fixture-engine': {
      path: '/fixture/engine',
      create: () => (_req: unknown, res: http.ServerResponse) => {
        res.setHeader('Content-Type', 'application/json');
        res.end('{"pong":true}');
      },
    },
  },
  renderError: (error: { status: number; code: string; detail: string }, operationId: string) =>
    operationId === 'fixtureProtocol'
      ? {
          status: error.status,
          contentType: 'application/fixture+json',
          body: { fault: error.code, says: error.detail },
          headers: { 'WWW-Authenticate': 'Bearer realm="fixture"' },
        }
      : null,
} as unknown as Module;

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ spec: fixtureSpec(), modules: [...MODULES, fixtureArea], checkSpec: false });
});
afterAll(() => t.close());

/** node:http, for what fetch hides: several Set-Cookie lines, chunked bodies, closing mid-stream. */
function request(method: string, path: string, headers: Record<string, string>, body?: Buffer | string | Readable) {
  return new Promise<{ status: number; headers: http.IncomingHttpHeaders; text: string }>((resolve, reject) => {
    const url = new URL(path, t.url);
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname + url.search, method, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
    });
    req.on('error', reject);
    if (body instanceof Readable) body.pipe(req);
    else req.end(body);
  });
}

describe('handler input', () => {
  it('gets path, query and the declared header parameters, named as the spec names them, and the body', async () => {
    const res = await t.call('POST', '/fixture/echo/thing_abc?limit=3', { name: 'x' }, { headers: { 'x-fixture-mode': 'fast', 'if-match': 'W/"1"' } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      params: { thing_id: 'thing_abc' },
      query: { limit: 3 },
      headers: { 'X-Fixture-Mode': 'fast', 'If-Match': 'W/"1"' },
      body: { name: 'x' },
    });
  });

  it('validates header parameters like the others', async () => {
    const res = await t.call('POST', '/fixture/echo/thing_abc', { name: 'x' }, { headers: { 'x-fixture-mode': 'warp' } });
    expect(res.status).toBe(400);
    expect(res.body.errors).toEqual([expect.objectContaining({ in: 'header', pointer: '/x-fixture-mode' })]);
  });

  it('parses a form body and validates it against the schema', async () => {
    const form = 'grant_type=authorization_code&code=abc&resource=https%3A%2F%2Fa.example%2Fmcp&resource=https%3A%2F%2Fb.example%2Fmcp';
    const ok = await request('POST', '/fixture/form', { 'content-type': 'application/x-www-form-urlencoded' }, form);
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.text)).toEqual({ grant_type: 'authorization_code', code: 'abc', resource: ['https://a.example/mcp', 'https://b.example/mcp'] });
    const bad = await request('POST', '/fixture/form', { 'content-type': 'application/x-www-form-urlencoded' }, 'grant_type=password&extra=1');
    expect(bad.status).toBe(400);
    expect(
      JSON.parse(bad.text)
        .errors.map((e: { pointer: string }) => e.pointer)
        .sort(),
    ).toEqual(['/extra', '/grant_type']);
  });
});

describe('application/scim+json', () => {
  it('parses and validates a SCIM body, and answers in SCIM’s media type', async () => {
    const user = { schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'], userName: 'grace@acme.example' };
    const ok = await request('POST', '/fixture/scim', { 'content-type': 'application/scim+json' }, JSON.stringify(user));
    expect([ok.status, ok.headers['content-type'], JSON.parse(ok.text)]).toEqual([201, 'application/scim+json; charset=utf-8', { ...user, id: 'scim-1' }]);
    const bad = await request('POST', '/fixture/scim', { 'content-type': 'application/scim+json' }, JSON.stringify({ schemas: [], userName: '' }));
    expect([bad.status, JSON.parse(bad.text).errors]).toEqual([400, [expect.objectContaining({ pointer: '/userName' })]]);
  });
});

describe('multipart uploads', () => {
  const upload = (parts: { name: string; filename?: string; type?: string; data: string | Buffer }[]) => {
    const form = new FormData();
    for (const p of parts) {
      if (p.filename !== undefined) form.append(p.name, new Blob([p.data], { type: p.type ?? 'application/octet-stream' }), p.filename);
      else form.append(p.name, String(p.data));
    }
    return fetch(`${t.url}/fixture/upload`, { method: 'POST', body: form });
  };

  it('spools file parts to disk and hands the handler a file it can read, with the other parts validated', async () => {
    const data = 'id,title\n1,Flaky test\n';
    const res = await upload([
      { name: 'file', filename: 'issues.csv', type: 'text/csv', data },
      { name: 'name', data: 'open.csv' },
    ]);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ name: 'open.csv', type: 'text/csv', size: data.length, sha256: createHash('sha256').update(data).digest('hex') });
  });

  it('refuses a file over the operation’s cap with 413, a file in an unknown part and a missing file with 400', async () => {
    const big = await upload([{ name: 'file', filename: 'big.bin', data: Buffer.alloc(5000, 1) }]);
    expect([big.status, ((await big.json()) as { code: string }).code]).toEqual([413, 'payload_too_large']);
    const stray = await upload([
      { name: 'file', filename: 'a.txt', data: 'a' },
      { name: 'other', filename: 'b.txt', data: 'b' },
    ]);
    expect([stray.status, ((await stray.json()) as { code: string }).code]).toEqual([400, 'validation_failed']);
    const missing = await upload([{ name: 'name', data: 'x' }]);
    expect(missing.status).toBe(400);
    expect(((await missing.json()) as { errors: unknown }).errors).toEqual([{ in: 'body', pointer: '/file', message: 'is required' }]);
  });
});

describe('raw uploads', () => {
  it('streams the body to the handler with its media type', async () => {
    const bytes = Buffer.alloc(1500, 7);
    const res = await request('PUT', '/fixture/raw', { 'content-type': 'image/png', 'content-length': String(bytes.length) }, bytes);
    expect(res.status).toBe(200);
    expect(JSON.parse(res.text)).toEqual({ type: 'image/png', declared: 1500, size: 1500, sha256: createHash('sha256').update(bytes).digest('hex') });
    expect(res.headers.connection).not.toBe('close');
  });

  it('answers 413 past the cap, whether the length is declared or the body is chunked', async () => {
    const declared = await request('PUT', '/fixture/raw', { 'content-type': 'application/octet-stream', 'content-length': '5000' }, Buffer.alloc(5000));
    expect([declared.status, JSON.parse(declared.text).code]).toEqual([413, 'payload_too_large']);
    // Refused before it was read, then drained to its end (within the drain's bounds): nothing
    // of it is left to be taken for the next request, so the connection may serve one.
    expect(declared.headers.connection).not.toBe('close');
    const chunked = await request(
      'PUT',
      '/fixture/raw',
      { 'content-type': 'application/octet-stream' },
      Readable.from([Buffer.alloc(1500), Buffer.alloc(1500)]),
    );
    expect([chunked.status, JSON.parse(chunked.text).code]).toEqual([413, 'payload_too_large']);
  });

  it('answers 400 for a missing body and 415 for an undeclared media type', async () => {
    expect((await request('PUT', '/fixture/raw', {})).status).toBe(400);
    const text = await request('PUT', '/fixture/raw', { 'content-type': 'text/plain' }, 'hello');
    expect([text.status, JSON.parse(text.text).code]).toEqual([415, 'unsupported_media_type']);
  });
});

describe('results beyond buffered JSON', () => {
  it('streams server-sent events as the handler yields them', async () => {
    const res = await request('GET', '/fixture/events', {});
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    expect(res.headers['cache-control']).toBe('no-cache, no-transform');
    expect(res.text).toBe('event: progress\ndata: {"done":1}\n\nid: 2\ndata: two\ndata: lines\n\nevent: result\ndata: {"ok":true}\n\n');
  });

  it('stops the event source when the client goes away', async () => {
    const closed = new Promise<void>((resolve) => (streamClosed.resolve = resolve));
    await new Promise<void>((resolve, reject) => {
      const url = new URL('/fixture/events?forever=true', t.url);
      const req = http.get({ host: url.hostname, port: url.port, path: url.pathname + url.search }, (res) => {
        res.once('data', () => {
          req.destroy();
          resolve();
        });
      });
      req.on('error', (err) => ((err as NodeJS.ErrnoException).code === 'ECONNRESET' ? resolve() : reject(err)));
    });
    await closed;
  });

  it('streams bytes with their type and length', async () => {
    const res = await request('GET', '/fixture/download', {});
    expect([res.status, res.headers['content-type'], res.headers['content-length'], res.text]).toEqual([200, 'application/pdf', '16', '%PDF-1.7 fixture']);
  });

  it('redirects with several Set-Cookie headers', async () => {
    const res = await request('GET', '/fixture/redirect', {});
    expect(res.status).toBe(302);
    expect(res.headers.location).toBe('https://app.example/signed-in');
    expect(res.headers['set-cookie']).toEqual(['a=1; Path=/; HttpOnly', 'b=2; Path=/; Secure']);
  });

  it('sends text bodies with their own media type', async () => {
    const res = await request('GET', '/fixture/xml', {});
    expect([res.status, res.headers['content-type'], res.text]).toEqual([200, 'application/xml; charset=utf-8', '<?xml version="1.0"?><EntityDescriptor/>']);
  });
});

describe('an area’s own credential and error format', () => {
  it('authenticates with the area’s authenticator, and the audit entry and event carry the credential’s organization', async () => {
    const { orgId } = await t.factories.org();
    const res = await request('POST', '/fixture/protocol', { authorization: `Bearer fxt_${orgId}` });
    expect(res.status).toBe(204);
    const [entry] = await t.factories.auditEntries(orgId, 'fixture.done');
    expect(entry).toMatchObject({ org_id: orgId, actor_type: 'scim', actor_id: 'fxt', actor_user_id: null });
    const events = await t.db.selectFrom('outbox').selectAll().where('org_id', '=', orgId).execute();
    expect(events).toEqual([expect.objectContaining({ event_type: 'member.removed', actor_type: 'scim', actor_id: null })]);
  });

  it('renders the guard’s errors in the area’s format', async () => {
    const none = await request('POST', '/fixture/protocol', {});
    expect([none.status, none.headers['content-type'], none.headers['www-authenticate']]).toEqual([
      401,
      'application/fixture+json; charset=utf-8',
      'Bearer realm="fixture"',
    ]);
    expect(JSON.parse(none.text)).toEqual({ fault: 'unauthenticated', says: 'Send a fixture token as "Authorization: Bearer fxt_<organization id>".' });
    const bad = await request('POST', '/fixture/protocol', { authorization: 'Bearer fxt_nope' });
    expect(JSON.parse(bad.text)).toEqual({ fault: 'invalid_token', says: 'Unknown fixture token.' });
    const { token } = await t.factories.org();
    const wrongKind = await request('POST', '/fixture/protocol', { authorization: `Bearer ${token}` });
    expect(JSON.parse(wrongKind.text)).toEqual({ fault: 'invalid_token', says: 'This operation does not accept an API token.' });
  });

  it('commits what the server notices on its own account with no audit entry and the system as the event’s actor, even when the answer is an error', async () => {
    const { orgId } = await t.factories.org();
    const res = await request('GET', '/fixture/observe', { authorization: `Bearer fxt_${orgId}` });
    expect([res.status, JSON.parse(res.text).code]).toEqual([409, 'connection_needs_reauth']);
    const events = await t.db.selectFrom('outbox').selectAll().where('org_id', '=', orgId).execute();
    expect(events).toEqual([expect.objectContaining({ event_type: 'connection.needs_reauth', actor_type: 'system', actor_id: null })]);
    expect(await t.factories.auditEntries(orgId)).toEqual([]);
  });

  it('refuses to commit an event the operation does not declare in x-events', async () => {
    const { orgId } = await t.factories.org();
    const res = await request('POST', '/fixture/undeclared-event', { authorization: `Bearer fxt_${orgId}` });
    expect([res.status, JSON.parse(res.text).code]).toEqual([500, 'internal_error']);
    expect(await t.factories.auditEntries(orgId, 'fixture.done')).toEqual([]);
  });
});

describe('engines mounted beside the router', () => {
  it('serve their x-engine operations, which then count as built', async () => {
    const res = await request('GET', '/fixture/engine/ping', {});
    expect([res.status, res.text]).toEqual([200, '{"pong":true}']);
    expect(t.pending.has('fixtureEnginePing')).toBe(false);
  });

  it('leave their operations answering 501 when no module mounts them', () => {
    const spec = fixtureSpec();
    const { operations } = describeOperations(spec);
    const withoutEngine = { ...fixtureArea, engines: undefined } as Module;
    expect(buildRegistry([withoutEngine], operations, Object.keys(spec.components.securitySchemes)).notImplemented.has('fixtureEnginePing')).toBe(true);
  });
});

describe('the registry and the adapter refuse what does not fit, at start-up', () => {
  const spec = fixtureSpec();
  const { operations } = describeOperations(spec);
  const schemes = Object.keys(spec.components.securitySchemes);
  const area = (extra: object) => ({ name: TAG, tag: TAG, handlers: {}, ...extra }) as unknown as Module;
  const noop = async () => ({ status: 204 });

  it.each([
    ['a handler for no operation', area({ handlers: { fixtureNothing: noop } }), /fixtureNothing is not an operation/],
    ['a handler for another tag', area({ handlers: { getHealth: noop } }), /getHealth belongs to the tag "Health"/],
    ['a handler for an engine’s operation', area({ handlers: { fixtureEnginePing: noop } }), /served by the engine "fixture-engine"/],
    ['an authenticator for no scheme', area({ authenticators: { nope: fixtureAuthenticator } }), /"nope", which is not a security scheme/],
    ['two modules of one name', [area({}), area({})], /two modules are named "Fixtures"/],
    [
      'one operation served by two modules',
      [area({ handlers: { fixtureProtocol: noop } }), area({ name: 'Other', tag: undefined, handlers: { fixtureProtocol: noop } })],
      /fixtureProtocol is served by Fixtures already/,
    ],
  ])('%s', (_name, areas, message) => {
    expect(() => buildRegistry(Array.isArray(areas) ? areas : [areas], operations, schemes)).toThrow(message);
  });

  it('checks the openapi-backend version and the members it patches', () => {
    expect(() => checkOpenApiBackend()).not.toThrow();
    const shape = (version: string, validator: Record<string, unknown> = { compileSchema: () => undefined, prototype: {} }) => ({
      version,
      OpenAPIBackend: { prototype: { init() {}, validateDefinition() {} } },
      OpenAPIValidator: validator as never,
      OpenAPIRouter: { prototype: { getOperations() {}, parseRequest() {} } },
    });
    expect(() => checkOpenApiBackend(shape('6.0.0'))).toThrow(/version 6\.0\.0 is installed/);
    expect(() => checkOpenApiBackend(shape('5.20.1', { prototype: {} }))).toThrow(/OpenAPIValidator\.compileSchema is not a function/);
  });
});
