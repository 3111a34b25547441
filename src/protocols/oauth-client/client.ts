import { createHash, randomBytes } from 'node:crypto';
import { OutboundRefused, OutboundSession, refuseUrl, type OutboundLimits } from '../../outbound/client';

/**
 * The server as an OAuth client of upstream providers, for connections: discovery of the
 * authorization server from an MCP server's URL (RFC 9728 protected-resource metadata, then
 * RFC 8414 or OpenID discovery), dynamic registration (RFC 7591), PKCE S256, the
 * authorization URL with `resource` (RFC 8707), code exchange, refresh, revocation (RFC 7009).
 * Every request goes through the outbound guard with a deadline and a size cap.
 */

/** The endpoints of an authorization server this server uses. */
export interface ProviderEndpoints {
  /** The issuer (RFC 8414), when discovered: the callback's `iss` must equal it (RFC 9207). */
  issuer: string | null;
  authorization_endpoint: string;
  token_endpoint: string;
  revocation_endpoint: string | null;
  registration_endpoint: string | null;
  /** Scopes the protected resource (or the server) says it supports; the default ask when a connector names none. */
  scopes_supported: string[];
  /**
   * The server says its authorization responses carry `iss` (RFC 9207): a response without
   * it is then refused, since a mix-up attacker's server would simply leave it out. Absent in
   * what was stored before this was kept: false.
   */
  iss_parameter_supported?: boolean;
}

/** The client this server is at a provider: configured on the connector, or registered by us. */
export interface OAuthClientCredentials {
  client_id: string;
  client_secret: string | null;
  auth_method: 'none' | 'client_secret_post' | 'client_secret_basic';
}

export interface TokenSet {
  access_token: string;
  refresh_token: string | null;
  /** Epoch milliseconds, or null when the provider gave no lifetime. */
  expires_at: number | null;
  token_type: string;
  /** The granted scopes, when the provider said. */
  scope: string[] | null;
}

/** The provider refused (an OAuth error answer), or could not be reached / answered nonsense. */
export class OAuthFailure extends Error {
  override readonly name = 'OAuthFailure';
  constructor(
    readonly kind: 'refused' | 'unreachable',
    /** The OAuth `error` code when the provider gave one (`invalid_grant`). */
    readonly error: string | null,
    /** For a person: what happened, without secrets. */
    message: string,
    /** For the operator's log. */
    readonly detail: string = message,
  ) {
    super(message);
  }
}

const JSON_CAP = 256 * 1024;

function limitsOf(limits: OutboundLimits): OutboundLimits {
  return { ...limits, maxBytes: Math.min(limits.maxBytes, JSON_CAP) };
}

async function readJson(response: Response): Promise<unknown> {
  const text = await response.text();
  try {
    return JSON.parse(text);
  } catch {
    // Some providers (GitHub without Accept) answer token requests form-encoded.
    if ((response.headers.get('content-type') ?? '').includes('application/x-www-form-urlencoded')) {
      return Object.fromEntries(new URLSearchParams(text));
    }
    return undefined;
  }
}

/** One guarded request answered with JSON; null for a 4xx the caller may try elsewhere. */
async function fetchJson(limits: OutboundLimits, url: string, init: RequestInit = {}): Promise<{ status: number; body: unknown; headers: Headers }> {
  const session = new OutboundSession(limitsOf(limits));
  try {
    const response = await session.fetch(url, { ...init, headers: { accept: 'application/json', ...(init.headers as Record<string, string> | undefined) } });
    return { status: response.status, body: await readJson(response), headers: response.headers };
  } catch (err) {
    const detail = err instanceof OutboundRefused ? err.detail : String(err);
    throw new OAuthFailure(
      'unreachable',
      null,
      err instanceof OutboundRefused ? err.message : 'The authorization server could not be reached.',
      `${url}: ${detail}`,
    );
  } finally {
    session.close();
  }
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown): string | null => (typeof v === 'string' && v !== '' ? v : null);

// ---------------------------------------------------------------------------------------
// Discovery
// ---------------------------------------------------------------------------------------

/** `resource_metadata="…"` of a Bearer challenge (RFC 9728 §5.1). */
export function resourceMetadataUrl(wwwAuthenticate: string | null): string | null {
  if (!wwwAuthenticate) return null;
  return /resource_metadata="([^"]+)"/i.exec(wwwAuthenticate)?.[1] ?? /resource_metadata=([^\s,]+)/i.exec(wwwAuthenticate)?.[1] ?? null;
}

/** `https://host/a/b` → `https://host/.well-known/<name>/a/b` (RFC 8414 §3.1, RFC 9728 §3.1). */
function wellKnown(base: URL, name: string, withPath: boolean): string {
  const path = withPath && base.pathname !== '/' ? base.pathname.replace(/\/+$/, '') : '';
  return `${base.origin}/.well-known/${name}${path}`;
}

/** The MCP server's challenge, asked without credentials: an `initialize` it will refuse with a 401. */
async function challengeOf(mcpUrl: string, limits: OutboundLimits): Promise<string | null> {
  try {
    const { status, headers } = await fetchJson(limits, mcpUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 0,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'mcp-control-plane', version: '0.1.0' } },
      }),
    });
    return status === 401 ? headers.get('www-authenticate') : null;
  } catch {
    return null;
  }
}

interface ProtectedResource {
  authorization_servers: string[];
  scopes_supported: string[];
}

async function protectedResource(mcpUrl: string, limits: OutboundLimits, challenge: string | null): Promise<ProtectedResource | null> {
  const base = new URL(mcpUrl);
  const fromChallenge = resourceMetadataUrl(challenge ?? (await challengeOf(mcpUrl, limits)));
  const candidates = [
    ...(fromChallenge ? [fromChallenge] : []),
    wellKnown(base, 'oauth-protected-resource', true),
    wellKnown(base, 'oauth-protected-resource', false),
  ];
  for (const url of [...new Set(candidates)]) {
    const { status, body } = await fetchJson(limits, url);
    if (status !== 200 || !isRecord(body)) continue;
    const servers = Array.isArray(body.authorization_servers) ? body.authorization_servers.filter((s): s is string => typeof s === 'string') : [];
    if (servers.length === 0) continue;
    const resource = str(body.resource);
    // RFC 9728 §3.3: metadata about another resource is not this one's.
    if (resource !== null && resource.replace(/\/+$/, '') !== mcpUrl.replace(/\/+$/, '')) continue;
    const scopes = Array.isArray(body.scopes_supported) ? body.scopes_supported.filter((s): s is string => typeof s === 'string') : [];
    return { authorization_servers: servers, scopes_supported: scopes };
  }
  return null;
}

/** RFC 8414 metadata, then OpenID discovery, at the places MCP clients try for an issuer with a path. */
async function authorizationServer(issuer: string, limits: OutboundLimits): Promise<Record<string, unknown> | null> {
  const base = new URL(issuer);
  const hasPath = base.pathname !== '/' && base.pathname !== '';
  const candidates = hasPath
    ? [
        wellKnown(base, 'oauth-authorization-server', true),
        wellKnown(base, 'openid-configuration', true),
        `${issuer.replace(/\/+$/, '')}/.well-known/openid-configuration`,
      ]
    : [wellKnown(base, 'oauth-authorization-server', false), wellKnown(base, 'openid-configuration', false)];
  for (const url of candidates) {
    const { status, body } = await fetchJson(limits, url);
    if (status !== 200 || !isRecord(body)) continue;
    // RFC 8414 §3.3: the issuer must be the one the metadata was asked for.
    if (str(body.issuer)?.replace(/\/+$/, '') !== issuer.replace(/\/+$/, '')) continue;
    return body;
  }
  return null;
}

/**
 * Where to authorize for an MCP server: its protected-resource metadata names the
 * authorization server, whose metadata gives the endpoints. A server without
 * protected-resource metadata is taken to be its own authorization server (as MCP clients
 * did before RFC 9728). Throws OAuthFailure('unreachable') when nothing usable is found.
 */
export async function discoverProvider(mcpUrl: string, limits: OutboundLimits, challenge: string | null = null): Promise<ProviderEndpoints> {
  const resource = await protectedResource(mcpUrl, limits, challenge);
  const issuer = resource?.authorization_servers[0] ?? new URL(mcpUrl).origin;
  const metadata = await authorizationServer(issuer, limits);
  const authorize = str(metadata?.authorization_endpoint);
  const token = str(metadata?.token_endpoint);
  if (!metadata || !authorize || !token) {
    throw new OAuthFailure(
      'unreachable',
      null,
      'The MCP server does not say where to authorize (no usable OAuth metadata).',
      `no authorization server metadata for ${issuer}`,
    );
  }
  // The member's browser is sent there: never a javascript: or data: URL an upstream names, nor
  // plain http to a public host (the guard's rule for the server's own calls).
  const refusal = refuseUrl(authorize, limits.policy);
  if (refusal) {
    throw new OAuthFailure(
      'unreachable',
      null,
      `The authorization server's authorization endpoint ${refusal}.`,
      `${issuer} names authorization_endpoint ${JSON.stringify(authorize.slice(0, 200))}, which ${refusal}`,
    );
  }
  const methods = Array.isArray(metadata.code_challenge_methods_supported) ? metadata.code_challenge_methods_supported : null;
  if (methods && !methods.includes('S256')) {
    throw new OAuthFailure(
      'unreachable',
      null,
      'The authorization server does not support PKCE with S256.',
      `${issuer} lists code_challenge_methods_supported ${JSON.stringify(methods)}`,
    );
  }
  const scopes = resource?.scopes_supported.length
    ? resource.scopes_supported
    : Array.isArray(metadata.scopes_supported)
      ? metadata.scopes_supported.filter((s): s is string => typeof s === 'string')
      : [];
  return {
    issuer: str(metadata.issuer),
    authorization_endpoint: authorize,
    token_endpoint: token,
    revocation_endpoint: str(metadata.revocation_endpoint),
    registration_endpoint: str(metadata.registration_endpoint),
    scopes_supported: scopes,
    iss_parameter_supported: metadata.authorization_response_iss_parameter_supported === true,
  };
}

// ---------------------------------------------------------------------------------------
// Registration, PKCE, the authorization URL
// ---------------------------------------------------------------------------------------

/** Registers this server as a client of the provider for one redirect URI (RFC 7591). */
export async function registerClient(
  endpoints: ProviderEndpoints,
  redirectUri: string,
  clientName: string,
  limits: OutboundLimits,
): Promise<OAuthClientCredentials> {
  if (!endpoints.registration_endpoint) {
    throw new OAuthFailure(
      'refused',
      null,
      'The authorization server offers no dynamic registration; give the connector a client id.',
      'no registration_endpoint',
    );
  }
  const { status, body } = await fetchJson(limits, endpoints.registration_endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      client_name: clientName,
      redirect_uris: [redirectUri],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
      application_type: 'web',
    }),
  });
  const clientId = isRecord(body) ? str(body.client_id) : null;
  if ((status !== 201 && status !== 200) || !isRecord(body) || !clientId) {
    const error = isRecord(body) ? str(body.error) : null;
    throw new OAuthFailure(
      'refused',
      error,
      `The authorization server refused to register this server as a client${error ? ` (${error})` : ''}.`,
      `registration answered ${status}`,
    );
  }
  const secret = str(body.client_secret);
  const method = str(body.token_endpoint_auth_method);
  return {
    client_id: clientId,
    client_secret: secret,
    auth_method: secret === null ? 'none' : method === 'client_secret_basic' ? 'client_secret_basic' : 'client_secret_post',
  };
}

const base64url = (bytes: Buffer) => bytes.toString('base64url');

export function pkcePair(): { verifier: string; challenge: string } {
  const verifier = base64url(randomBytes(32));
  return { verifier, challenge: base64url(createHash('sha256').update(verifier).digest()) };
}

export function newState(): string {
  return base64url(randomBytes(24));
}

export function authorizationUrl(input: {
  endpoint: string;
  clientId: string;
  redirectUri: string;
  scopes: readonly string[];
  state: string;
  challenge: string;
  resource: string;
}): string {
  const url = new URL(input.endpoint);
  url.searchParams.set('response_type', 'code');
  url.searchParams.set('client_id', input.clientId);
  url.searchParams.set('redirect_uri', input.redirectUri);
  if (input.scopes.length > 0) url.searchParams.set('scope', input.scopes.join(' '));
  url.searchParams.set('state', input.state);
  url.searchParams.set('code_challenge', input.challenge);
  url.searchParams.set('code_challenge_method', 'S256');
  url.searchParams.set('resource', input.resource);
  return url.href;
}

// ---------------------------------------------------------------------------------------
// Token endpoint and revocation
// ---------------------------------------------------------------------------------------

function clientAuth(client: OAuthClientCredentials, form: URLSearchParams): Record<string, string> {
  if (client.client_secret !== null && client.auth_method === 'client_secret_basic') {
    const encode = (v: string) => encodeURIComponent(v);
    return { authorization: `Basic ${Buffer.from(`${encode(client.client_id)}:${encode(client.client_secret)}`).toString('base64')}` };
  }
  form.set('client_id', client.client_id);
  if (client.client_secret !== null) form.set('client_secret', client.client_secret);
  return {};
}

async function tokenRequest(
  tokenEndpoint: string,
  client: OAuthClientCredentials,
  form: URLSearchParams,
  limits: OutboundLimits,
  now: number,
): Promise<TokenSet> {
  const headers = { 'content-type': 'application/x-www-form-urlencoded', ...clientAuth(client, form) };
  const { status, body } = await fetchJson(limits, tokenEndpoint, { method: 'POST', headers, body: form });
  const error = isRecord(body) ? str(body.error) : null;
  if (status >= 500) throw new OAuthFailure('unreachable', null, `The token endpoint answered ${status}.`);
  if (status !== 200 || error || !isRecord(body)) {
    const description = isRecord(body) ? str(body.error_description) : null;
    throw new OAuthFailure(
      'refused',
      error,
      `The provider refused the request${error ? ` (${error})` : ` (HTTP ${status})`}${description ? `: ${description.slice(0, 200)}` : ''}.`,
    );
  }
  const access = str(body.access_token);
  if (!access) throw new OAuthFailure('unreachable', null, 'The token endpoint answered without an access token.');
  const expiresIn = typeof body.expires_in === 'number' ? body.expires_in : typeof body.expires_in === 'string' ? Number(body.expires_in) : NaN;
  const scope = str(body.scope);
  return {
    access_token: access,
    refresh_token: str(body.refresh_token),
    expires_at: Number.isFinite(expiresIn) ? now + expiresIn * 1000 : null,
    token_type: str(body.token_type) ?? 'Bearer',
    scope: scope === null ? null : scope.split(/[\s,]+/).filter(Boolean),
  };
}

export function exchangeCode(
  input: { tokenEndpoint: string; client: OAuthClientCredentials; code: string; verifier: string; redirectUri: string; resource: string },
  limits: OutboundLimits,
): Promise<TokenSet> {
  const form = new URLSearchParams({
    grant_type: 'authorization_code',
    code: input.code,
    redirect_uri: input.redirectUri,
    code_verifier: input.verifier,
    resource: input.resource,
  });
  return tokenRequest(input.tokenEndpoint, input.client, form, limits, Date.now());
}

/** A new token set from the refresh token; keeps the old refresh token when the provider does not rotate it. */
export async function refreshTokens(
  input: { tokenEndpoint: string; client: OAuthClientCredentials; refreshToken: string; resource: string },
  limits: OutboundLimits,
): Promise<TokenSet> {
  const form = new URLSearchParams({ grant_type: 'refresh_token', refresh_token: input.refreshToken, resource: input.resource });
  const tokens = await tokenRequest(input.tokenEndpoint, input.client, form, limits, Date.now());
  return { ...tokens, refresh_token: tokens.refresh_token ?? input.refreshToken };
}

/** Asks the provider to revoke a token (RFC 7009). Best effort: failures are reported, not thrown. */
export async function revokeToken(
  input: { revocationEndpoint: string; client: OAuthClientCredentials; token: string; hint: 'access_token' | 'refresh_token' },
  limits: OutboundLimits,
): Promise<{ ok: boolean; detail: string | null }> {
  const form = new URLSearchParams({ token: input.token, token_type_hint: input.hint });
  const headers = { 'content-type': 'application/x-www-form-urlencoded', ...clientAuth(input.client, form) };
  try {
    const { status } = await fetchJson(limits, input.revocationEndpoint, { method: 'POST', headers, body: form });
    return status === 200 ? { ok: true, detail: null } : { ok: false, detail: `revocation answered ${status}` };
  } catch (err) {
    return { ok: false, detail: err instanceof OAuthFailure ? err.detail : String(err) };
  }
}
