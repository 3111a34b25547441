import { randomBytes } from 'node:crypto';
import http from 'node:http';
import { gzipSync } from 'node:zlib';
import pino from 'pino';
import { MODULES } from '../../src/modules';
import { PERMISSIONS } from '../../src/identity/permissions';
import type { Module } from '../../src/http/area';
import type { RequestContext } from '../../src/http/context';
import { hashSecret } from '../../src/lib/crypto';
import { newId } from '../../src/lib/ids';
import { loadSpec } from '../../src/spec';
import { startTestApp, type TestApp } from '../support/app';
import { SpecChecker } from '../support/spec-checker';
import { expectError } from '../support/client';

const LIST = '/notification-destination';
const REQUEST_ID = /^req_[0-7][0-9a-hjkmnp-tv-z]{25}$/;

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

/**
 * A request through node:http, for what fetch cannot send (a body on GET). Not checked
 * against the spec; tests that use it check what they need themselves.
 */
function rawRequest(base: string, method: string, path: string, headers: Record<string, string>, body?: string) {
  return new Promise<{ status: number; headers: Headers; body: any; text: string }>((resolve, reject) => {
    const url = new URL(path, base);
    const outgoing = { ...headers, ...(body !== undefined ? { 'content-length': String(Buffer.byteLength(body)) } : {}) };
    const req = http.request({ host: url.hostname, port: url.port, path: `${url.pathname}${url.search}`, method, headers: outgoing }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => {
        const responseHeaders = new Headers();
        for (const [name, value] of Object.entries(res.headers)) if (typeof value === 'string') responseHeaders.set(name, value);
        const json = (res.headers['content-type'] ?? '').includes('json') && text !== '';
        resolve({ status: res.statusCode ?? 0, headers: responseHeaders, body: json ? JSON.parse(text) : text, text });
      });
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

describe('authentication', () => {
  it('answers 401 unauthenticated with WWW-Authenticate when no credential is sent', async () => {
    const { orgId } = await t.factories.org();
    for (const res of [await t.call('GET', LIST, undefined, { org: orgId }), await t.call('GET', '/user/me')]) {
      expectError(res, 401, 'unauthenticated');
      expect(res.headers.get('www-authenticate')).toBe('Bearer realm="mcp-control-plane"');
    }
  });

  it('answers 401 invalid_token for a malformed bearer token', async () => {
    const { orgId } = await t.factories.org();
    for (const authorization of ['Bearer not-a-token', 'Bearer cps_looks_like_a_session', 'Basic dXNlcjpwYXNz', 'Bearer']) {
      const res = await t.call('GET', LIST, undefined, { org: orgId, headers: { authorization } });
      expectError(res, 401, 'invalid_token');
      expect(res.headers.get('www-authenticate')).toBe('Bearer realm="mcp-control-plane", error="invalid_token"');
    }
  });

  it('answers 401 invalid_token for an unknown cpt_ token', async () => {
    const { orgId, token } = await t.factories.org();
    const unknown = `${token.slice(0, -4)}${token.slice(-4) === 'aaaa' ? 'bbbb' : 'aaaa'}`;
    const res = await t.as({ token: unknown, org: orgId }).get(LIST);
    expectError(res, 401, 'invalid_token');
  });

  it('answers 401 invalid_token for a revoked token', async () => {
    const { orgId, token } = await t.factories.org();
    const client = t.as({ token, org: orgId });
    expect((await client.get(LIST)).status).toBe(200);
    await t.db
      .updateTable('api_tokens')
      .set({ revoked_at: new Date() })
      .where('id', '=', await t.factories.tokenId(token))
      .execute();
    expectError(await client.get(LIST), 401, 'invalid_token');
    expectError(await t.as({ token }).get('/user/me'), 401, 'invalid_token');
  });

  it('answers 401 invalid_token for an expired token', async () => {
    const { orgId, ownerId } = await t.factories.org();
    const token = await t.factories.token(orgId, ownerId, undefined, { expiresAt: new Date(Date.now() - 60_000) });
    expectError(await t.as({ token, org: orgId }).get(LIST), 401, 'invalid_token');
  });

  it('answers 401 invalid_token for an expired or revoked session', async () => {
    const { orgId, ownerId } = await t.factories.org();
    const expired = await t.factories.session(ownerId, { expiresAt: new Date(Date.now() - 60_000) });
    expectError(await t.as({ session: expired, org: orgId }).get(LIST), 401, 'invalid_token');
    expectError(await t.as({ session: expired }).get('/user/me'), 401, 'invalid_token');

    const session = await t.factories.session(ownerId);
    expect((await t.as({ session, org: orgId }).get(LIST)).status).toBe(200);
    await t.db.updateTable('sessions').set({ revoked_at: new Date() }).where('token_hash', '=', hashSecret(session)).execute();
    expectError(await t.as({ session, org: orgId }).get(LIST), 401, 'invalid_token');
  });

  it('answers 401 invalid_token for an unknown session cookie', async () => {
    const res = await t.call('GET', '/user/me', undefined, { headers: { cookie: 'theme=dark; __Host-cp_session=cps_nothing_like_this' } });
    expectError(res, 401, 'invalid_token');
  });

  it('answers 401 invalid_token for a session cookie with a malformed percent-escape', async () => {
    const res = await t.call('GET', '/user/me', undefined, { headers: { cookie: '__Host-cp_session=%E0%A4%A' } });
    expectError(res, 401, 'invalid_token');
  });
});

describe('organization header', () => {
  it('answers 400 organization_header_required when X-Organization-Id is missing', async () => {
    const { token, ownerId } = await t.factories.org();
    expectError(await t.as({ token }).get(LIST), 400, 'organization_header_required');
    expectError(await t.as({ session: await t.factories.session(ownerId) }).get(LIST), 400, 'organization_header_required');
  });

  it('answers 400 validation_failed pointing at /x-organization-id for a malformed header', async () => {
    const { token } = await t.factories.org();
    for (const value of ['acme', 'org_123', newId('user')]) {
      const res = await t.as({ token, org: value }).get(LIST);
      expectError(res, 400, 'validation_failed');
      expect(res.body.errors).toEqual([{ in: 'header', pointer: '/x-organization-id', message: expect.any(String) }]);
    }
  });
});

describe('membership', () => {
  it('answers 403 not_a_member for a token used with another organization’s id, even one its owner belongs to', async () => {
    const first = await t.factories.org();
    const second = await t.factories.org({ ownerId: first.ownerId });
    const stranger = await t.factories.org();
    expectError(await t.as({ token: first.token, org: second.orgId }).get(LIST), 403, 'not_a_member');
    expectError(await t.as({ token: first.token, org: stranger.orgId }).get(LIST), 403, 'not_a_member');
    expectError(await t.as({ token: first.token, org: newId('organization') }).get(LIST), 403, 'not_a_member');
    expect((await t.as({ token: second.token, org: second.orgId }).get(LIST)).status).toBe(200);
  });

  it('answers 403 not_a_member for a session of a user who is not a member', async () => {
    const { orgId } = await t.factories.org();
    const outsider = await t.factories.user();
    expectError(await t.as({ session: await t.factories.session(outsider), org: orgId }).get(LIST), 403, 'not_a_member');
  });

  it('refuses a suspended or removed member by name: 403 not_a_member for their session there, 401 for their token everywhere', async () => {
    const { orgId } = await t.factories.org();
    for (const status of ['suspended', 'removed'] as const) {
      const userId = await t.factories.member(orgId, { roles: ['admin'], status: 'active' });
      const session = await t.factories.session(userId);
      const token = await t.factories.token(orgId, userId);
      expect((await t.as({ session, org: orgId }).get(LIST)).status).toBe(200);
      await t.db.updateTable('memberships').set({ status }).where('org_id', '=', orgId).where('user_id', '=', userId).execute();
      const bySession = await t.as({ session, org: orgId }).get(LIST);
      expectError(bySession, 403, 'not_a_member');
      expect(bySession.body.detail).toContain(status === 'suspended' ? 'is suspended' : 'was removed');
      for (const res of [await t.as({ token, org: orgId }).get(LIST), await t.as({ token }).get('/user/me')]) {
        expectError(res, 401, 'invalid_token');
        expect(res.body.detail).toContain(status === 'suspended' ? 'is suspended' : 'was removed');
      }
    }
  });
});

describe('second factor', () => {
  it('refuses a session without a second factor in an organization that requires one, and serves it elsewhere', async () => {
    const userId = await t.factories.user();
    const strict = await t.factories.org({ ownerId: userId, requireMfa: true });
    const relaxed = await t.factories.org({ ownerId: userId });
    const session = await t.factories.session(userId);

    const refused = await t.as({ session, org: strict.orgId }).get(LIST);
    expectError(refused, 403, 'mfa_setup_required');
    expect(refused.body.detail).toContain(strict.orgId);
    expect((await t.as({ session, org: relaxed.orgId }).get(LIST)).status).toBe(200);
  });

  it('refuses for the missing second factor before checking permissions', async () => {
    const strict = await t.factories.org({ requireMfa: true });
    const userId = await t.factories.member(strict.orgId, { roles: ['member'] });
    expectError(await t.as({ session: await t.factories.session(userId), org: strict.orgId }).get(LIST), 403, 'mfa_setup_required');
  });

  it('serves a session that has shown a second factor', async () => {
    const strict = await t.factories.org({ requireMfa: true });
    const session = await t.factories.session(strict.ownerId, { secondFactor: true });
    expect((await t.as({ session, org: strict.orgId }).get(LIST)).status).toBe(200);
  });

  it('never applies to API tokens', async () => {
    const strict = await t.factories.org({ requireMfa: true });
    expect((await t.as({ token: strict.token, org: strict.orgId }).get(LIST)).status).toBe(200);
  });
});

describe('permissions', () => {
  it('answers 403 missing_permission when the roles held lack x-permission', async () => {
    const { orgId } = await t.factories.org();
    const userId = await t.factories.member(orgId, { roles: ['member'] });
    const res = await t.as({ session: await t.factories.session(userId), org: orgId }).get(LIST);
    expectError(res, 403, 'missing_permission');
    expect(res.body.detail).toContain('notification:view');
    expectError(await t.as({ token: await t.factories.token(orgId, userId), org: orgId }).get(LIST), 403, 'missing_permission');
  });

  it('grants what a custom role grants', async () => {
    const { orgId } = await t.factories.org();
    const roleId = await t.factories.customRole(orgId, ['notification:view']);
    const userId = await t.factories.member(orgId, { roles: ['member', roleId] });
    expect((await t.as({ session: await t.factories.session(userId), org: orgId }).get(LIST)).status).toBe(200);
  });

  it('caps a token at its own list even when its owner holds more', async () => {
    const { orgId, ownerId } = await t.factories.org();
    const narrow = await t.factories.token(orgId, ownerId, ['member:view', 'team:view']);
    expectError(await t.as({ token: narrow, org: orgId }).get(LIST), 403, 'missing_permission');
    const viewer = await t.factories.token(orgId, ownerId, ['notification:view']);
    expect((await t.as({ token: viewer, org: orgId }).get(LIST)).status).toBe(200);
    const created = await t
      .as({ token: viewer, org: orgId })
      .post(LIST, { name: 'Ops', type: 'email', config: { to: ['ops@example.com'] }, event_types: ['member.joined'] });
    expectError(created, 403, 'missing_permission');
  });

  it('intersects a token with its owner’s current roles on every request', async () => {
    const { orgId, roleIds } = await t.factories.org();
    const userId = await t.factories.member(orgId, { roles: ['admin'] });
    const token = await t.factories.token(orgId, userId);
    const client = t.as({ token, org: orgId });
    expect((await client.get(LIST)).status).toBe(200);

    await t.db.deleteFrom('role_assignments').where('org_id', '=', orgId).where('user_id', '=', userId).execute();
    expectError(await client.get(LIST), 403, 'missing_permission');

    await t.db.insertInto('role_assignments').values({ org_id: orgId, user_id: userId, role_id: roleIds.auditor }).execute();
    expect((await client.get(LIST)).status).toBe(200);
  });
});

describe('system roles', () => {
  it('take their permissions from the catalog, so a permission added later reaches every existing Owner without a data migration', async () => {
    const { orgId, ownerId, token, roleIds } = await t.factories.org();
    // An organization created before notification destinations existed: its Owner row lists less.
    await t.db
      .updateTable('roles')
      .set({ permissions: ['organization:view'] })
      .where('id', '=', roleIds.owner)
      .execute();
    expect((await t.as({ token, org: orgId }).get(LIST)).status).toBe(200);
    const me = await t.as({ session: await t.factories.session(ownerId) }).get('/user/me');
    expect(me.body.organizations[0].permissions).toEqual([...PERMISSIONS].sort());
  });
});

describe('routing', () => {
  it('answers 404 not_found with the Error object for an unknown path', async () => {
    const { token } = await t.factories.org();
    for (const path of ['/no-such-thing', '/user/me/nothing', '/notification-destination/onfd_x/y/z']) {
      const res = await t.as({ token }).get(path);
      expectError(res, 404, 'not_found');
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    }
    expectError(await t.call('GET', '/no-such-thing'), 404, 'not_found');
  });

  it('answers 405 method_not_allowed with an Allow header listing the methods of the path', async () => {
    const { token, orgId } = await t.factories.org();
    const put = await t.as({ token, org: orgId }).put(LIST, {});
    expectError(put, 405, 'method_not_allowed');
    expect(put.headers.get('allow')).toBe('GET, HEAD, POST');

    const del = await t.as({ token }).delete('/user/me');
    expectError(del, 405, 'method_not_allowed');
    expect(del.headers.get('allow')).toBe('GET, HEAD');

    const item = await t.as({ token, org: orgId }).post(`${LIST}/${newId('notificationDestination')}`, {});
    expectError(item, 405, 'method_not_allowed');
    expect(item.headers.get('allow')).toBe('DELETE, GET, HEAD, PATCH');
  });

  it('answers 401 before 405 to a caller without a credential on a path that needs one', async () => {
    expectError(await t.call('POST', `${LIST}/${newId('notificationDestination')}`), 401, 'unauthenticated');
    expectError(await t.call('DELETE', '/user/me'), 401, 'unauthenticated');
  });

  it('answers HEAD where GET is supported (RFC 9110 §9.3.2)', async () => {
    const { token } = await t.factories.org();
    const res = await rawRequest(t.url, 'HEAD', '/user/me', { authorization: `Bearer ${token}` });
    expect(res.status).toBe(200);
    expect(res.text).toBe('');
  });
});

describe('request bodies', () => {
  const json = { 'content-type': 'application/json' };

  it('answers 400 malformed_json for a body that is not JSON', async () => {
    const { token, orgId } = await t.factories.org();
    const res = await t.as({ token, org: orgId }).post(LIST, undefined, { raw: '{"name": "Ops",', headers: json });
    expectError(res, 400, 'malformed_json');
  });

  it('answers 400 validation_failed when a JSON operation gets no body at all', async () => {
    const { token, orgId } = await t.factories.org();
    const res = await t.as({ token, org: orgId }).post(LIST);
    expectError(res, 400, 'validation_failed');
    expect(res.body.errors).toEqual([{ in: 'body', pointer: '', message: 'a body is required' }]);
  });

  it('lists at most 50 problems, and says how many there were', async () => {
    const { orgId, token } = await t.factories.org();
    const eventTypes = Array.from({ length: 100_000 }, (_, i) => i);
    const res = await t.as({ token, org: orgId }).post(LIST, { name: 'Big', type: 'email', config: { to: ['a@b.example'] }, event_types: eventTypes });
    expectError(res, 400, 'validation_failed');
    expect(res.body.errors).toHaveLength(50);
    expect(res.body.detail).toMatch(/^The request has \d{6} problems; errors lists the first 50\.$/);
    expect(res.text.length).toBeLessThan(20_000);
  });

  it('reads JSON with a byte order mark, with charset=utf-8, and compressed (Content-Encoding: gzip)', async () => {
    const { token, orgId } = await t.factories.org();
    const client = t.as({ token, org: orgId });
    const destination = (name: string) => JSON.stringify({ name, type: 'email', config: { to: ['ops@example.com'] }, event_types: ['member.joined'] });
    const bom = await client.post(LIST, undefined, { raw: `\uFEFF${destination('With BOM')}`, headers: { 'content-type': 'application/json; charset=UTF-8' } });
    expect(bom.status).toBe(201);
    expect(bom.body.name).toBe('With BOM');
    const zipped = await client.post(LIST, undefined, {
      raw: gzipSync(destination('Zipped')),
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
    });
    expect(zipped.status).toBe(201);
    expect(zipped.body.name).toBe('Zipped');
  });

  it('answers 400 validation_failed, changing nothing, for a NUL character text cannot hold (body or query), and for a cursor past its range', async () => {
    const { token, orgId } = await t.factories.org();
    const client = t.as({ token, org: orgId });
    const team = await t.call('POST', '/team', { name: 'a\u0000b' }, { token, org: orgId });
    expectError(team, 400, 'validation_failed');
    expect(team.body.detail).toContain('NUL');
    expect((await client.get('/team')).body?.data).toEqual([]);
    const destination = await t.call(
      'POST',
      LIST,
      { name: 'Ops\u0000', type: 'email', config: { to: ['ops@example.com'] }, event_types: ['member.joined'] },
      { token, org: orgId },
    );
    expectError(destination, 400, 'validation_failed');
    expectError(await t.call('GET', '/member?q=a%00b', undefined, { token, org: orgId }), 400, 'validation_failed');
    // A member cursor whose time has more digits than a bigint holds.
    const cursor = Buffer.from(`99999999999999999999~${newId('user')}`).toString('base64url');
    const far = await t.call('GET', `/member?cursor=${cursor}`, undefined, { token, org: orgId });
    expect(far.status).toBe(400);
  });

  it('answers 400, changing nothing, for what no text holds or no parser decodes: lone surrogates, a body not compressed as it says, a union item that is no object, a date past year 9999', async () => {
    const { token, orgId } = await t.factories.org();
    const client = t.as({ token, org: orgId });
    const lone = await client.post('/team', undefined, { raw: '{"name":"a\\ud800b"}', headers: json });
    expectError(lone, 400, 'validation_failed');
    expect(lone.body.errors).toEqual([{ in: 'body', pointer: '/name', message: expect.stringContaining('surrogate') }]);
    const nested = await client.post(LIST, undefined, {
      raw: '{"name":"Ops","type":"email","config":{"to":["a@b.example"],"subject_prefix":"\\udc00"},"event_types":["member.joined"]}',
      headers: json,
    });
    expect(nested.body.errors?.[0]?.pointer).toBe('/config/subject_prefix');
    // A well-formed pair is a character like any other.
    expect((await client.post('/team', undefined, { raw: '{"name":"\\ud83d\\ude00 team"}', headers: json })).status).toBe(201);
    const notGzip = await client.post('/team', undefined, { raw: '{"name":"x"}', headers: { ...json, 'content-encoding': 'gzip' } });
    expectError(notGzip, 400, 'malformed_json');
    const toolbox = await t.call('POST', '/toolbox', { name: 'Box', entries: [null] }, { token, org: orgId });
    expectError(toolbox, 400, 'validation_failed');
    const far = await t.call('GET', `/audit-log?since=${encodeURIComponent('9999-12-31T23:59:59-14:00')}`, undefined, { token, org: orgId });
    expectError(far, 400, 'validation_failed');
    expect((await client.get('/team')).body?.data.map((team: { name: string }) => team.name)).toEqual(['\u{1F600} team']);
  });

  it('answers 415 unsupported_media_type for a text/plain body on a JSON operation', async () => {
    const { token, orgId } = await t.factories.org();
    const res = await t.as({ token, org: orgId }).post(LIST, undefined, { raw: '{"name":"Ops"}', headers: { 'content-type': 'text/plain' } });
    expectError(res, 415, 'unsupported_media_type');
    expect(res.body.detail).toContain('application/json');
  });

  it('answers 400 validation_failed for a body sent to an operation that takes none, as the spec declares', async () => {
    const { token } = await t.factories.org();
    const res = await rawRequest(t.url, 'GET', '/user/me', { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, '{}');
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ code: 'validation_failed', status: 400, request_id: res.headers.get('x-request-id') });
    expect(res.body.errors).toEqual([{ in: 'body', pointer: '', message: 'GET /user/me takes no body' }]);
    expect(new SpecChecker().check('get', '/user/me', res.status, res.headers, res.body)).toEqual([]);
  });

  describe('with BODY_LIMIT_BYTES=2048', () => {
    let small: TestApp;
    beforeAll(async () => {
      small = await startTestApp({ env: { BODY_LIMIT_BYTES: '2048' } });
    });
    afterAll(() => small.close());

    it('answers 413 payload_too_large for a larger body, and accepts one under the limit', async () => {
      const { token, orgId } = await small.factories.org();
      const client = small.as({ token, org: orgId });
      const big = await client.post(LIST, { name: 'x'.repeat(3000), type: 'email', config: { to: ['ops@example.com'] }, event_types: ['member.joined'] });
      expectError(big, 413, 'payload_too_large');
      const fits = await client.post(LIST, { name: 'Ops', type: 'email', config: { to: ['ops@example.com'] }, event_types: ['member.joined'] });
      expect(fits.status).toBe(201);
    });

    it('answers 413 to a chunked body (no Content-Length) once it passes the limit', async () => {
      const { token, orgId } = await small.factories.org();
      const payload = JSON.stringify({ name: 'x'.repeat(3000), type: 'email', config: { to: ['ops@example.com'] }, event_types: ['member.joined'] });
      const status = await new Promise<number>((resolve, reject) => {
        const req = http.request(
          `${small.url}${LIST}`,
          {
            method: 'POST',
            headers: { authorization: `Bearer ${token}`, 'x-organization-id': orgId, 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
          },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        req.on('error', reject);
        for (let i = 0; i < payload.length; i += 1000) req.write(payload.slice(i, i + 1000));
        req.end();
      });
      expect(status).toBe(413);
    });
  });

  it('matches and authenticates before complaining about a malformed body', async () => {
    const { orgId } = await t.factories.org();
    expectError(await t.call('POST', '/no-such-thing', undefined, { raw: '{', headers: json }), 404, 'not_found');
    expectError(await t.call('POST', LIST, undefined, { org: orgId, raw: '{', headers: json }), 401, 'unauthenticated');
  });
});

describe('request ids', () => {
  it('gives every response a generated X-Request-Id, also in error bodies', async () => {
    const ok = await t.call('GET', '/health');
    expect(ok.headers.get('x-request-id')).toMatch(REQUEST_ID);
    const failed = await t.call('GET', '/user/me');
    expect(failed.headers.get('x-request-id')).toMatch(REQUEST_ID);
    expect(failed.body.request_id).toBe(failed.headers.get('x-request-id'));
    expect(failed.headers.get('x-request-id')).not.toBe(ok.headers.get('x-request-id'));
    const missing = await t.call('GET', '/no-such-thing');
    expect(missing.headers.get('x-request-id')).toMatch(REQUEST_ID);
  });

  it('echoes a valid incoming X-Request-Id', async () => {
    const incoming = 'trace-01.abc_DEF';
    const ok = await t.call('GET', '/health', undefined, { headers: { 'x-request-id': incoming } });
    expect(ok.headers.get('x-request-id')).toBe(incoming);
    const failed = await t.call('GET', '/user/me', undefined, { headers: { 'x-request-id': incoming } });
    expect(failed.headers.get('x-request-id')).toBe(incoming);
    expect(failed.body.request_id).toBe(incoming);
    const longest = 'a'.repeat(128);
    expect((await t.call('GET', '/health', undefined, { headers: { 'x-request-id': longest } })).headers.get('x-request-id')).toBe(longest);
  });

  it('replaces an invalid incoming X-Request-Id', async () => {
    for (const incoming of ['has spaces in it', 'a'.repeat(200), 'semi;colon', '<script>']) {
      const res = await t.call('GET', '/user/me', undefined, { headers: { 'x-request-id': incoming } });
      expect(res.headers.get('x-request-id')).toMatch(REQUEST_ID);
      expect(res.body.request_id).toBe(res.headers.get('x-request-id'));
    }
  });
});

describe('caching', () => {
  it('marks every answer to a request with a credential no-store, and leaves the public documents cacheable', async () => {
    const { orgId, token } = await t.factories.org();
    for (const res of [
      await t.as({ token, org: orgId }).get(LIST),
      await t.as({ token }).get('/user/me'),
      await t.call('GET', LIST, undefined, { token: `cpt_${'z'.repeat(43)}`, org: orgId }),
    ]) {
      expect(res.headers.get('cache-control')).toBe('no-store');
    }
    expect((await t.call('GET', '/openapi.json')).headers.get('cache-control')).toBeNull();
  });
});

describe('security headers', () => {
  it('sends the API’s security headers and no X-Powered-By, on success and on errors; those for documents only go with pages', async () => {
    const { token } = await t.factories.org();
    for (const res of [await t.as({ token }).get('/user/me'), await t.call('GET', '/user/me'), await t.call('GET', '/no-such-thing')]) {
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(res.headers.get('x-frame-options')).toBe('SAMEORIGIN');
      // Opened as a document, an answer may load nothing and be framed nowhere.
      expect(res.headers.get('content-security-policy')).toBe("default-src 'none';frame-ancestors 'none'");
      expect(res.headers.get('cross-origin-resource-policy')).toBe('same-origin');
      expect(res.headers.get('strict-transport-security')).toBe('max-age=31536000; includeSubDomains');
      expect(res.headers.get('x-permitted-cross-domain-policies')).toBe('none');
      for (const documentOnly of [
        'cross-origin-opener-policy',
        'origin-agent-cluster',
        'referrer-policy',
        'x-dns-prefetch-control',
        'x-download-options',
        'x-xss-protection',
      ]) {
        expect(res.headers.get(documentOnly)).toBeNull();
      }
      expect(res.headers.get('x-powered-by')).toBeNull();
    }
  });
});

describe('rate limit', () => {
  let limited: TestApp;
  beforeAll(async () => {
    limited = await startTestApp({ env: { RATE_LIMIT_REQUESTS: '3', RATE_LIMIT_WINDOW_SECONDS: '60', RATE_LIMIT_AUTH_FAILURES: '5', TRUST_PROXY: '1' } });
  });
  afterAll(() => limited.close());
  /** Each test its own client address (the app trusts one proxy hop), so their budgets do not mix. */
  let address = 0;
  const from = () => ({ 'x-forwarded-for': `203.0.113.${(address += 1)}` });

  it('answers the 4th request of one token in the window with 429 rate_limited and Retry-After', async () => {
    const { token } = await limited.factories.org();
    const client = limited.as({ token });
    for (let i = 0; i < 3; i += 1) expect((await client.get('/user/me')).status).toBe(200);

    const res = await client.get('/user/me');
    expectError(res, 429, 'rate_limited');
    const retryAfter = res.headers.get('retry-after') ?? '';
    expect(retryAfter).toMatch(/^\d+$/);
    expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
    expect(Number(retryAfter)).toBeLessThanOrEqual(60);
  });

  it('counts per credential once it authenticates: another token, or a session, is still served', async () => {
    const first = await limited.factories.org();
    const second = await limited.factories.org();
    const headers = from();
    for (let i = 0; i < 4; i += 1) await limited.as({ token: first.token }).get('/user/me', { headers });
    expect((await limited.as({ token: first.token }).get('/user/me', { headers })).status).toBe(429);
    expect((await limited.as({ token: second.token }).get('/user/me', { headers })).status).toBe(200);
    expect((await limited.as({ session: await limited.factories.session(first.ownerId) }).get('/user/me', { headers })).status).toBe(200);
  });

  it('counts invented credentials against the address: a new junk token each time buys nothing', async () => {
    const headers = from();
    const statuses: number[] = [];
    for (let i = 0; i < 8; i += 1) {
      statuses.push((await limited.call('GET', '/user/me', undefined, { token: `cpt_${randomBytes(32).toString('base64url')}`, headers })).status);
    }
    expect(statuses).toEqual([401, 401, 401, 401, 401, 429, 429, 429]);
    // Refused before the lookup: a valid token from that address waits out the window too.
    const { token } = await limited.factories.org();
    expect((await limited.as({ token }).get('/user/me', { headers })).status).toBe(429);
    // Another address is not affected.
    expect((await limited.as({ token }).get('/user/me', { headers: from() })).status).toBe(200);
  });

  it('counts a credential on a public operation, or on a path that matches nothing, against the address', async () => {
    for (const path of ['/openapi.json', '/no-such-path']) {
      const headers = from();
      const statuses: number[] = [];
      for (let i = 0; i < 5; i += 1) {
        statuses.push((await limited.call('GET', path, undefined, { token: `cpt_${randomBytes(32).toString('base64url')}`, headers })).status);
      }
      expect(statuses.slice(3)).toEqual([429, 429]);
    }
  });

  it('believes X-Forwarded-For only as far as TRUST_PROXY says: the audit entry names the client behind the proxy', async () => {
    const { orgId, token } = await limited.factories.org();
    const res = await limited
      .as({ token, org: orgId })
      .post(
        LIST,
        { name: 'Proxied', type: 'email', config: { to: ['ops@acme.example'] }, event_types: ['member.joined'] },
        { headers: { 'x-forwarded-for': '198.51.100.23' } },
      );
    expect(res.status).toBe(201);
    const [entry] = await limited.factories.auditEntries(orgId, 'notification_destination.created');
    expect(entry?.ip).toBe('198.51.100.23');
    // The default app trusts no proxy: the connection's address is the client's.
    const { orgId: other, token: otherToken } = await t.factories.org();
    await t
      .as({ token: otherToken, org: other })
      .post(
        LIST,
        { name: 'Direct', type: 'email', config: { to: ['ops@acme.example'] }, event_types: ['member.joined'] },
        { headers: { 'x-forwarded-for': '198.51.100.23' } },
      );
    expect((await t.factories.auditEntries(other, 'notification_destination.created'))[0]?.ip).toBe('127.0.0.1');
  });

  it('never limits /health', async () => {
    for (let i = 0; i < 6; i += 1) expect((await limited.call('GET', '/health')).status).toBe(200);
  });
});

describe('operations not implemented yet', () => {
  let partial: TestApp;
  const path = () => `${LIST}/${newId('notificationDestination')}`;
  beforeAll(async () => {
    // The notification-destinations area without one of its handlers.
    const modules = MODULES.map((area) => {
      if (area.tag !== 'Notification destinations') return area;
      const { getNotificationDestination: _, ...handlers } = area.handlers as Record<string, unknown>;
      return { ...area, handlers } as Module;
    });
    partial = await startTestApp({ modules });
  });
  afterAll(() => partial.close());

  it('answers 501 not_implemented to any caller, before authentication and the guard', async () => {
    const { orgId, token } = await partial.factories.org();
    const other = await partial.factories.org();
    const callers = [
      partial.call('GET', path()),
      partial.call('GET', path(), undefined, { token: `cpt_${'z'.repeat(43)}`, org: orgId }),
      partial.as({ token }).get(path()),
      partial.as({ token, org: other.orgId }).get(path()),
      partial.as({ token, org: orgId }).get(`${LIST}/not-an-id`),
      partial.as({ token, org: orgId }).get(path()),
    ];
    for (const res of await Promise.all(callers)) {
      expectError(res, 501, 'not_implemented');
      expect(res.body.detail).toContain('getNotificationDestination');
    }
  });

  it('leaves the other operations working', async () => {
    const { orgId, token } = await partial.factories.org();
    expect((await partial.as({ token, org: orgId }).get(LIST)).status).toBe(200);
  });
});

describe('person-only operations (fixture spec)', () => {
  const SESSION_ONLY = '/fixture/person-only';
  let fixture: TestApp;
  let checker: SpecChecker;

  const errors = {
    '400': { $ref: '#/components/responses/BadRequest' },
    '401': { $ref: '#/components/responses/Unauthorized' },
    '403': { $ref: '#/components/responses/Forbidden' },
    '429': { $ref: '#/components/responses/TooManyRequests' },
  };
  const operation = (operationId: string, security: Record<string, string[]>[]) => ({
    operationId,
    tags: ['Organizations'],
    summary: 'A person-only fixture operation',
    description: 'Exists only in this test.',
    security,
    'x-permission': 'organization:manage',
    'x-audit': 'fixture.done',
    'x-person-only': true,
    parameters: [{ $ref: '#/components/parameters/OrganizationHeader' }],
    responses: { '204': { description: 'Done.' }, ...errors },
  });

  /** Calls the fixture app and checks the response against the fixture spec. */
  async function call(path: string, credential: { token?: string; session?: string; org?: string }) {
    const res = await fixture.call('POST', path, undefined, credential);
    expect(checker.check('post', path, res.status, res.headers, res.body)).toEqual([]);
    return res;
  }

  beforeAll(async () => {
    const spec = structuredClone(loadSpec());
    spec.paths[SESSION_ONLY] = { post: operation('fixturePersonOnly', [{ session: [] }]) };
    const done = async (_input: unknown, ctx: RequestContext) => {
      await ctx.write(async (scope) => scope.audit({ targetType: 'fixture', targetId: null }));
      return { status: 204 };
    };
    // The fixture operation joins the Organizations area (one area per tag).
    const modules = MODULES.map((area) =>
      area.tag === 'Organizations' ? ({ ...area, handlers: { ...area.handlers, fixturePersonOnly: done } } as unknown as Module) : area,
    );
    fixture = await startTestApp({ spec, modules, checkSpec: false });
    checker = new SpecChecker(spec);
  });
  afterAll(() => fixture.close());

  it('answers 403 requires_person to an API token', async () => {
    const { orgId, token } = await fixture.factories.org();
    expectError(await call(SESSION_ONLY, { token, org: orgId }), 403, 'requires_person');
    expect(await fixture.factories.auditEntries(orgId, 'fixture.done')).toEqual([]);
  });

  it('runs for a person with the permission and records the audit entry', async () => {
    const { orgId, ownerId } = await fixture.factories.org();
    const session = await fixture.factories.session(ownerId);
    expect((await call(SESSION_ONLY, { session, org: orgId })).status).toBe(204);
    const entries = await fixture.factories.auditEntries(orgId, 'fixture.done');
    expect(entries).toHaveLength(1);
    expect(entries[0]).toMatchObject({ actor_type: 'user', actor_id: ownerId, actor_user_id: ownerId, target_type: 'fixture' });
  });

  it('still applies authentication, the organization header, membership, second factor and permission to a person', async () => {
    const { orgId } = await fixture.factories.org();
    const memberId = await fixture.factories.member(orgId, { roles: ['member'] });
    const memberSession = await fixture.factories.session(memberId);
    const strict = await fixture.factories.org({ requireMfa: true });
    const outsider = await fixture.factories.session(await fixture.factories.user());

    expectError(await call(SESSION_ONLY, { org: orgId }), 401, 'unauthenticated');
    expectError(await call(SESSION_ONLY, { session: memberSession }), 400, 'organization_header_required');
    expectError(await call(SESSION_ONLY, { session: outsider, org: orgId }), 403, 'not_a_member');
    expectError(await call(SESSION_ONLY, { session: await fixture.factories.session(strict.ownerId), org: strict.orgId }), 403, 'mfa_setup_required');
    expectError(await call(SESSION_ONLY, { session: memberSession, org: orgId }), 403, 'missing_permission');
    expect(await fixture.factories.auditEntries(orgId, 'fixture.done')).toEqual([]);
  });
});

describe('logs', () => {
  let logged: TestApp;
  const lines: string[] = [];

  beforeAll(async () => {
    logged = await startTestApp({ env: { LOG_LEVEL: 'info' } });
    // The harness's logger writes to stdout through its SonicBoom destination; every child
    // logger (pino-http's, the request's) shares it. Keep what it writes instead.
    const destination = (logged.deps.logger as unknown as Record<symbol, { write: (chunk: string) => boolean }>)[pino.symbols.streamSym];
    if (!destination) throw new Error('The logger has no destination stream.');
    destination.write = (chunk: string) => {
      lines.push(chunk);
      return true;
    };
  });
  afterAll(() => logged.close());

  async function loggedLine(requestId: string): Promise<string> {
    for (let attempt = 0; attempt < 200; attempt += 1) {
      const line = lines.find((l) => l.includes(requestId));
      if (line) return line;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    throw new Error(`No log line for ${requestId}.`);
  }

  it('logs each request with its id, and never a token, a session or their hashes', async () => {
    const { orgId, ownerId, token } = await logged.factories.org();
    const session = await logged.factories.session(ownerId);
    const unknownToken = `cpt_${'z'.repeat(43)}`;
    const requests: [string, string, { token?: string; session?: string; org?: string; headers?: Record<string, string> }][] = [
      ['GET', '/user/me', { token }],
      ['GET', LIST, { token, org: orgId }],
      ['GET', LIST, { session, org: orgId }],
      ['GET', '/user/me', { token: unknownToken }],
      ['GET', '/user/me', { headers: { cookie: `__Host-cp_session=${session}; other=1` } }],
      ['POST', LIST, { token, org: orgId }],
      ['GET', '/role', { token, org: orgId }],
    ];
    for (const [method, path, options] of requests) {
      const res = await logged.call(method, path, undefined, options);
      const line = await loggedLine(res.headers.get('x-request-id') as string);
      // pino levels: 30 info, 40 warn (a refused credential), 50 error (5xx, but 501).
      const level = res.status >= 500 && res.status !== 501 ? 50 : [401, 403, 429].includes(res.status) ? 40 : 30;
      expect(JSON.parse(line)).toMatchObject({ level, method, url: path, status: res.status, ms: expect.any(Number) });
    }

    const everything = lines.join('');
    for (const secret of [token, session, unknownToken, hashSecret(token), hashSecret(session), hashSecret(unknownToken)]) {
      expect(everything).not.toContain(secret);
    }
    expect(everything).not.toMatch(/cpt_|cps_/);
    expect(everything.toLowerCase()).not.toMatch(/authorization|cookie|bearer/);
  });

  it('redacts query values that may be one-time secrets, and does not log liveness probes', async () => {
    const probe = await logged.call('GET', '/health');
    expect(probe.status).toBe(200);
    await logged.call('GET', `${LIST}?cursor=abc&token=s3cr3t-value&state=xyz&%74oken=enc0ded-secret`);
    const line = lines.find((l) => l.includes('cursor=abc'));
    expect(line).toBeDefined();
    expect(line).not.toContain('s3cr3t-value');
    expect(line).not.toContain('xyz');
    expect(line).not.toContain('enc0ded-secret');
    expect(JSON.parse(line as string).url).toBe(`${LIST}?cursor=abc&token=[Redacted]&state=[Redacted]&%74oken=[Redacted]`);
    expect(lines.some((l) => l.includes(probe.headers.get('x-request-id') as string))).toBe(false);
  });
});
