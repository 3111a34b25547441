/**
 * An MCP upstream protected by its own OAuth authorization server, all on one loopback origin,
 * written by hand: RFC 9728 protected-resource metadata, RFC 8414 authorization-server metadata
 * (or only OIDC discovery, to test the fallback), RFC 7591 registration, the authorization code
 * grant with PKCE S256 (auto-consent), refresh with rotation, RFC 7009 revocation, RFC 9207 `iss`.
 * Tokens are opaque random strings kept in memory.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { readBody, sendJson, type Transport, type UpstreamTool } from './mcp';
import { startUpstreamServer, type UpstreamPeer } from './server';

export interface OAuthClientRecord {
  client_id: string;
  client_secret?: string;
  redirect_uris: string[];
  token_endpoint_auth_method: 'none' | 'client_secret_post' | 'client_secret_basic';
  grant_types: string[];
  response_types: string[];
  client_name?: string;
  scope?: string;
  /** Everything the client sent at registration. */
  metadata: Record<string, unknown>;
  registered_at: number;
}

export interface AuthorizeRequestRecord {
  at: number;
  params: Record<string, string>;
  /** What the server answered: a redirect with a code or an error, or a 400 page. */
  outcome: 'code' | 'denied' | 'error';
  error?: string;
}

export interface TokenRequestRecord {
  at: number;
  grant_type: string | null;
  client_id: string | null;
  /** How the client authenticated at the token endpoint. */
  client_auth: 'none' | 'client_secret_post' | 'client_secret_basic';
  resource: string | null;
  params: Record<string, string>;
  status: number;
  error?: string;
}

export interface RevocationRecord {
  at: number;
  token: string;
  token_type_hint: string | null;
  client_id: string | null;
  /** What the token was, as this server knew it. */
  kind: 'access_token' | 'refresh_token' | 'unknown';
}

export interface OAuthUpstreamOptions {
  /** Which endpoint `.url` names (both served): POST /mcp, or GET /sse + POST /messages. */
  transport?: Transport;
  tools?: UpstreamTool[];
  pageSize?: number;
  jsonResponse?: boolean;
  /** Access token lifetime in seconds; default 3600. */
  accessTokenTtl?: number;
  /** Default true; false: the token endpoint issues no refresh tokens. */
  refreshTokens?: boolean;
  /** Default true; false: the same refresh token stays valid after use. */
  rotateRefreshTokens?: boolean;
  /** Default true; false: no registration_endpoint, /register answers 404. */
  registration?: boolean;
  /** Where the AS metadata is served: RFC 8414 (default), OIDC discovery only, or both. */
  metadata?: 'oauth' | 'openid' | 'both';
  /** scopes_supported in both metadata documents; default ['mcp:tools']. */
  scopes?: string[];
  /** The user an authorization is for when neither `nextUser` nor `login_hint` says; default 'user'. */
  user?: string;
  /** Added to every successful authorization redirect, e.g. { session_state: 'x' }. */
  extraRedirectParams?: Record<string, string>;
  /** Default true: the redirect carries `iss` (RFC 9207). */
  issParameter?: boolean;
  /** Clients known before any registration (a connector with a fixed client id). */
  clients?: Array<Partial<OAuthClientRecord> & { client_id: string; redirect_uris: string[] }>;
  delayMs?: number;
}

export interface OAuthUpstream extends UpstreamPeer {
  /** The authorization server's issuer (the origin). */
  issuer: string;
  /** The protected resource (RFC 8707 `resource`): the MCP endpoint `<origin>/mcp`. */
  resource: string;
  endpoints: {
    resourceMetadata: string;
    authorizationServerMetadata: string;
    authorize: string;
    token: string;
    register: string;
    revoke: string;
  };
  clients: OAuthClientRecord[];
  revoked: RevocationRecord[];
  tokenRequests: TokenRequestRecord[];
  authorizeRequests: AuthorizeRequestRecord[];
  /** The next authorization answers error=access_denied. */
  denyNext(): void;
  /** The next authorization is for this user (whoami reports it). */
  nextUser(user: string): void;
  /** Every access token issued so far is expired now (refresh tokens still work). */
  expireAccessTokens(): void;
  /** Every access and refresh token dies: MCP answers 401, refresh gets invalid_grant. */
  revokeAll(): void;
  /** The token endpoint waits this long before answering (settable): concurrent refreshes overlap. */
  tokenDelayMs: number;
  /** Token requests received so far, counted on arrival (tokenRequests records them once answered, after tokenDelayMs). */
  tokenRequestsReceived: number;
  /** Registers a client directly (as if pre-registered by an administrator). */
  addClient(client: Partial<OAuthClientRecord> & { client_id: string; redirect_uris: string[] }): OAuthClientRecord;
  /** Issues tokens without the authorize dance (a shortcut for tests that need a token only). */
  issueTokens(clientId: string, user: string, scope?: string): { access_token: string; refresh_token?: string };
}

interface CodeGrant {
  client_id: string;
  redirect_uri: string;
  challenge: string;
  scope: string;
  resource: string | null;
  user: string;
  expiresAt: number;
  used: boolean;
}

interface AccessToken {
  client_id: string;
  user: string;
  scope: string;
  expiresAt: number;
  revoked: boolean;
  /** The grant (authorization) it belongs to: revoking a refresh token kills the grant's access tokens. */
  grant: string;
}

interface RefreshToken {
  client_id: string;
  user: string;
  scope: string;
  revoked: boolean;
  used: boolean;
  grant: string;
}

const token = (bytes = 24) => randomBytes(bytes).toString('base64url');
const s256 = (verifier: string) => createHash('sha256').update(verifier).digest('base64url');

function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

function redirect(res: ServerResponse, location: string) {
  res.writeHead(302, { location, 'cache-control': 'no-store' }).end();
}

/** An MCP server and its authorization server on one loopback origin. */
export async function startOAuthUpstream(options: OAuthUpstreamOptions = {}): Promise<OAuthUpstream> {
  const ttlMs = (options.accessTokenTtl ?? 3600) * 1000;
  const scopes = options.scopes ?? ['mcp:tools'];
  const registration = options.registration ?? true;
  const metadataAt = options.metadata ?? 'oauth';
  const codes = new Map<string, CodeGrant>();
  const accessTokens = new Map<string, AccessToken>();
  const refreshTokens = new Map<string, RefreshToken>();
  let denyNext = false;
  let nextUser: string | null = null;
  // Filled in once the server listens (the handlers only run after that); declared first because they read it.
  // eslint-disable-next-line prefer-const
  let peer!: OAuthUpstream;
  const meta = () => ({
    resource: {
      resource: peer.resource,
      authorization_servers: [peer.issuer],
      scopes_supported: scopes,
      bearer_methods_supported: ['header'],
      resource_name: 'OAuth upstream (test peer)',
    },
    server: {
      issuer: peer.issuer,
      authorization_endpoint: peer.endpoints.authorize,
      token_endpoint: peer.endpoints.token,
      ...(registration ? { registration_endpoint: peer.endpoints.register } : {}),
      revocation_endpoint: peer.endpoints.revoke,
      scopes_supported: scopes,
      response_types_supported: ['code'],
      response_modes_supported: ['query'],
      grant_types_supported: ['authorization_code', 'refresh_token'],
      code_challenge_methods_supported: ['S256'],
      token_endpoint_auth_methods_supported: ['none', 'client_secret_post', 'client_secret_basic'],
      revocation_endpoint_auth_methods_supported: ['none', 'client_secret_post', 'client_secret_basic'],
      authorization_response_iss_parameter_supported: options.issParameter ?? true,
    },
  });

  function addClient(input: Partial<OAuthClientRecord> & { client_id: string; redirect_uris: string[] }): OAuthClientRecord {
    const method = input.token_endpoint_auth_method ?? (input.client_secret ? 'client_secret_basic' : 'none');
    const record: OAuthClientRecord = {
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      metadata: {},
      registered_at: Date.now(),
      ...input,
      token_endpoint_auth_method: method,
    };
    peer.clients.push(record);
    return record;
  }

  function findClient(id: string | null | undefined) {
    return id ? peer.clients.find((c) => c.client_id === id) : undefined;
  }

  function issue(clientId: string, user: string, scope: string, grant = token(8)) {
    const access = token();
    accessTokens.set(access, { client_id: clientId, user, scope, expiresAt: Date.now() + ttlMs, revoked: false, grant });
    const body: Record<string, unknown> = { access_token: access, token_type: 'Bearer', expires_in: Math.round(ttlMs / 1000), scope };
    if (options.refreshTokens ?? true) {
      const refresh = token();
      refreshTokens.set(refresh, { client_id: clientId, user, scope, revoked: false, used: false, grant });
      body.refresh_token = refresh;
    }
    return body;
  }

  async function register(req: IncomingMessage, res: ServerResponse) {
    let input: Record<string, unknown>;
    try {
      input = JSON.parse(await readBody(req)) as Record<string, unknown>;
    } catch {
      return sendJson(res, 400, { error: 'invalid_client_metadata', error_description: 'body is not JSON' });
    }
    const uris = input.redirect_uris;
    if (!Array.isArray(uris) || uris.length === 0 || !uris.every((u) => typeof u === 'string' && URL.canParse(u))) {
      return sendJson(res, 400, { error: 'invalid_redirect_uri', error_description: 'redirect_uris must be a non-empty list of URLs' });
    }
    // RFC 7591 §2: client_secret_basic when absent.
    const method = (input.token_endpoint_auth_method ?? 'client_secret_basic') as string;
    if (!['none', 'client_secret_post', 'client_secret_basic'].includes(method)) {
      return sendJson(res, 400, { error: 'invalid_client_metadata', error_description: `unsupported token_endpoint_auth_method ${method}` });
    }
    const client = addClient({
      client_id: `client_${token(9)}`,
      ...(method === 'none' ? {} : { client_secret: token(32) }),
      redirect_uris: uris as string[],
      token_endpoint_auth_method: method as OAuthClientRecord['token_endpoint_auth_method'],
      grant_types: (input.grant_types as string[] | undefined) ?? ['authorization_code', 'refresh_token'],
      response_types: (input.response_types as string[] | undefined) ?? ['code'],
      ...(typeof input.client_name === 'string' ? { client_name: input.client_name } : {}),
      ...(typeof input.scope === 'string' ? { scope: input.scope } : {}),
      metadata: input,
    });
    const { metadata: _m, registered_at, ...out } = client;
    sendJson(res, 201, {
      ...input,
      ...out,
      client_id_issued_at: Math.floor(registered_at / 1000),
      ...(client.client_secret ? { client_secret_expires_at: 0 } : {}),
    });
  }

  function authorize(res: ServerResponse, url: URL) {
    const params = Object.fromEntries(url.searchParams.entries());
    const record: AuthorizeRequestRecord = { at: Date.now(), params, outcome: 'error' };
    peer.authorizeRequests.push(record);
    const client = findClient(params.client_id);
    // Errors about the client or the redirect URI are shown, never redirected (RFC 6749 §4.1.2.1).
    if (!client) {
      record.error = 'invalid_client';
      return sendJson(res, 400, { error: 'invalid_client', error_description: 'unknown client_id' });
    }
    if (!params.redirect_uri || !client.redirect_uris.includes(params.redirect_uri)) {
      record.error = 'invalid_redirect_uri';
      return sendJson(res, 400, { error: 'invalid_request', error_description: 'redirect_uri is not one the client registered' });
    }
    const back = (extra: Record<string, string>) => {
      const target = new URL(params.redirect_uri!);
      for (const [k, v] of Object.entries(extra)) target.searchParams.set(k, v);
      if (params.state !== undefined) target.searchParams.set('state', params.state);
      if (options.issParameter ?? true) target.searchParams.set('iss', peer.issuer);
      redirect(res, target.toString());
    };
    const fail = (error: string, description: string) => {
      record.error = error;
      back({ error, error_description: description });
    };
    if (params.response_type !== 'code') return fail('unsupported_response_type', 'only response_type=code');
    if (!params.code_challenge) return fail('invalid_request', 'PKCE code_challenge is required');
    if (params.code_challenge_method !== 'S256') return fail('invalid_request', 'code_challenge_method must be S256');
    if (params.resource !== undefined && params.resource !== peer.resource) return fail('invalid_target', `unknown resource ${params.resource}`);
    if (denyNext) {
      denyNext = false;
      record.outcome = 'denied';
      record.error = 'access_denied';
      return back({ error: 'access_denied', error_description: 'the user said no' });
    }
    const user = nextUser ?? params.login_hint ?? options.user ?? 'user';
    nextUser = null;
    const code = token();
    codes.set(code, {
      client_id: client.client_id,
      redirect_uri: params.redirect_uri,
      challenge: params.code_challenge,
      scope: params.scope ?? scopes.join(' '),
      resource: params.resource ?? null,
      user,
      expiresAt: Date.now() + 60_000,
      used: false,
    });
    record.outcome = 'code';
    back({ code, ...(options.extraRedirectParams ?? {}) });
  }

  /** Client authentication at the token and revocation endpoints; null when it fails. */
  function authenticateClient(req: IncomingMessage, form: URLSearchParams) {
    let id = form.get('client_id');
    let secret = form.get('client_secret');
    let how: TokenRequestRecord['client_auth'] = secret ? 'client_secret_post' : 'none';
    const basic = /^Basic\s+(.+)$/i.exec(req.headers.authorization ?? '');
    if (basic) {
      const [u, p] = Buffer.from(basic[1]!, 'base64').toString('utf8').split(':');
      id = decodeURIComponent(u ?? '');
      secret = decodeURIComponent(p ?? '');
      how = 'client_secret_basic';
    }
    const client = findClient(id);
    const ok = !!client && (client.client_secret ? !!secret && safeEqual(secret, client.client_secret) : how === 'none');
    return { client: ok ? client! : null, id, how };
  }

  async function tokenEndpoint(req: IncomingMessage, res: ServerResponse) {
    const form = new URLSearchParams(await readBody(req));
    peer.tokenRequestsReceived++;
    if (peer.tokenDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, peer.tokenDelayMs).unref());
    const params = Object.fromEntries(form.entries());
    const { client, id, how } = authenticateClient(req, form);
    const record: TokenRequestRecord = {
      at: Date.now(),
      grant_type: form.get('grant_type'),
      client_id: id,
      client_auth: how,
      resource: form.get('resource'),
      params,
      status: 200,
    };
    peer.tokenRequests.push(record);
    const fail = (status: number, error: string, description: string) => {
      record.status = status;
      record.error = error;
      sendJson(res, status, { error, error_description: description }, status === 401 ? { 'www-authenticate': 'Basic realm="token"' } : {});
    };
    if (!client) return fail(401, 'invalid_client', 'client authentication failed');
    const resource = form.get('resource');
    if (resource !== null && resource !== peer.resource) return fail(400, 'invalid_target', `unknown resource ${resource}`);
    const grantType = form.get('grant_type');
    if (grantType === 'authorization_code') {
      const code = codes.get(form.get('code') ?? '');
      if (!code || code.used || code.expiresAt < Date.now() || code.client_id !== client.client_id) {
        return fail(400, 'invalid_grant', 'unknown, used or expired code');
      }
      code.used = true;
      if (form.get('redirect_uri') !== code.redirect_uri) return fail(400, 'invalid_grant', 'redirect_uri differs from the authorization request');
      const verifier = form.get('code_verifier');
      if (!verifier || s256(verifier) !== code.challenge) return fail(400, 'invalid_grant', 'PKCE verification failed');
      return sendJson(res, 200, issue(client.client_id, code.user, code.scope));
    }
    if (grantType === 'refresh_token') {
      const presented = form.get('refresh_token') ?? '';
      const refresh = refreshTokens.get(presented);
      if (!refresh || refresh.revoked || refresh.used || refresh.client_id !== client.client_id) {
        return fail(400, 'invalid_grant', 'unknown, used or revoked refresh token');
      }
      if (options.rotateRefreshTokens ?? true) {
        refresh.used = true;
        return sendJson(res, 200, issue(client.client_id, refresh.user, refresh.scope, refresh.grant));
      }
      const body = issue(client.client_id, refresh.user, refresh.scope, refresh.grant);
      refreshTokens.delete(body.refresh_token as string);
      return sendJson(res, 200, { ...body, refresh_token: presented });
    }
    return fail(400, 'unsupported_grant_type', `grant_type ${grantType ?? '(none)'}`);
  }

  async function revoke(req: IncomingMessage, res: ServerResponse) {
    const form = new URLSearchParams(await readBody(req));
    const { client, id } = authenticateClient(req, form);
    if (!client) return sendJson(res, 401, { error: 'invalid_client', error_description: 'client authentication failed' });
    const value = form.get('token');
    if (!value) return sendJson(res, 400, { error: 'invalid_request', error_description: 'token is required' });
    const access = accessTokens.get(value);
    const refresh = refreshTokens.get(value);
    if (access && access.client_id === client.client_id) access.revoked = true;
    if (refresh && refresh.client_id === client.client_id) {
      refresh.revoked = true;
      // RFC 7009 §2.1: the grant's access tokens go with it.
      for (const t of accessTokens.values()) if (t.grant === refresh.grant) t.revoked = true;
    }
    peer.revoked.push({
      at: Date.now(),
      token: value,
      token_type_hint: form.get('token_type_hint'),
      client_id: id,
      kind: access ? 'access_token' : refresh ? 'refresh_token' : 'unknown',
    });
    res.writeHead(200, { 'cache-control': 'no-store' }).end();
  }

  async function route(req: IncomingMessage, res: ServerResponse, url: URL): Promise<boolean> {
    const method = req.method ?? 'GET';
    const path = url.pathname;
    if (method === 'GET' && (path === '/.well-known/oauth-protected-resource/mcp' || path === '/.well-known/oauth-protected-resource')) {
      sendJson(res, 200, meta().resource);
      return true;
    }
    if (method === 'GET' && path === '/.well-known/oauth-authorization-server' && metadataAt !== 'openid') {
      sendJson(res, 200, meta().server);
      return true;
    }
    if (method === 'GET' && path === '/.well-known/openid-configuration' && metadataAt !== 'oauth') {
      sendJson(res, 200, { ...meta().server, subject_types_supported: ['public'], id_token_signing_alg_values_supported: ['RS256'] });
      return true;
    }
    if (method === 'POST' && path === '/register' && registration) {
      await register(req, res);
      return true;
    }
    if (method === 'GET' && path === '/authorize') {
      authorize(res, url);
      return true;
    }
    if (method === 'POST' && path === '/token') {
      await tokenEndpoint(req, res);
      return true;
    }
    if (method === 'POST' && path === '/revoke') {
      await revoke(req, res);
      return true;
    }
    return false;
  }

  const base = await startUpstreamServer({
    name: 'oauth-upstream',
    transport: options.transport,
    tools: options.tools,
    pageSize: options.pageSize,
    jsonResponse: options.jsonResponse,
    delayMs: options.delayMs,
    route,
    authenticate(req) {
      const bearer = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '');
      const presented = bearer ? bearer[1]!.trim() : null;
      const found = presented ? accessTokens.get(presented) : undefined;
      if (presented && found && !found.revoked && found.expiresAt > Date.now()) {
        return { caller: { member: found.user, credential: presented, clientId: found.client_id, scopes: found.scope.split(' ').filter(Boolean) } };
      }
      const challenge = [`Bearer resource_metadata="${peer.endpoints.resourceMetadata}"`];
      if (presented) challenge.push('error="invalid_token"', `error_description="${found ? 'expired or revoked' : 'unknown token'}"`);
      if (scopes.length) challenge.push(`scope="${scopes.join(' ')}"`);
      return {
        credential: presented,
        refuse: (res) => sendJson(res, 401, { error: presented ? 'invalid_token' : 'unauthorized' }, { 'www-authenticate': challenge.join(', ') }),
      };
    },
  });

  const origin = base.origin;
  peer = Object.assign(base as OAuthUpstream, {
    issuer: origin,
    resource: `${origin}/mcp`,
    endpoints: {
      resourceMetadata: `${origin}/.well-known/oauth-protected-resource/mcp`,
      authorizationServerMetadata: `${origin}/.well-known/oauth-authorization-server`,
      authorize: `${origin}/authorize`,
      token: `${origin}/token`,
      register: `${origin}/register`,
      revoke: `${origin}/revoke`,
    },
    clients: [],
    revoked: [],
    tokenRequests: [],
    authorizeRequests: [],
    tokenDelayMs: 0,
    tokenRequestsReceived: 0,
    denyNext() {
      denyNext = true;
    },
    nextUser(user: string) {
      nextUser = user;
    },
    expireAccessTokens() {
      const past = Date.now() - 1;
      for (const t of accessTokens.values()) t.expiresAt = past;
    },
    revokeAll() {
      for (const t of accessTokens.values()) t.revoked = true;
      for (const t of refreshTokens.values()) t.revoked = true;
    },
    addClient,
    issueTokens(clientId: string, user: string, scope = scopes.join(' ')) {
      const body = issue(clientId, user, scope);
      return { access_token: body.access_token as string, ...(body.refresh_token ? { refresh_token: body.refresh_token as string } : {}) };
    },
  }) as OAuthUpstream;
  for (const client of options.clients ?? []) addClient(client);
  return peer;
}
