import { createHash, randomBytes } from 'node:crypto';
import { startTestApp, type TestApp } from '../support/app';
import { expectError } from '../support/client';
import { retireSigningKeys, signingKeysOf } from '../../src/protocols/oauth-server/keys';
import { mintMcpServer } from '../support/mcp';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const REDIRECT = 'http://127.0.0.1:33418/callback';
const form = (values: Record<string, string>) => ({
  raw: new URLSearchParams(values).toString(),
  headers: { 'content-type': 'application/x-www-form-urlencoded' },
});
const pkce = () => {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
};

async function register(metadata: Record<string, unknown> = {}) {
  const res = await t.call('POST', '/oauth/register', {
    redirect_uris: [REDIRECT],
    token_endpoint_auth_method: 'none',
    client_name: 'Test client',
    ...metadata,
  });
  expect(res.status).toBe(201);
  return res.body as { client_id: string; client_secret?: string };
}

/** A person with an MCP server, signed in. */
async function person(options: { requireMfa?: boolean } = {}) {
  const { ownerId, orgId, token } = await t.factories.org(options);
  const session = await t.factories.session(ownerId, { secondFactor: options.requireMfa });
  const server = await mintMcpServer(t, { orgId, token });
  return { userId: ownerId, orgId, token, session, server, resource: `${t.url}/mcp/${server.id}` };
}
type Person = Awaited<ReturnType<typeof person>>;

const sameOrigin = (session: string) => ({ cookie: `__Host-cp_session=${session}`, origin: new URL(t.url).origin, 'sec-fetch-site': 'same-origin' });

function authorizeUrl(clientId: string, p: Person, challenge: string, extra: Record<string, string> = {}) {
  return `/oauth/authorize?${new URLSearchParams({
    response_type: 'code',
    client_id: clientId,
    redirect_uri: REDIRECT,
    code_challenge: challenge,
    code_challenge_method: 'S256',
    state: 'st4te',
    resource: p.resource,
    ...extra,
  }).toString()}`;
}

/** Runs authorize → consent (approve) and answers the code from the redirect. */
async function authorize(clientId: string, p: Person, challenge: string, extra: Record<string, string> = {}): Promise<URL> {
  const start = await t.call('GET', authorizeUrl(clientId, p, challenge, extra), undefined, { session: p.session });
  expect(start.status).toBe(302);
  let location = new URL(start.headers.get('location')!);
  if (location.pathname === '/oauth/consent') {
    // A page, not an operation: fetched as a browser would.
    const page = await fetch(`${t.url}${location.pathname}${location.search}`, { headers: { cookie: `__Host-cp_session=${p.session}` } });
    expect(page.status).toBe(200);
    const request = location.searchParams.get('request')!;
    const decided = await t.call('POST', '/oauth/consent/decision', undefined, {
      ...form({ request, decision: 'approve' }),
      headers: { ...form({}).headers, ...sameOrigin(p.session) },
    });
    expect(decided.status).toBe(303);
    location = new URL(decided.headers.get('location')!);
  }
  return location;
}

async function tokens(clientId: string, p: Person, extra: Record<string, string> = {}) {
  const { verifier, challenge } = pkce();
  const back = await authorize(clientId, p, challenge, extra);
  expect(back.searchParams.get('iss')).toBe(t.url);
  expect(back.searchParams.get('state')).toBe('st4te');
  const code = back.searchParams.get('code')!;
  const res = await t.call(
    'POST',
    '/oauth/token',
    undefined,
    form({ grant_type: 'authorization_code', code, code_verifier: verifier, redirect_uri: REDIRECT, client_id: clientId, resource: p.resource }),
  );
  expect(res.status).toBe(200);
  return { ...(res.body as { access_token: string; refresh_token?: string; scope: string; id_token?: string }), code, verifier };
}

const mcpInitialize = (resource: string, accessToken: string) =>
  fetch(resource, {
    method: 'POST',
    headers: { authorization: `Bearer ${accessToken}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
    }),
  });

describe('discovery', () => {
  it('serves RFC 8414 and OpenID metadata with one issuer, CIMD and S256, and keys that verify the tokens', async () => {
    const as = await t.call('GET', '/.well-known/oauth-authorization-server');
    const oidc = await t.call('GET', '/.well-known/openid-configuration');
    expect(as.status).toBe(200);
    expect(oidc.body.issuer).toBe(as.body.issuer);
    expect(as.body.issuer).toBe(t.url);
    expect(as.body.code_challenge_methods_supported).toEqual(['S256']);
    expect(as.body.client_id_metadata_document_supported).toBe(true);
    const prm = await t.call('GET', '/.well-known/oauth-protected-resource');
    expect(prm.body.scopes_supported).toEqual(['mcp']);
    const jwks = await t.call('GET', '/oauth/jwks');
    expect(jwks.body.keys.length).toBeGreaterThanOrEqual(1);
  });
});

describe('registration (RFC 7591)', () => {
  it('registers public and confidential clients, refresh by default, and refuses script schemes and unknown grants', async () => {
    const pub = await t.call('POST', '/oauth/register', {
      redirect_uris: ['cursor://anysphere.cursor-retrieval/oauth/callback'],
      token_endpoint_auth_method: 'none',
      unknown_member: 1,
    });
    expect(pub.status).toBe(201);
    expect(pub.body.grant_types).toEqual(['authorization_code', 'refresh_token']);
    expect(pub.body.client_secret).toBeUndefined();
    const conf = await t.call('POST', '/oauth/register', { redirect_uris: ['https://agents.example/cb'] });
    expect(conf.status).toBe(201);
    expect(conf.body.client_secret).toMatch(/^ocs_/);
    expect(conf.body.client_secret_expires_at).toBe(0);
    for (const uri of [
      'javascript:alert(1)',
      'JavaScript:alert(1)',
      'data:text/html,x',
      'file:///etc/passwd',
      'http://evil.example/cb',
      'https://a.example/cb#frag',
    ]) {
      const res = await t.call('POST', '/oauth/register', { redirect_uris: [uri] });
      expect(res.status).toBe(400);
      expect(res.body.error).toBe('invalid_redirect_uri');
    }
    const grant = await t.call('POST', '/oauth/register', { redirect_uris: [REDIRECT], grant_types: ['client_credentials'] });
    expect(grant.body.error).toBe('invalid_client_metadata');
    const method = await t.call('POST', '/oauth/register', { redirect_uris: [REDIRECT], token_endpoint_auth_method: 'private_key_jwt' });
    expect(method.body.error).toBe('invalid_client_metadata');
  });
});

describe('registration limit', () => {
  it('answers 429 rate_limited with Retry-After past MCP_CLIENT_REGISTRATIONS_PER_HOUR from one address', async () => {
    const limited = await startTestApp({ env: { MCP_CLIENT_REGISTRATIONS_PER_HOUR: '2' } });
    try {
      const body = { redirect_uris: [REDIRECT], token_endpoint_auth_method: 'none' };
      expect((await limited.call('POST', '/oauth/register', body)).status).toBe(201);
      expect((await limited.call('POST', '/oauth/register', body)).status).toBe(201);
      const refused = await limited.call('POST', '/oauth/register', body);
      expectError(refused, 429, 'rate_limited');
      expect(refused.headers.get('retry-after')).toBe('3600');
      expect(await limited.db.selectFrom('oauth_clients').select('id').execute()).toHaveLength(2);
    } finally {
      await limited.close();
    }
  });
});

describe('authorization', () => {
  it('sends a signed-out person to sign in, coming back to the same request', async () => {
    const p = await person();
    const client = await register();
    const res = await t.call('GET', authorizeUrl(client.client_id, p, pkce().challenge, { prompt: 'consent', login_hint: 'x' }));
    expect(res.status).toBe(302);
    const location = new URL(res.headers.get('location')!);
    expect(location.pathname).toBe('/sign-in');
    expect(location.searchParams.get('return_to')).toMatch(/^\/oauth\/authorize\?/);
  });

  it('answers an unknown client or an unregistered redirect here, never by redirect', async () => {
    const p = await person();
    const client = await register();
    expectError(
      await t.call('GET', authorizeUrl('oac_01jg3b7f1dd3e7f1g5h9j3k7m1', p, pkce().challenge), undefined, { session: p.session }),
      400,
      'validation_failed',
    );
    const other = authorizeUrl(client.client_id, p, pkce().challenge).replace(encodeURIComponent(REDIRECT), encodeURIComponent('http://127.0.0.1:33418/other'));
    expectError(await t.call('GET', other, undefined, { session: p.session }), 400, 'validation_failed');
  });

  it('redirects problems back with error, state and iss once the client is known: PKCE, resource, scope', async () => {
    const p = await person();
    const client = await register();
    const cases: Array<[Record<string, string>, string]> = [
      [{ code_challenge_method: 'plain' }, 'invalid_request'],
      [{ code_challenge: 'short' }, 'invalid_request'],
      [{ resource: `${t.url}/mcp/mcp_01jg3b7f11q5r9s3t7v1w5x9y3` }, 'invalid_target'],
      [{ resource: 'https://elsewhere.example/mcp/x' }, 'invalid_target'],
      [{ scope: 'mcp admin' }, 'invalid_scope'],
      [{ response_type: 'token' }, 'unsupported_response_type'],
    ];
    for (const [extra, error] of cases) {
      const res = await t.call('GET', authorizeUrl(client.client_id, p, pkce().challenge, extra), undefined, { session: p.session });
      expect(res.status).toBe(302);
      const back = new URL(res.headers.get('location')!);
      expect(`${back.origin}${back.pathname}`).toBe(REDIRECT);
      expect(back.searchParams.get('error')).toBe(error);
      expect(back.searchParams.get('state')).toBe('st4te');
      expect(back.searchParams.get('iss')).toBe(t.url);
    }
  });

  it('refuses another person’s MCP server as the resource', async () => {
    const p = await person();
    const stranger = await person();
    const client = await register();
    const res = await t.call('GET', authorizeUrl(client.client_id, { ...p, resource: stranger.resource }, pkce().challenge), undefined, { session: p.session });
    expect(new URL(res.headers.get('location')!).searchParams.get('error')).toBe('invalid_target');
  });

  it('accepts a loopback redirect on another port (RFC 8252 §7.3)', async () => {
    const p = await person();
    const client = await register();
    const url = authorizeUrl(client.client_id, p, pkce().challenge).replace(encodeURIComponent('127.0.0.1:33418'), encodeURIComponent('127.0.0.1:40001'));
    const res = await t.call('GET', url, undefined, { session: p.session });
    expect(res.status).toBe(302);
    expect(new URL(res.headers.get('location')!).pathname).toBe('/oauth/consent');
  });

  it('shows the consent page with the client, redirect host and loopback warning, under a CSP that lets the form reach the client', async () => {
    const p = await person();
    const client = await register({ client_name: '<b>Evil</b> Client' });
    const res = await t.call('GET', authorizeUrl(client.client_id, p, pkce().challenge), undefined, { session: p.session });
    const consent = new URL(res.headers.get('location')!);
    const page = await fetch(`${t.url}${consent.pathname}${consent.search}`, { headers: { cookie: `__Host-cp_session=${p.session}` } });
    const text = await page.text();
    expect(text).toContain('&#60;b&#62;Evil&#60;/b&#62; Client');
    expect(text).toContain('127.0.0.1:33418');
    expect(text).toContain('on this computer');
    expect(page.headers.get('content-security-policy')).toContain("form-action 'self' http://127.0.0.1:33418");
    const stranger = await person();
    const foreign = await fetch(`${t.url}${consent.pathname}${consent.search}`, { headers: { cookie: `__Host-cp_session=${stranger.session}` } });
    expect(foreign.status).toBe(404);
  });

  it('denies with access_denied and changes nothing', async () => {
    const p = await person();
    const client = await register();
    const res = await t.call('GET', authorizeUrl(client.client_id, p, pkce().challenge), undefined, { session: p.session });
    const request = new URL(res.headers.get('location')!).searchParams.get('request')!;
    const denied = await t.call('POST', '/oauth/consent/decision', undefined, {
      ...form({ request, decision: 'deny' }),
      headers: { ...form({}).headers, ...sameOrigin(p.session) },
    });
    expect(denied.status).toBe(303);
    expect(new URL(denied.headers.get('location')!).searchParams.get('error')).toBe('access_denied');
    expect(await t.db.selectFrom('oauth_grants').select('id').where('user_id', '=', p.userId).execute()).toEqual([]);
    expectError(
      await t.call('POST', '/oauth/consent/decision', undefined, {
        ...form({ request, decision: 'approve' }),
        headers: { ...form({}).headers, ...sameOrigin(p.session) },
      }),
      404,
      'not_found',
    );
  });
});

describe('tokens', () => {
  it('exchanges a code once, with PKCE; the access token works on that one MCP server; a replayed code revokes it', async () => {
    const p = await person();
    const client = await register();
    const issued = await tokens(client.client_id, p);
    expect(issued.refresh_token).toMatch(/^mcprt_/);
    expect(issued.scope).toBe('mcp');
    expect((await mcpInitialize(p.resource, issued.access_token)).status).toBe(200);
    const other = await mintMcpServer(t, { orgId: p.orgId, token: p.token });
    const elsewhere = await mcpInitialize(`${t.url}/mcp/${other.id}`, issued.access_token);
    expect(elsewhere.status).toBe(401);
    expect(elsewhere.headers.get('www-authenticate')).toContain(`resource_metadata="${t.url}/.well-known/oauth-protected-resource/mcp/${other.id}"`);

    const replay = await t.call(
      'POST',
      '/oauth/token',
      undefined,
      form({ grant_type: 'authorization_code', code: issued.code, code_verifier: issued.verifier, redirect_uri: REDIRECT, client_id: client.client_id }),
    );
    expect(replay.status).toBe(400);
    expect(replay.body.error).toBe('invalid_grant');
    expect((await mcpInitialize(p.resource, issued.access_token)).status).toBe(401);
  });

  it('refuses a PKCE mismatch, a different redirect_uri, another client’s code and unsupported grants', async () => {
    const p = await person();
    const client = await register();
    const other = await register();
    const { challenge } = pkce();
    const back = await authorize(client.client_id, p, challenge);
    const code = back.searchParams.get('code')!;
    const base = { grant_type: 'authorization_code', code, redirect_uri: REDIRECT, client_id: client.client_id };
    const wrongVerifier = await t.call('POST', '/oauth/token', undefined, form({ ...base, code_verifier: pkce().verifier }));
    expect(wrongVerifier.body.error).toBe('invalid_grant');
    const otherClient = await t.call('POST', '/oauth/token', undefined, form({ ...base, client_id: other.client_id, code_verifier: pkce().verifier }));
    expect(otherClient.body.error).toBe('invalid_grant');
    const noVerifier = await t.call('POST', '/oauth/token', undefined, form(base));
    expect(noVerifier.body.error).toBe('invalid_request');
    const unsupported = await t.call('POST', '/oauth/token', undefined, form({ grant_type: 'client_credentials', client_id: client.client_id }));
    expect(unsupported.body.error).toBe('unsupported_grant_type');
    const unknownClient = await t.call(
      'POST',
      '/oauth/token',
      undefined,
      form({ ...base, client_id: 'oac_01jg3b7f1dd3e7f1g5h9j3k7m1', code_verifier: pkce().verifier }),
    );
    expect(unknownClient.status).toBe(401);
    expect(unknownClient.body.error).toBe('invalid_client');
  });

  it('rotates refresh tokens; a racing reuse within the grace window gets the same successor; a later reuse revokes the grant', async () => {
    const p = await person();
    const client = await register();
    const issued = await tokens(client.client_id, p);
    const refresh = (token: string) =>
      t.call('POST', '/oauth/token', undefined, form({ grant_type: 'refresh_token', refresh_token: token, client_id: client.client_id }));
    const first = await refresh(issued.refresh_token!);
    expect(first.status).toBe(200);
    expect(first.body.refresh_token).not.toBe(issued.refresh_token);
    const racing = await refresh(issued.refresh_token!);
    expect(racing.status).toBe(200);
    expect(racing.body.refresh_token).toBe(first.body.refresh_token);
    expect((await mcpInitialize(p.resource, racing.body.access_token)).status).toBe(200);

    // Past the window, the rotated token is a replay: the grant goes, every token with it.
    await t.db
      .updateTable('oauth_refresh_tokens')
      .set({ rotated_at: new Date(Date.now() - 120_000) })
      .where('rotated_at', 'is not', null)
      .execute();
    const late = await refresh(issued.refresh_token!);
    expect(late.body.error).toBe('invalid_grant');
    expect((await mcpInitialize(p.resource, first.body.access_token)).status).toBe(401);
    expect((await refresh(first.body.refresh_token)).body.error).toBe('invalid_grant');
    const audit = await t.db.selectFrom('audit_log').select('action').where('org_id', '=', p.orgId).where('target_type', '=', 'oauth_grant').execute();
    expect(audit.map((a) => a.action)).toEqual(expect.arrayContaining(['oauth_grant.created', 'oauth_grant.refreshed', 'oauth_grant.revoked']));
  });

  it('skips the consent page when the same client was granted the same before', async () => {
    const p = await person();
    const client = await register();
    await tokens(client.client_id, p);
    const res = await t.call('GET', authorizeUrl(client.client_id, p, pkce().challenge), undefined, { session: p.session });
    expect(new URL(res.headers.get('location')!).searchParams.get('code')).toMatch(/^oacd_/);
  });

  it('serves openid fully: an ID token with the nonce, and userinfo by GET and POST with the same sub', async () => {
    const p = await person();
    const client = await register({ scope: 'mcp openid profile email' });
    const issued = await tokens(client.client_id, p, { scope: 'mcp openid email', nonce: 'n-0S6_WzA2Mj' });
    const claims = JSON.parse(Buffer.from(issued.id_token!.split('.')[1]!, 'base64url').toString());
    expect(claims).toMatchObject({ iss: t.url, sub: p.userId, aud: client.client_id, nonce: 'n-0S6_WzA2Mj' });
    for (const method of ['GET', 'POST']) {
      const info = await t.call(method, '/oauth/userinfo', undefined, { headers: { authorization: `Bearer ${issued.access_token}` } });
      expect(info.status).toBe(200);
      expect(info.body.sub).toBe(p.userId);
      expect(info.body.email_verified).toBe(true);
      expect(info.body).not.toHaveProperty('name');
    }
    const plain = await tokens((await register()).client_id, p);
    const refused = await t.call('GET', '/oauth/userinfo', undefined, { headers: { authorization: `Bearer ${plain.access_token}` } });
    expect(refused.status).toBe(403);
    expect(refused.headers.get('www-authenticate')).toContain('error="insufficient_scope"');
    const none = await t.call('GET', '/oauth/userinfo');
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toBe('Bearer realm="mcp-control-plane"');
  });

  it('answers 403 insufficient_scope on the MCP endpoint for a token without mcp', async () => {
    const p = await person();
    const client = await register({ scope: 'openid' });
    const issued = await tokens(client.client_id, p, { scope: 'openid' });
    const res = await mcpInitialize(p.resource, issued.access_token);
    expect(res.status).toBe(403);
    expect(res.headers.get('www-authenticate')).toContain('error="insufficient_scope"');
    expect(res.headers.get('www-authenticate')).toContain('scope="mcp"');
  });

  it('authenticates confidential clients by Basic (form-encoded halves) and by post', async () => {
    const p = await person();
    const basic = await register({ token_endpoint_auth_method: 'client_secret_basic' });
    const { verifier, challenge } = pkce();
    const code = (await authorize(basic.client_id, p, challenge)).searchParams.get('code')!;
    const wrong = await t.call('POST', '/oauth/token', undefined, {
      ...form({ grant_type: 'authorization_code', code, code_verifier: verifier, redirect_uri: REDIRECT }),
      headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${Buffer.from(`${basic.client_id}:nope`).toString('base64')}` },
    });
    expect(wrong.status).toBe(401);
    expect(wrong.body.error).toBe('invalid_client');
    expect(wrong.headers.get('www-authenticate')).toContain('Basic');
    const ok = await t.call('POST', '/oauth/token', undefined, {
      ...form({ grant_type: 'authorization_code', code, code_verifier: verifier, redirect_uri: REDIRECT }),
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        authorization: `Basic ${Buffer.from(`${basic.client_id}:${encodeURIComponent(basic.client_secret!)}`).toString('base64')}`,
      },
    });
    expect(ok.status).toBe(200);
  });
});

describe('revocation and loss of access', () => {
  it('revokes access and refresh tokens (RFC 7009), answering 200 whatever the token', async () => {
    const p = await person();
    const client = await register();
    const issued = await tokens(client.client_id, p);
    const revoke = (token: string) => t.call('POST', '/oauth/revoke', undefined, form({ token, client_id: client.client_id }));
    expect((await revoke('mcprt_unknown')).status).toBe(200);
    expect((await revoke(issued.access_token)).status).toBe(200);
    expect((await mcpInitialize(p.resource, issued.access_token)).status).toBe(401);
    expect((await revoke(issued.refresh_token!)).status).toBe(200);
    const refreshed = await t.call(
      'POST',
      '/oauth/token',
      undefined,
      form({ grant_type: 'refresh_token', refresh_token: issued.refresh_token!, client_id: client.client_id }),
    );
    expect(refreshed.body.error).toBe('invalid_grant');
  });

  it('stops tokens when the member is suspended, and when the MCP server token is rotated or the server deleted', async () => {
    const p = await person();
    const client = await register();
    const issued = await tokens(client.client_id, p);
    const rotated = await t
      .as({ orgId: p.orgId, token: p.token })
      .op('rotateMcpServerToken', { params: { id: p.server.server.user_toolbox_id, mcpId: p.server.id } });
    expect(rotated.status).toBe(200);
    expect((await mcpInitialize(p.resource, issued.access_token)).status).toBe(401);
    // The client asks again: the consent page comes back, and the new grant works.
    const reauthorized = await tokens(client.client_id, p);
    expect((await mcpInitialize(p.resource, reauthorized.access_token)).status).toBe(200);

    const d = await person();
    const doomed = await tokens(client.client_id, d);
    expect(
      (await t.as({ orgId: d.orgId, token: d.token }).op('deleteMcpServer', { params: { id: d.server.server.user_toolbox_id, mcpId: d.server.id } })).status,
    ).toBe(204);
    expect((await mcpInitialize(d.resource, doomed.access_token)).status).toBe(401);
    const refreshedAfterDelete = await t.call(
      'POST',
      '/oauth/token',
      undefined,
      form({ grant_type: 'refresh_token', refresh_token: doomed.refresh_token!, client_id: client.client_id }),
    );
    expect(refreshedAfterDelete.body.error).toBe('invalid_grant');

    const q = await person();
    const again = await tokens(client.client_id, q);
    await t.db.updateTable('memberships').set({ status: 'suspended' }).where('user_id', '=', q.userId).execute();
    expect((await mcpInitialize(q.resource, again.access_token)).status).toBe(401);
    const refreshed = await t.call(
      'POST',
      '/oauth/token',
      undefined,
      form({ grant_type: 'refresh_token', refresh_token: again.refresh_token!, client_id: client.client_id }),
    );
    expect(refreshed.body.error).toBe('invalid_grant');
  });
});

describe('grants: what a person authorized, and what administrators see', () => {
  it('lists the person’s grants and withdraws one: its tokens stop, and it is audited', async () => {
    const p = await person();
    const client = await register({ client_name: 'Claude Code' });
    const issued = await tokens(client.client_id, p);
    const mine = await t.as({ session: p.session }).op('listMyOAuthGrants', {});
    expect(mine.status).toBe(200);
    expect(mine.body.data).toEqual([
      expect.objectContaining({ mcp_server_id: p.server.id, scope: 'mcp', client: { client_id: client.client_id, name: 'Claude Code', kind: 'registered' } }),
    ]);
    const grantId = mine.body.data[0]!.id;
    const stranger = await person();
    expectError(await t.as({ session: stranger.session }).op('revokeMyOAuthGrant', { params: { grantId } }), 404, 'not_found');
    expect((await t.as({ session: p.session }).op('revokeMyOAuthGrant', { params: { grantId } })).status).toBe(204);
    expect((await mcpInitialize(p.resource, issued.access_token)).status).toBe(401);
    expect((await t.as({ session: p.session }).op('listMyOAuthGrants', {})).body.data).toEqual([]);
    const entry = await t.db
      .selectFrom('audit_log')
      .select(['action', 'actor_id'])
      .where('target_id', '=', grantId)
      .where('action', '=', 'oauth_grant.revoked')
      .executeTakeFirst();
    expect(entry).toEqual({ action: 'oauth_grant.revoked', actor_id: p.userId });
  });

  it('shows administrators the grants in their organization; an Owner’s only an Owner withdraws', async () => {
    const p = await person();
    const client = await register();
    await tokens(client.client_id, p);
    const admin = await t.factories.member(p.orgId, { roles: ['admin'] });
    const adminToken = await t.factories.token(p.orgId, admin);
    const listed = await t.as({ orgId: p.orgId, token: adminToken }).op('listOAuthGrants', { query: { user_id: p.userId } });
    expect(listed.status).toBe(200);
    expect(listed.body.data).toHaveLength(1);
    const other = await person();
    expect((await t.as({ orgId: other.orgId, token: other.token }).op('listOAuthGrants', {})).body.data).toEqual([]);
    const grantId = listed.body.data[0]!.id;
    expectError(await t.as({ orgId: other.orgId, token: other.token }).op('revokeOAuthGrant', { params: { grantId } }), 404, 'not_found');
    expectError(await t.as({ orgId: p.orgId, token: adminToken }).op('revokeOAuthGrant', { params: { grantId } }), 403, 'permission_escalation');
    expect((await t.as({ orgId: p.orgId, token: p.token }).op('revokeOAuthGrant', { params: { grantId } })).status).toBe(204);
  });
});

describe('Client ID Metadata Documents', () => {
  async function serveDocument(document: (url: string) => unknown) {
    const { createServer } = await import('node:http');
    const server = createServer((req, res) => {
      const url = `http://127.0.0.1:${(server.address() as { port: number }).port}${req.url}`;
      res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=600' });
      res.end(JSON.stringify(document(url)));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}/client.json`, close: () => new Promise((r) => server.close(r)) };
  }

  it('takes a client by its metadata document’s URL: fetched, checked, public, with refresh', async () => {
    const doc = await serveDocument((url) => ({ client_id: url, client_name: 'Doc client', redirect_uris: [REDIRECT], token_endpoint_auth_method: 'none' }));
    try {
      const p = await person();
      const issued = await tokens(doc.url, p);
      expect(issued.refresh_token).toMatch(/^mcprt_/);
      expect((await mcpInitialize(p.resource, issued.access_token)).status).toBe(200);
      const grants = await t.as({ session: p.session }).op('listMyOAuthGrants', {});
      expect(grants.body.data[0]!.client).toEqual({ client_id: doc.url, name: 'Doc client', kind: 'metadata_document' });
    } finally {
      await doc.close();
    }
  });

  it('refuses a document whose client_id is not its URL, and a document on a private address, without redirecting', async () => {
    const doc = await serveDocument(() => ({ client_id: 'https://someone-else.example/client.json', redirect_uris: [REDIRECT] }));
    try {
      const p = await person();
      expectError(await t.call('GET', authorizeUrl(doc.url, p, pkce().challenge), undefined, { session: p.session }), 400, 'validation_failed');
      expectError(
        await t.call('GET', authorizeUrl('http://10.1.2.3/client.json', p, pkce().challenge), undefined, { session: p.session }),
        400,
        'validation_failed',
      );
    } finally {
      await doc.close();
    }
  });
});

describe('signing keys', () => {
  it('rotates (cli oauth-keys rotate): new tokens get the new key, tokens of the retired one still work, both are published', async () => {
    const kidOf = (jwt: string) => JSON.parse(Buffer.from(jwt.split('.')[0]!, 'base64url').toString()).kid as string;
    const p = await person();
    const client = await register();
    const before = await tokens(client.client_id, p);
    const retired = await retireSigningKeys(t.db);
    expect(retired).toContain(kidOf(before.access_token));
    // A running server looks again within minutes; here, at once.
    await signingKeysOf(t.deps).signing(Date.now() + 10 * 60_000);
    const after = await tokens(client.client_id, p);
    expect(kidOf(after.access_token)).not.toBe(kidOf(before.access_token));
    expect((await mcpInitialize(p.resource, before.access_token)).status).toBe(200);
    expect((await mcpInitialize(p.resource, after.access_token)).status).toBe(200);
    const kids = (await t.call('GET', '/oauth/jwks')).body.keys.map((k: { kid: string }) => k.kid);
    expect(kids).toEqual(expect.arrayContaining([kidOf(before.access_token), kidOf(after.access_token)]));
  });
});

describe('organizations that require a second factor', () => {
  it('refuses the consent decision of a session that has not shown one (403 mfa_setup_required)', async () => {
    const p = await person({ requireMfa: true });
    const client = await register();
    const res = await t.call('GET', authorizeUrl(client.client_id, p, pkce().challenge), undefined, { session: p.session });
    const request = new URL(res.headers.get('location')!).searchParams.get('request')!;
    const weak = await t.factories.session(p.userId);
    expectError(
      await t.call('POST', '/oauth/consent/decision', undefined, {
        ...form({ request, decision: 'approve' }),
        headers: { ...form({}).headers, ...sameOrigin(weak) },
      }),
      403,
      'mfa_setup_required',
    );
  });
});
