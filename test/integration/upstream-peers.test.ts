/**
 * The loopback upstream peers themselves: each answers a real MCP SDK client the way the
 * connections tests rely on (keys refused with 401, whoami names the member, pagination, SSE,
 * the OAuth flow by hand, and the published reference server over both transports).
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import type { OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import type { OAuthClientInformationMixed, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { createHash, randomBytes } from 'node:crypto';
import { manyTools, startApiKeyUpstream, startEverythingServer, startOAuthUpstream, useUpstream, type OAuthUpstream } from '../support/upstream-mcp';

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
    for (const [key, member] of [
      ['key-a', 'alice'],
      ['key-b', 'bob'],
    ] as const) {
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
    const result = await withClient(up.peer.url, 'streamable_http', { authorization: 'Bearer key-a' }, (c) =>
      c.callTool({ name: 'echo', arguments: { text: 'hi' } }),
    );
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

const REDIRECT = 'http://127.0.0.1:9/connection/conn_1/callback';

function pkce() {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

const form = (body: Record<string, string>, headers: Headers = {}) => ({
  method: 'POST',
  headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
  body: new URLSearchParams(body).toString(),
});

async function json(res: Response): Promise<Record<string, any>> {
  return (await res.json()) as Record<string, any>;
}

/** Register a public client, authorize with PKCE (following the redirect by hand), exchange the code. */
async function connect(peer: OAuthUpstream, extra: Record<string, string> = {}) {
  const reg = await json(
    await fetch(peer.endpoints.register, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ redirect_uris: [REDIRECT], token_endpoint_auth_method: 'none' }),
    }),
  );
  const { verifier, challenge } = pkce();
  const authorize = new URL(peer.endpoints.authorize);
  const params = {
    response_type: 'code',
    client_id: reg.client_id,
    redirect_uri: REDIRECT,
    code_challenge: challenge,
    code_challenge_method: 'S256',
    state: 's1',
    resource: peer.resource,
    ...extra,
  };
  for (const [k, v] of Object.entries(params)) authorize.searchParams.set(k, v);
  const back = new URL((await fetch(authorize, { redirect: 'manual' })).headers.get('location')!);
  const tokens = await json(
    await fetch(
      peer.endpoints.token,
      form({
        grant_type: 'authorization_code',
        code: back.searchParams.get('code')!,
        redirect_uri: REDIRECT,
        code_verifier: verifier,
        client_id: reg.client_id,
        resource: peer.resource,
      }),
    ),
  );
  return { clientId: reg.client_id as string, tokens };
}

const mcpPost = (url: string, accessToken?: string) =>
  fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...(accessToken ? { authorization: `Bearer ${accessToken}` } : {}),
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
  });

const whoami = (url: string, accessToken: string, transport: 'streamable_http' | 'sse' = 'streamable_http') =>
  withClient(url, transport, { authorization: `Bearer ${accessToken}` }, async (c) => textOf(await c.callTool({ name: 'whoami', arguments: {} })));

describe('OAuth upstream', () => {
  const up = useUpstream(() => startOAuthUpstream({ tools: manyTools(3), pageSize: 2, extraRedirectParams: { session_state: 'sess-1' } }));

  it('runs the whole flow by hand: discovery from the 401, registration, PKCE, exchange, whoami, refresh rotation, revocation', async () => {
    const peer = up.peer;
    // Discovery: the 401 names the protected-resource metadata, which names the authorization server.
    const unauthorized = await mcpPost(peer.url);
    expect(unauthorized.status).toBe(401);
    const resourceMetadataUrl = /resource_metadata="([^"]+)"/.exec(unauthorized.headers.get('www-authenticate') ?? '')?.[1];
    expect(resourceMetadataUrl).toBe(`${peer.origin}/.well-known/oauth-protected-resource/mcp`);
    const resourceMetadata = await json(await fetch(resourceMetadataUrl!));
    expect(resourceMetadata).toMatchObject({ resource: peer.url, authorization_servers: [peer.issuer] });
    expect(await json(await fetch(`${peer.origin}/.well-known/oauth-protected-resource`))).toEqual(resourceMetadata);
    const as = await json(await fetch(`${resourceMetadata.authorization_servers[0]}/.well-known/oauth-authorization-server`));
    expect(as).toMatchObject({ issuer: peer.issuer, code_challenge_methods_supported: ['S256'], authorization_response_iss_parameter_supported: true });
    expect((await fetch(`${peer.origin}/.well-known/openid-configuration`)).status).toBe(404);

    // Registration (RFC 7591): a public client.
    const registered = await fetch(as.registration_endpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        client_name: 'control plane',
        redirect_uris: [REDIRECT],
        token_endpoint_auth_method: 'none',
        grant_types: ['authorization_code', 'refresh_token'],
      }),
    });
    expect(registered.status).toBe(201);
    const client = await json(registered);
    expect(client.client_id).toEqual(expect.any(String));
    expect(client.client_secret).toBeUndefined();
    expect(peer.clients.map((c) => c.client_id)).toContain(client.client_id);

    // Authorization with PKCE; the server consents on its own and redirects back.
    const { verifier, challenge } = pkce();
    const authorize = new URL(as.authorization_endpoint);
    for (const [k, v] of Object.entries({
      response_type: 'code',
      client_id: client.client_id,
      redirect_uri: REDIRECT,
      code_challenge: challenge,
      code_challenge_method: 'S256',
      state: 'st-42',
      scope: 'mcp:tools',
      resource: peer.resource,
      login_hint: 'alice',
    }))
      authorize.searchParams.set(k, v);
    const redirected = await fetch(authorize, { redirect: 'manual' });
    expect(redirected.status).toBe(302);
    const back = new URL(redirected.headers.get('location')!);
    expect(`${back.origin}${back.pathname}`).toBe(REDIRECT);
    expect(back.searchParams.get('state')).toBe('st-42');
    expect(back.searchParams.get('iss')).toBe(peer.issuer);
    expect(back.searchParams.get('session_state')).toBe('sess-1');
    const code = back.searchParams.get('code')!;
    expect(peer.authorizeRequests.at(-1)).toMatchObject({ outcome: 'code', params: { resource: peer.resource } });

    // A wrong verifier fails, and burns the code.
    const wrong = await fetch(
      as.token_endpoint,
      form({ grant_type: 'authorization_code', code, redirect_uri: REDIRECT, code_verifier: pkce().verifier, client_id: client.client_id }),
    );
    expect(wrong.status).toBe(400);
    expect((await json(wrong)).error).toBe('invalid_grant');
    const burned = await fetch(
      as.token_endpoint,
      form({ grant_type: 'authorization_code', code, redirect_uri: REDIRECT, code_verifier: verifier, client_id: client.client_id }),
    );
    expect((await json(burned)).error).toBe('invalid_grant');

    // Again with a fresh code and the right verifier.
    const second = pkce();
    authorize.searchParams.set('code_challenge', second.challenge);
    const code2 = new URL((await fetch(authorize, { redirect: 'manual' })).headers.get('location')!).searchParams.get('code')!;
    const exchanged = await fetch(
      as.token_endpoint,
      form({
        grant_type: 'authorization_code',
        code: code2,
        redirect_uri: REDIRECT,
        code_verifier: second.verifier,
        client_id: client.client_id,
        resource: peer.resource,
      }),
    );
    expect(exchanged.status).toBe(200);
    const tokens = await json(exchanged);
    expect(tokens).toMatchObject({
      token_type: 'Bearer',
      expires_in: 3600,
      scope: 'mcp:tools',
      access_token: expect.any(String),
      refresh_token: expect.any(String),
    });
    expect(peer.tokenRequests.at(-1)).toMatchObject({ grant_type: 'authorization_code', client_auth: 'none', resource: peer.resource, status: 200 });
    // The code is single-use.
    const replay = await fetch(
      as.token_endpoint,
      form({ grant_type: 'authorization_code', code: code2, redirect_uri: REDIRECT, code_verifier: second.verifier, client_id: client.client_id }),
    );
    expect((await json(replay)).error).toBe('invalid_grant');

    // The token reaches the MCP server, which knows whose it is.
    expect(await whoami(peer.url, tokens.access_token)).toBe('alice');
    expect(await whoami(peer.urls.sse, tokens.access_token, 'sse')).toBe('alice');
    const { tools, pages } = await withClient(peer.url, 'streamable_http', { authorization: `Bearer ${tokens.access_token}` }, listAll);
    expect([tools.length, pages]).toEqual([5, 3]);

    // Refresh with rotation: the old refresh token is refused afterwards.
    const refreshed = await json(
      await fetch(
        as.token_endpoint,
        form({ grant_type: 'refresh_token', refresh_token: tokens.refresh_token, client_id: client.client_id, resource: peer.resource }),
      ),
    );
    expect(refreshed.refresh_token).not.toBe(tokens.refresh_token);
    expect(await whoami(peer.url, refreshed.access_token)).toBe('alice');
    const reused = await fetch(as.token_endpoint, form({ grant_type: 'refresh_token', refresh_token: tokens.refresh_token, client_id: client.client_id }));
    expect([reused.status, (await json(reused)).error]).toEqual([400, 'invalid_grant']);

    // Revocation (RFC 7009) of the refresh token takes its access tokens along.
    const revoked = await fetch(
      as.revocation_endpoint,
      form({ token: refreshed.refresh_token, token_type_hint: 'refresh_token', client_id: client.client_id }),
    );
    expect(revoked.status).toBe(200);
    expect(peer.revoked.at(-1)).toMatchObject({ token: refreshed.refresh_token, kind: 'refresh_token', client_id: client.client_id });
    const after = await mcpPost(peer.url, refreshed.access_token);
    expect(after.status).toBe(401);
    expect(after.headers.get('www-authenticate')).toContain('error="invalid_token"');
    const dead = await fetch(as.token_endpoint, form({ grant_type: 'refresh_token', refresh_token: refreshed.refresh_token, client_id: client.client_id }));
    expect((await json(dead)).error).toBe('invalid_grant');
  });

  it('expires access tokens on demand; refresh still works until revokeAll', async () => {
    const peer = up.peer;
    peer.nextUser('bob');
    const { clientId, tokens } = await connect(peer);
    expect(await whoami(peer.url, tokens.access_token)).toBe('bob');
    peer.expireAccessTokens();
    expect((await mcpPost(peer.url, tokens.access_token)).status).toBe(401);
    const refreshed = await json(
      await fetch(peer.endpoints.token, form({ grant_type: 'refresh_token', refresh_token: tokens.refresh_token, client_id: clientId })),
    );
    expect(await whoami(peer.url, refreshed.access_token)).toBe('bob');
    peer.revokeAll();
    expect((await mcpPost(peer.url, refreshed.access_token)).status).toBe(401);
    const refused = await fetch(peer.endpoints.token, form({ grant_type: 'refresh_token', refresh_token: refreshed.refresh_token, client_id: clientId }));
    expect([refused.status, (await json(refused)).error]).toEqual([400, 'invalid_grant']);
  });

  it('denies on demand, and refuses bad authorization requests', async () => {
    const peer = up.peer;
    const { clientId } = await connect(peer);
    const { challenge } = pkce();
    const go = async (params: Record<string, string>) => {
      const url = new URL(peer.endpoints.authorize);
      for (const [k, v] of Object.entries({
        response_type: 'code',
        client_id: clientId,
        redirect_uri: REDIRECT,
        code_challenge: challenge,
        code_challenge_method: 'S256',
        state: 'x',
        ...params,
      }))
        url.searchParams.set(k, v);
      return fetch(url, { redirect: 'manual' });
    };
    peer.denyNext();
    const denied = new URL((await go({})).headers.get('location')!);
    expect([denied.searchParams.get('error'), denied.searchParams.get('state'), denied.searchParams.get('iss')]).toEqual(['access_denied', 'x', peer.issuer]);
    expect(new URL((await go({})).headers.get('location')!).searchParams.get('code')).toEqual(expect.any(String));
    expect(new URL((await go({ code_challenge_method: 'plain' })).headers.get('location')!).searchParams.get('error')).toBe('invalid_request');
    expect(new URL((await go({ code_challenge: '' })).headers.get('location')!).searchParams.get('error')).toBe('invalid_request');
    // Unknown client or a redirect URI the client did not register: shown, never redirected.
    expect((await go({ redirect_uri: 'http://127.0.0.1:9/other' })).status).toBe(400);
    expect((await go({ client_id: 'nobody' })).status).toBe(400);
  });

  it('registers confidential clients with a secret and checks it at the token endpoint', async () => {
    const peer = up.peer;
    const reg = await json(
      await fetch(peer.endpoints.register, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ redirect_uris: [REDIRECT] }),
      }),
    );
    expect(reg).toMatchObject({ token_endpoint_auth_method: 'client_secret_basic', client_secret: expect.any(String), client_secret_expires_at: 0 });
    const { verifier, challenge } = pkce();
    const url = new URL(peer.endpoints.authorize);
    for (const [k, v] of Object.entries({
      response_type: 'code',
      client_id: reg.client_id,
      redirect_uri: REDIRECT,
      code_challenge: challenge,
      code_challenge_method: 'S256',
    }))
      url.searchParams.set(k, v);
    const code = new URL((await fetch(url, { redirect: 'manual' })).headers.get('location')!).searchParams.get('code')!;
    const exchange = { grant_type: 'authorization_code', code, redirect_uri: REDIRECT, code_verifier: verifier };
    const noSecret = await fetch(peer.endpoints.token, form({ ...exchange, client_id: reg.client_id }));
    expect([noSecret.status, (await json(noSecret)).error]).toEqual([401, 'invalid_client']);
    const basic = `Basic ${Buffer.from(`${encodeURIComponent(reg.client_id)}:${encodeURIComponent(reg.client_secret)}`).toString('base64')}`;
    const ok = await fetch(peer.endpoints.token, form(exchange, { authorization: basic }));
    expect(ok.status).toBe(200);
    expect(peer.tokenRequests.at(-1)).toMatchObject({ client_auth: 'client_secret_basic', client_id: reg.client_id });
  });
});

describe('OAuth upstream with the SDK client doing the OAuth', () => {
  it('discovers, registers, authorizes, and refreshes on its own after expireAccessTokens', async () => {
    const peer = await startOAuthUpstream({ user: 'frank' });
    const state: { client?: OAuthClientInformationMixed; tokens?: OAuthTokens; verifier?: string; authorizeUrl?: URL } = {};
    const provider: OAuthClientProvider = {
      redirectUrl: REDIRECT,
      clientMetadata: {
        redirect_uris: [REDIRECT],
        client_name: 'sdk',
        token_endpoint_auth_method: 'none',
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
      },
      clientInformation: () => state.client,
      saveClientInformation: (c) => void (state.client = c),
      tokens: () => state.tokens,
      saveTokens: (t) => void (state.tokens = t),
      redirectToAuthorization: (url) => void (state.authorizeUrl = url),
      saveCodeVerifier: (v) => void (state.verifier = v),
      codeVerifier: () => state.verifier!,
    };
    const open = async () => {
      const client = new Client({ name: 'sdk-oauth', version: '1.0.0' });
      await client.connect(new StreamableHTTPClientTransport(new URL(peer.url), { authProvider: provider }));
      return client;
    };
    try {
      const first = new StreamableHTTPClientTransport(new URL(peer.url), { authProvider: provider });
      await expect(new Client({ name: 'sdk-oauth', version: '1.0.0' }).connect(first)).rejects.toBeInstanceOf(UnauthorizedError);
      const back = new URL((await fetch(state.authorizeUrl!, { redirect: 'manual' })).headers.get('location')!);
      await first.finishAuth(back.searchParams.get('code')!);
      let client = await open();
      expect(textOf(await client.callTool({ name: 'whoami', arguments: {} }))).toBe('frank');
      await client.close();
      const before = state.tokens!;
      peer.expireAccessTokens();
      client = await open();
      expect(textOf(await client.callTool({ name: 'whoami', arguments: {} }))).toBe('frank');
      await client.close();
      expect(state.tokens!.refresh_token).not.toBe(before.refresh_token);
      expect(peer.tokenRequests.map((r) => [r.grant_type, r.resource, r.status])).toEqual([
        ['authorization_code', peer.resource, 200],
        ['refresh_token', peer.resource, 200],
      ]);
    } finally {
      await peer.close();
    }
  });
});

describe('OAuth upstream variants', () => {
  it('without registration, with metadata only at openid-configuration and a pre-registered client', async () => {
    const peer = await startOAuthUpstream({
      registration: false,
      metadata: 'openid',
      clients: [{ client_id: 'fixed', client_secret: 's3cret', token_endpoint_auth_method: 'client_secret_post', redirect_uris: [REDIRECT] }],
      user: 'erin',
      accessTokenTtl: 60,
    });
    try {
      expect((await fetch(`${peer.origin}/.well-known/oauth-authorization-server`)).status).toBe(404);
      const oidc = await json(await fetch(`${peer.origin}/.well-known/openid-configuration`));
      expect(oidc.registration_endpoint).toBeUndefined();
      expect((await fetch(peer.endpoints.register, { method: 'POST', body: '{}' })).status).toBe(404);
      const { verifier, challenge } = pkce();
      const url = new URL(oidc.authorization_endpoint);
      for (const [k, v] of Object.entries({
        response_type: 'code',
        client_id: 'fixed',
        redirect_uri: REDIRECT,
        code_challenge: challenge,
        code_challenge_method: 'S256',
      }))
        url.searchParams.set(k, v);
      const code = new URL((await fetch(url, { redirect: 'manual' })).headers.get('location')!).searchParams.get('code')!;
      const tokens = await json(
        await fetch(
          oidc.token_endpoint,
          form({ grant_type: 'authorization_code', code, redirect_uri: REDIRECT, code_verifier: verifier, client_id: 'fixed', client_secret: 's3cret' }),
        ),
      );
      expect(tokens.expires_in).toBe(60);
      expect(await whoami(peer.url, tokens.access_token)).toBe('erin');
      expect(peer.tokenRequests.at(-1)?.client_auth).toBe('client_secret_post');
    } finally {
      await peer.close();
    }
  });
});

describe('the reference server (@modelcontextprotocol/server-everything)', () => {
  it.each(['streamableHttp', 'sse'] as const)('lists its tools over %s', async (transport) => {
    const server = await startEverythingServer(transport);
    try {
      expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/(mcp|sse)$/);
      const { tools } = await withClient(server.url, transport === 'sse' ? 'sse' : 'streamable_http', {}, listAll);
      expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(['echo']));
      const echoed = await withClient(server.url, transport === 'sse' ? 'sse' : 'streamable_http', {}, (c) =>
        c.callTool({ name: 'echo', arguments: { message: 'hello' } }),
      );
      expect(textOf(echoed)).toContain('hello');
    } finally {
      await server.close();
    }
  });
});
