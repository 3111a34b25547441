import { timingSafeEqual } from 'node:crypto';
import type { Db } from '../../db/database';
import { hashSecret } from '../../lib/crypto';
import { OutboundRefused, OutboundSession, type OutboundPolicy } from '../../outbound/client';

/** The scopes this server grants; `offline_access` is accepted and changes nothing (refresh tokens come with the grant type). */
export const SUPPORTED_SCOPES = ['mcp', 'openid', 'profile', 'email', 'offline_access'] as const;
export const GRANT_TYPES = ['authorization_code', 'refresh_token'] as const;
export const AUTH_METHODS = ['none', 'client_secret_basic', 'client_secret_post'] as const;
export type AuthMethod = (typeof AUTH_METHODS)[number];
export type GrantType = (typeof GRANT_TYPES)[number];

/** A client as stored and as `/oauth/register` answers it (RFC 7591 §3.2.1), defaults applied. */
export interface ClientInformation {
  redirect_uris: string[];
  token_endpoint_auth_method: AuthMethod;
  grant_types: GrantType[];
  response_types: ['code'];
  client_name: string;
  scope: string;
  application_type: 'native' | 'web';
  client_uri?: string;
  logo_uri?: string;
  contacts?: string[];
  tos_uri?: string;
  policy_uri?: string;
  software_id?: string;
  software_version?: string;
}

export interface OAuthClient {
  id: string;
  kind: 'registered' | 'metadata_document';
  secretHash: string | null;
  info: ClientInformation;
}

// Schemes a browser would run or read locally instead of handing the code to an application.
const SCRIPT_SCHEMES = new Set(['javascript:', 'data:', 'file:', 'blob:', 'about:', 'vbscript:', 'filesystem:', 'view-source:', 'ws:', 'wss:']);
const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]']);

/**
 * Why a redirect URI cannot be registered, or null: https, http on a loopback host (native
 * apps, RFC 8252 §7.3), or a private-use scheme (`cursor://…`, `vscode://…`, RFC 8252 §7.1);
 * never a fragment, user information, or a scheme a browser runs itself.
 */
export function redirectUriProblem(raw: string): string | null {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return 'is not an absolute URI';
  }
  const scheme = url.protocol.toLowerCase();
  if (SCRIPT_SCHEMES.has(scheme)) return `uses ${scheme.slice(0, -1)}:, which is never a redirect target`;
  if (raw.includes('#')) return 'has a fragment';
  if (url.username || url.password) return 'carries user information';
  if (scheme === 'http:' && !LOOPBACK_HOSTS.has(url.hostname.toLowerCase()))
    return 'must use https, or http on a loopback address (localhost, 127.0.0.1, [::1])';
  if (scheme !== 'https:' && scheme !== 'http:' && !/^[a-z][a-z0-9+.-]*:$/.test(scheme)) return 'has a scheme that is not valid';
  return null;
}

/** A loopback redirect (http on a loopback host): its port may differ from the registered one (RFC 8252 §7.3). */
export function isLoopbackRedirect(raw: string): boolean {
  try {
    const url = new URL(raw);
    return url.protocol === 'http:' && LOOPBACK_HOSTS.has(url.hostname.toLowerCase());
  } catch {
    return false;
  }
}

/** The registered redirect URI the request's one matches: exactly, or a loopback one but for its port. Null for none. */
export function matchRedirectUri(registered: readonly string[], given: string): string | null {
  if (registered.includes(given)) return given;
  if (!isLoopbackRedirect(given)) return null;
  const withoutPort = (raw: string) => {
    const url = new URL(raw);
    url.port = '';
    return url.href;
  };
  const wanted = withoutPort(given);
  return registered.some((uri) => isLoopbackRedirect(uri) && withoutPort(uri) === wanted) ? given : null;
}

export type MetadataError = { error: 'invalid_redirect_uri' | 'invalid_client_metadata'; error_description: string };

const OPTIONAL_URIS = ['client_uri', 'logo_uri', 'tos_uri', 'policy_uri'] as const;

/**
 * The client information for registration metadata (RFC 7591 §2), defaults applied, or the
 * RFC 7591 §3.2.2 error. The router checked the members' types; what RFC 7591 leaves to the
 * server is checked here. Scopes this server does not grant are dropped rather than refused:
 * clients copy scope lists from elsewhere, and a scope never granted gives nothing.
 */
export function clientInformation(metadata: Record<string, unknown>, options: { publicOnly?: boolean } = {}): ClientInformation | MetadataError {
  const redirects = metadata.redirect_uris;
  if (!Array.isArray(redirects) || redirects.length === 0 || !redirects.every((u): u is string => typeof u === 'string')) {
    return { error: 'invalid_redirect_uri', error_description: 'redirect_uris must list at least one redirect URI.' };
  }
  for (const [i, uri] of redirects.entries()) {
    const problem = redirectUriProblem(uri);
    if (problem) return { error: 'invalid_redirect_uri', error_description: `redirect_uris[${i}] ${problem}.` };
  }
  const method = (metadata.token_endpoint_auth_method ?? (options.publicOnly ? 'none' : 'client_secret_basic')) as string;
  if (!(AUTH_METHODS as readonly string[]).includes(method)) {
    return {
      error: 'invalid_client_metadata',
      error_description: `token_endpoint_auth_method "${method}" is not supported; use none, client_secret_basic or client_secret_post.`,
    };
  }
  if (options.publicOnly && method !== 'none') {
    return {
      error: 'invalid_client_metadata',
      error_description: 'A client identified by its metadata document is public: token_endpoint_auth_method must be none.',
    };
  }
  const grants = (metadata.grant_types ?? [...GRANT_TYPES]) as unknown[];
  const unknownGrant = grants.find((g) => !(GRANT_TYPES as readonly unknown[]).includes(g));
  if (unknownGrant !== undefined) {
    return { error: 'invalid_client_metadata', error_description: `grant_types contains ${JSON.stringify(unknownGrant)}, which this server does not support.` };
  }
  if (!grants.includes('authorization_code')) {
    return { error: 'invalid_client_metadata', error_description: 'grant_types must include authorization_code: it is how every token starts.' };
  }
  const responses = (metadata.response_types ?? ['code']) as unknown[];
  if (responses.some((r) => r !== 'code')) return { error: 'invalid_client_metadata', error_description: 'response_types may only be ["code"].' };
  const asked = typeof metadata.scope === 'string' ? metadata.scope.split(' ').filter((s) => (SUPPORTED_SCOPES as readonly string[]).includes(s)) : [];
  const applicationType = metadata.application_type ?? 'native';
  if (applicationType !== 'native' && applicationType !== 'web') {
    return { error: 'invalid_client_metadata', error_description: 'application_type must be native or web.' };
  }
  const info: ClientInformation = {
    redirect_uris: [...new Set(redirects)],
    token_endpoint_auth_method: method as AuthMethod,
    grant_types: [...new Set(grants)] as GrantType[],
    response_types: ['code'],
    client_name:
      typeof metadata.client_name === 'string' && metadata.client_name.trim() !== '' ? metadata.client_name.trim().slice(0, 200) : hostOf(redirects[0]!),
    scope: (asked.length > 0 ? [...new Set(asked)] : SUPPORTED_SCOPES).join(' '),
    application_type: applicationType,
  };
  for (const name of OPTIONAL_URIS) {
    const value = metadata[name];
    if (value === undefined) continue;
    if (typeof value !== 'string' || !/^https:\/\//i.test(value))
      return { error: 'invalid_client_metadata', error_description: `${name} must be an https URL.` };
    info[name] = value;
  }
  if (Array.isArray(metadata.contacts)) info.contacts = metadata.contacts.filter((c): c is string => typeof c === 'string').slice(0, 10);
  if (typeof metadata.software_id === 'string') info.software_id = metadata.software_id.slice(0, 200);
  if (typeof metadata.software_version === 'string') info.software_version = metadata.software_version.slice(0, 100);
  return info;
}

function hostOf(uri: string): string {
  try {
    const url = new URL(uri);
    return url.host || url.protocol.slice(0, -1);
  } catch {
    return 'MCP client';
  }
}

/** The client's registered secret matches (compared in constant time over the hashes). */
export function secretMatches(client: OAuthClient, secret: string): boolean {
  if (!client.secretHash) return false;
  const given = Buffer.from(hashSecret(secret));
  const stored = Buffer.from(client.secretHash);
  return given.length === stored.length && timingSafeEqual(given, stored);
}

// ---- Client ID Metadata Documents ----

/** A metadata document is read once per this long at least, and at most once a day is trusted without asking again. */
const DOCUMENT_FRESH_MIN_MS = 5 * 60_000;
const DOCUMENT_FRESH_MAX_MS = 24 * 3600_000;
const DOCUMENT_MAX_BYTES = 5 * 1024;
const DOCUMENT_TIMEOUT_MS = 5_000;

export class ClientLookupError extends Error {}

/**
 * Why a `client_id` cannot be a metadata document's URL (draft-ietf-oauth-client-id-metadata-
 * document §3), or null: https with a path, no fragment, user information or dot segments.
 * Plain http is taken only for a loopback or private address the outbound policy allows
 * (a development or test deployment).
 */
export function metadataDocumentUrlProblem(raw: string, policy: OutboundPolicy): string | null {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return 'is not a URL';
  }
  if (url.href !== raw && `${url.href}` !== raw) return 'is not in its normal form';
  if (url.hash || raw.includes('#')) return 'has a fragment';
  if (url.username || url.password) return 'carries user information';
  if (url.pathname === '/' || url.pathname === '') return 'has no path';
  if (/\/\.\.?(\/|$)/.test(url.pathname)) return 'has dot segments';
  if (url.protocol === 'http:' && !(policy.allowLoopback || policy.allowPrivate)) return 'must use https';
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return 'must use https';
  return null;
}

/** How long an answer may be kept, from its Cache-Control (max-age, no-store), within bounds. */
function freshFor(cacheControl: string | null): number {
  const maxAge = cacheControl ? /(?:^|,)\s*max-age=(\d+)/i.exec(cacheControl) : null;
  const wanted = cacheControl && /no-store|no-cache/i.test(cacheControl) ? 0 : maxAge ? Number(maxAge[1]) * 1000 : 3600_000;
  return Math.min(DOCUMENT_FRESH_MAX_MS, Math.max(DOCUMENT_FRESH_MIN_MS, wanted));
}

/**
 * Fetches a client's metadata document through the outbound guard (public addresses only,
 * unless the operator allows more; no redirects; a small size and time budget) and checks it:
 * its `client_id` must be the URL it was fetched from, and its metadata must be acceptable as
 * a public client's registration would be.
 */
export async function fetchMetadataDocument(url: string, policy: OutboundPolicy): Promise<{ info: ClientInformation; freshMs: number }> {
  const session = new OutboundSession({ policy, timeoutMs: DOCUMENT_TIMEOUT_MS, maxBytes: DOCUMENT_MAX_BYTES });
  let document: unknown;
  let cacheControl: string | null;
  try {
    const response = await session.fetch(url, { headers: { accept: 'application/json' } });
    if (response.status !== 200) throw new ClientLookupError(`The client's metadata document (${url}) answered ${response.status}, not 200.`);
    cacheControl = response.headers.get('cache-control');
    const text = await response.text();
    try {
      document = JSON.parse(text);
    } catch {
      throw new ClientLookupError(`The client's metadata document (${url}) is not JSON.`);
    }
  } catch (err) {
    if (err instanceof ClientLookupError) throw err;
    if (err instanceof OutboundRefused) throw new ClientLookupError(`The client's metadata document (${url}) could not be fetched: ${err.message}`);
    throw new ClientLookupError(`The client's metadata document (${url}) could not be fetched.`);
  } finally {
    session.close();
  }
  if (typeof document !== 'object' || document === null || Array.isArray(document))
    throw new ClientLookupError(`The client's metadata document (${url}) is not a JSON object.`);
  const metadata = document as Record<string, unknown>;
  if (metadata.client_id !== url)
    throw new ClientLookupError(
      `The client's metadata document names client_id ${JSON.stringify(metadata.client_id)}, not the URL it was fetched from (${url}).`,
    );
  if ('client_secret' in metadata || 'client_secret_expires_at' in metadata)
    throw new ClientLookupError('A client metadata document must not carry a client secret.');
  const info = clientInformation(metadata, { publicOnly: true });
  if ('error' in info) throw new ClientLookupError(`The client's metadata document is not acceptable: ${info.error_description}`);
  return { info, freshMs: freshFor(cacheControl) };
}

/** The client a `client_id` names: a registered one, or the one a metadata document describes (fetched when not fresh). Null for none. */
export async function findClient(db: Db, clientId: string, policy: OutboundPolicy, now = new Date()): Promise<OAuthClient | null> {
  const row = await db
    .selectFrom('oauth_clients')
    .select(['id', 'kind', 'secret_hash', 'metadata', 'fresh_until'])
    .where('id', '=', clientId)
    .executeTakeFirst();
  if (row && (row.kind === 'registered' || (row.fresh_until && row.fresh_until > now))) {
    return { id: row.id, kind: row.kind as OAuthClient['kind'], secretHash: row.secret_hash, info: row.metadata as unknown as ClientInformation };
  }
  if (!/^https?:\/\//i.test(clientId)) return null;
  const problem = metadataDocumentUrlProblem(clientId, policy);
  if (problem) throw new ClientLookupError(`client_id ${problem}: a client_id that is a URL names a Client ID Metadata Document.`);
  const { info, freshMs } = await fetchMetadataDocument(clientId, policy);
  const freshUntil = new Date(now.getTime() + freshMs);
  await db
    .insertInto('oauth_clients')
    .values({ id: clientId, kind: 'metadata_document', metadata: JSON.stringify(info), fresh_until: freshUntil })
    .onConflict((oc) => oc.column('id').doUpdateSet({ metadata: JSON.stringify(info), fresh_until: freshUntil }))
    .execute();
  return { id: clientId, kind: 'metadata_document', secretHash: null, info };
}
